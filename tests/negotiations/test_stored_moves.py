"""An outbound move is stored before it is sent: a pump that finds one stored sends that very
message again, or records it from the counterparty's Task, and never decides another.

The counterparty is a Parley seller behind the real gateway, served from this process with a
recorder in front (:class:`RecordingGateway`) that counts the JSON-RPC calls it gets and can lose
the answer to one of them — the move applied on their side, the answer never reaching us, as when
our worker dies after sending. The pumps run in the test's thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.db import connections
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agents.models import Agent, Intent, Run
from agents.services import runs, steps
from negotiations.client import move_message
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.negotiator import Usage
from negotiations.services import outbound
from negotiations.wire import Move
from tests.a2a_gateway.servers import HeldHook, InProcessGateway
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SENDS = frozenset({"SendMessage", "message/send"})
S = Negotiation.Status


class RecordingGateway(InProcessGateway):
    """The gateway (``build_app()``) served from this process; :attr:`calls` holds each JSON-RPC
    call it got as (method, messageId — "" for none). The answer to the ``lose``-th message sent
    (1-based) is lost: the gateway answers it in full, the caller gets a bare 502. With
    ``only_0_3`` the agent cards offer only their A2A 0.3 interface, as an Index peer's does
    (``message/send``, no ``tasks/get``)."""

    def __init__(self, *, lose: int = 0, only_0_3: bool = False) -> None:
        super().__init__()
        self.lose, self.only_0_3 = lose, only_0_3
        self.calls: list[tuple[str, str]] = []

    def listen(self, app: ASGIApp) -> None:
        async def recording(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
            elif scope["method"] == "GET" and self.only_0_3 and scope["path"].endswith("agent-card.json"):
                await app(scope, receive, self._card_0_3(send))
            elif scope["method"] == "POST":
                await self._post(app, scope, receive, send)
            else:
                await app(scope, receive, send)

        super().listen(recording)

    async def _post(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        request = json.loads(body)
        method = request.get("method", "")
        self.calls.append((method, request.get("params", {}).get("message", {}).get("messageId", "")))
        sent = [c for c in self.calls if c[0] in SENDS]

        async def replay() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        if method in SENDS and len(sent) == self.lose:

            async def swallow(message: Message) -> None:
                return None

            await app(scope, replay, swallow)
            await Response(status_code=502)(scope, receive, send)
            return
        await app(scope, replay, send)

    @staticmethod
    def _card_0_3(send: Send) -> Send:
        """``send``, with the card's interfaces narrowed to A2A 0.3."""
        held: list[Message] = []

        async def narrowing(message: Message) -> None:
            if message["type"] == "http.response.start":
                held.append(message)
                return
            card = json.loads(message["body"])
            card["supportedInterfaces"] = [
                i for i in card["supportedInterfaces"] if i["protocolVersion"].startswith("0.")
            ]
            body = json.dumps(card).encode()
            headers = [(k, v) for k, v in held[0]["headers"] if k.lower() != b"content-length"]
            await send({**held[0], "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        return narrowing

    def sent_ids(self) -> list[str]:
        return [message_id for method, message_id in self.calls if method in SENDS]


@pytest.fixture
def buyer(agent: Agent) -> Agent:
    """Tomas's agent on ``offline`` with his ceiling as a guard, so it never asks, and 8 turns."""
    agent.term_guards = [{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}]
    agent.max_turns = 8
    agent.save()
    return agent


@pytest.fixture
def recording(request: pytest.FixtureRequest, settings: Any) -> Iterator[RecordingGateway]:
    with RecordingGateway(**getattr(request, "param", {})) as gateway:
        settings.PUBLIC_BASE_URL = gateway.origin
        yield gateway


def opened(buyer: Agent, intent: Intent, seller: Agent, gateway: RecordingGateway) -> Negotiation:
    url = f"{gateway.origin}/a2a/{seller.tenant.slug}/{seller.slug}"
    return Negotiation.objects.create(
        tenant=buyer.tenant,
        agent=buyer,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url=url,
        max_turns=buyer.max_turns,
    )


def pump(negotiation: Negotiation) -> Negotiation:
    outbound.negotiation_pump(negotiation_id=negotiation.pk, tenant_id=negotiation.tenant_id)
    negotiation.refresh_from_db()
    return negotiation


def records(negotiation: Negotiation) -> list[tuple[str, str, Any, str]]:
    """The negotiation's turns as (messageId, action, terms, offerId), in order."""
    return [
        (t.raw.get("messageId", ""), t.action, t.terms, t.offer_id) for t in negotiation.turns.order_by("seq")
    ]


def verdict(negotiation: Negotiation) -> tuple[str, str, Any] | None:
    s = Settlement.across_tenants.filter(negotiation=negotiation).first()
    return (s.outcome, s.basis, s.terms) if s else None


@pytest.mark.parametrize(
    ("recording", "read"),
    [
        # A move on an open Task of a 1.0 peer: read back with GetTask, not sent again.
        ({"lose": 2}, True),
        # An opening move (no Task id yet), even to a 1.0 peer: sent again, the same message.
        ({"lose": 1}, False),
        # An Index-like peer (0.3 only, no tasks/get): sent again, the same message.
        ({"lose": 2, "only_0_3": True}, False),
    ],
    indirect=["recording"],
)
def test_a_pump_that_finds_its_move_stored_never_decides_another_and_both_records_agree(
    buyer: Agent, intent: Intent, seller: Agent, recording: RecordingGateway, read: bool
) -> None:
    negotiation = pump(opened(buyer, intent, seller, recording))
    assert negotiation.status == S.FAILED
    assert negotiation.error == f"{negotiation.counterparty_url} answered HTTP 502"
    stored = negotiation.outbound_move
    assert stored is not None
    lost = stored["message"]["messageId"]
    assert recording.sent_ids()[-1] == lost
    inbound = Negotiation.across_tenants.get(agent=seller)
    assert lost in [t.raw["messageId"] for t in inbound.turns.all()]  # applied on their side
    before = len(recording.calls)

    # As a redelivered pump finds it: open, with the move stored and applied on their side.
    Negotiation.across_tenants.filter(pk=negotiation.pk).update(status=S.OPEN, error="")
    negotiation = pump(negotiation)

    after = recording.calls[before:]
    if read:
        assert after[0] == ("GetTask", "")
        assert recording.sent_ids().count(lost) == 1
    else:
        assert after[0] == ("message/send" if recording.only_0_3 else "SendMessage", lost)
        assert recording.sent_ids().count(lost) == 2
    assert negotiation.status in (S.SETTLED, S.OUT_OF_TURNS)
    assert negotiation.outbound_move is None
    inbound = Negotiation.across_tenants.get(agent=seller)
    ours, theirs = records(negotiation), records(inbound)
    assert ours == theirs
    assert lost in [message_id for message_id, *_ in ours]
    assert len({message_id for message_id, *_ in ours}) == len(ours)
    assert verdict(negotiation) == verdict(inbound)


# The claim is a Postgres advisory lock held across threads' connections; the embedded default's is a
# lock of its one process, tested in tests/negotiations/test_sweep.py.
@pytest.mark.postgres
def test_a_second_pump_of_a_negotiation_being_pumped_does_nothing_and_sends_nothing(
    buyer: Agent, intent: Intent, seller: Agent, recording: RecordingGateway
) -> None:
    """The claim: a pump handed out again while the first still runs (its answer held at the
    seller by an evaluation hook) ends at once without sending; the first carries on alone."""

    def pump_apart(pk: Any) -> None:
        try:
            outbound.negotiation_pump_alone(negotiation_id=pk, tenant_id=buyer.tenant_id)
        finally:
            connections.close_all()

    with HeldHook() as hook:
        seller.evaluation_url = hook.url
        seller.save()
        negotiation = opened(buyer, intent, seller, recording)
        first = threading.Thread(target=pump_apart, args=(negotiation.pk,))
        first.start()
        wait_until(hook.entered.is_set, what="the first pump's opening at the seller")
        second = threading.Thread(target=pump_apart, args=(negotiation.pk,))
        second.start()
        second.join(60)
        assert not second.is_alive()  # it ended while the first still waits on the seller
        assert len(recording.sent_ids()) == 1
        hook.release.set()
        first.join(60)

    negotiation.refresh_from_db()
    assert negotiation.status in (S.SETTLED, S.OUT_OF_TURNS)
    sent = recording.sent_ids()
    assert len(sent) == len(set(sent)) == negotiation.turns.filter(side=Turn.Side.OURS).count()
    inbound = Negotiation.across_tenants.get(agent=seller)
    assert records(negotiation) == records(inbound)
    assert verdict(negotiation) == verdict(inbound)


@pytest.mark.parametrize("recording", [{"only_0_3": True}], indirect=True)
def test_a_move_the_counterparty_refuses_is_dropped_so_a_retry_decides_anew(
    buyer: Agent, intent: Intent, seller: Agent, recording: RecordingGateway
) -> None:
    # The seller negotiates on its own under its intent: a first message to it is refused as busy.
    own = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell CFO days.")
    Negotiation.objects.create(
        tenant=seller.tenant,
        agent=seller,
        intent=own,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="https://buyer.example/a2a/b",
    )

    negotiation = pump(opened(buyer, intent, seller, recording))

    assert negotiation.status == S.FAILED
    assert "refused the move (HTTP 409, JSON-RPC -32010)" in negotiation.error
    assert negotiation.outbound_move is None
    assert len(recording.sent_ids()) == 1


@pytest.mark.django_db
def test_a_stored_move_wins_over_a_decision_made_on_the_same_record(buyer: Agent, intent: Intent) -> None:
    """The compare-and-set: a pump that decided while another stored its move adopts that one; a
    decision over a record that has grown since is not stored."""
    negotiation = Negotiation.objects.create(
        tenant=buyer.tenant,
        agent=buyer,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="https://seller.example/a2a/s",
    )
    first, second = (
        outbound._Decided(
            message=move_message(move=Move("propose", f"€{amount}?", {"amount": amount}, f"o{amount}")),
            usage=Usage(model="m", input_tokens=amount, cost=Decimal("0.01")),
            seen=0,
        )
        for amount in (800, 850)
    )
    other_pump = Negotiation.across_tenants.get(pk=negotiation.pk)

    assert outbound._move_store(negotiation, first) is True
    assert outbound._move_store(other_pump, second) is False
    assert other_pump.outbound_move == negotiation.outbound_move
    assert other_pump.outbound_move is not None
    assert other_pump.outbound_move["message"] == first.message
    assert other_pump.outbound_move["usage"] == {
        "model": "m",
        "input_tokens": 800,
        "output_tokens": 0,
        "cost": "0.01",
    }

    Negotiation.across_tenants.filter(pk=negotiation.pk).update(outbound_move=None)
    Turn.objects.create(
        tenant=buyer.tenant, negotiation=negotiation, seq=1, side=Turn.Side.OURS, action="propose"
    )
    assert outbound._move_store(other_pump, second) is False
    assert other_pump.outbound_move is None


# Not transactional: the pump the run's step enqueues stays unsent, and this test is that pump.
@pytest.mark.django_db
def test_a_pump_that_died_after_its_last_turn_but_before_reporting_reports_on_redelivery(
    buyer: Agent, intent: Intent
) -> None:
    run = runs.run_start(agent=buyer, intent=intent, task="Talk to https://seller.example/a2a/s")
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
    negotiation = Negotiation.across_tenants.get(agent=buyer)
    # Its last turn was recorded and settled; the worker died before the report.
    Negotiation.across_tenants.filter(pk=negotiation.pk).update(status=S.SETTLED, task_state="completed")
    Settlement.objects.create(
        tenant=buyer.tenant,
        negotiation=negotiation,
        outcome="agreed",
        basis="reference",
        terms={"amount": 1000},
    )

    negotiation = pump(negotiation)

    assert negotiation.event is not None
    assert negotiation.event["kind"] == "settled"
    assert negotiation.event["settlement"]["terms"] == {"amount": 1000}
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
