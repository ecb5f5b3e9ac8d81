"""The negotiation engine through the running platform: fan-out and digest, the one-live rule,
``unanswered`` as an open exchange, settled ones staying settled, and the events each turn stores.

Outbound counterparties are scripted sellers answering A2A 1.0 JSON-RPC by hand on loopback, so a
test can make them do what an honest seller rarely does (take an accept back). Inbound moves go
through :func:`negotiations.services.inbound.inbound_turn`, as the gateway calls it.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.models import Agent, Intent, Message, Run
from agents.services import runs, steps
from agents.tools import Defer, Result
from negotiations import digest, selectors
from negotiations.digest import compact_json
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import batches, inbound, outbound
from negotiations.wire import TaskRecord
from parley.models import Event
from tests.conftest import LiveStack, free_port, wait_until
from tests.loopback import LoopbackServer, minimal_card, wire_message

URL = "https://cfo.example/a2a/x"
NAME = "Idris Haddad"
UNANSWERED_HINT = (
    " — the exchange is still open; answer this id with how to respond to their last move, "
    "do not open a new one"
)
WAITING_HEADING = (
    "Waiting on you (1) — ask your party once with ask_user, then call answer with every id "
    "the answer applies to:"
)
CLOSED = r"^negotiation on task task-1 is settled; open a new one$"
STILL_BINDING = "with this counterparty is still binding (open); answer it instead of opening another"
ENDED = "open a new negotiation if the terms need to change."


def _offer(action: str, message: str, terms: dict[str, Any]) -> dict[str, Any]:
    return {"action": action, "message": message, "terms": terms, "offerId": str(uuid.uuid4())}


class ScriptedPeer(LoopbackServer):
    """A seller on loopback that keeps each Task whole (history in order, its reply last) and
    answers by ``mode``:

    * ``agree`` accepts our first offer by its id;
    * ``haggle`` counters €500 to any offer, takes the first accept it gets back with a counter of
      €520 (the task stays open: we closed, they did not), and confirms the next accept;
    * ``stubborn`` counters with strings attached (a term we never take), so we run out of turns.

    Any reject is answered with a reject.
    """

    what = "the scripted peer"

    def __init__(self, mode: str, name: str) -> None:
        super().__init__()
        self.mode = mode
        self.url = f"{self.origin}/peer"
        self.tasks: dict[str, dict[str, Any]] = {}
        self.took_back = False
        self.card = minimal_card(name, "A scripted seller.", self.url)
        app = Starlette(
            routes=[
                Route("/peer/.well-known/agent-card.json", lambda r: JSONResponse(self.card)),
                Route("/peer", self.rpc, methods=["POST"]),
            ]
        )
        self.listen(app)

    def answer(self, move: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Their reply to our ``move`` and the state it stamps."""
        open_state, eur = "TASK_STATE_INPUT_REQUIRED", "EUR"
        if move["action"] == "reject":
            return {"action": "reject", "message": "Understood."}, "TASK_STATE_REJECTED"
        accepting = move["action"] == "accept"
        if self.mode == "agree" or (self.mode == "haggle" and accepting and self.took_back):
            accepted = move.get("acceptsOfferId") or move["offerId"]
            accept = {**_offer("accept", "Agreed.", move["terms"]), "acceptsOfferId": accepted}
            return accept, "TASK_STATE_COMPLETED"
        if self.mode == "haggle" and accepting:
            self.took_back = True
            return _offer("counter", "On second thought, €520.", {"amount": 520, "currency": eur}), open_state
        if self.mode == "haggle":
            return _offer("counter", "I can do €500.", {"amount": 500, "currency": eur}), open_state
        strings = {"amount": 900, "currency": eur, "exclusivity": True}
        return _offer("counter", "€900, exclusively.", strings), open_state

    async def rpc(self, request: Request) -> JSONResponse:
        body = await request.json()
        sent = body["params"]["message"]
        task_id = sent.get("taskId") or str(uuid.uuid4())
        context_id = sent.get("contextId") or str(uuid.uuid4())
        task = self.tasks.setdefault(task_id, {"id": task_id, "contextId": context_id, "history": []})
        reply, state = self.answer(sent["parts"][0]["data"])
        task["history"] += [sent, wire_message("ROLE_AGENT", reply, task_id, context_id)]
        task["status"] = {"state": state}
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}})


def buyer_of(agent: Agent) -> Agent:
    """Tomas's agent with his ceiling as a guard, so it negotiates without asking, and 4 turns."""
    agent.term_guards = [{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}]
    agent.max_turns = 4
    agent.save()
    return agent


def _finished(run: Run) -> Run:
    wait_until(
        lambda: Run.across_tenants.get(pk=run.pk).status not in Run.ACTIVE, timeout=60, what="the run to end"
    )
    run.refresh_from_db()
    return run


def _events(kind: str, negotiation: Negotiation) -> list[dict[str, Any]]:
    return [
        e.payload
        for e in Event.across_tenants.filter(tenant_id=negotiation.tenant_id, kind=kind)
        if e.payload["negotiation"] == str(negotiation.pk)
    ]


# Fan-out and digest.


@pytest.mark.django_db(transaction=True)
def test_one_negotiate_call_reports_every_target_in_one_digest(
    live_stack: LiveStack, agent: Agent, intent: Intent
) -> None:
    buyer = buyer_of(agent)
    dead = f"http://127.0.0.1:{free_port()}/nobody"
    with (
        ScriptedPeer("agree", "Agreeable Seller") as agree,
        ScriptedPeer("haggle", "Haggling Seller") as haggle,
        ScriptedPeer("stubborn", "Stubborn Seller") as stubborn,
    ):
        urls = [agree.url, haggle.url, stubborn.url, dead, f"{haggle.url}/"]
        run = _finished(
            runs.run_start(agent=buyer, intent=intent, task=f"Find me a CFO. Talk to {', '.join(urls)}")
        )

    by_url = {
        n.counterparty_url: n
        for n in Negotiation.across_tenants.filter(agent=buyer).select_related("settlement")
    }
    assert set(by_url) == {agree.url, haggle.url, stubborn.url, dead}
    agreed, unanswered, budget, failed = (by_url[u] for u in urls[:4])
    assert (agreed.settlement.outcome, unanswered.settlement.outcome) == ("agreed", "unanswered")
    their_last = budget.turns.filter(side=Turn.Side.THEIRS).order_by("-seq").first()
    assert their_last is not None
    assert run.status == Run.Status.DONE
    assert run.output == "Here is where things stand.\n" + "\n".join(
        [
            "Settled (2):",
            f"- {agreed.pk} with Agreeable Seller ({agree.url}) — agreed: "
            + compact_json(agreed.settlement.terms),
            f"- {unanswered.pk} with Haggling Seller ({haggle.url}) — unanswered: You closed with "
            f'"accept", but they replied with "counter" rather than closing too.{UNANSWERED_HINT}',
            "Out of turns (1):",
            f"- {budget.pk} with Stubborn Seller ({stubborn.url}) — 4 turns, still open (their last move: "
            f'"€900, exclusively." {compact_json(their_last.terms)})',
            "Failed (1):",
            f"- {failed.pk} ({dead}) — {failed.error}",
            "Skipped (1):",
            f"- {unanswered.pk} ({haggle.url}) — negotiation {unanswered.pk} {STILL_BINDING}",
        ]
    )


@pytest.mark.django_db
def test_a_waiting_line_carries_the_question_and_their_last_move(agent: Agent, intent: Intent) -> None:
    run = runs.run_start(agent=agent, intent=intent, task=f"Talk to {URL}")
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
    negotiation = Negotiation.across_tenants.get(agent=agent)
    negotiation.counterparty_name, negotiation.task_id, negotiation.task_state = NAME, "t-1", "input-required"
    negotiation.turn_count = 1
    negotiation.save()
    ours = {"amount": 800, "currency": "EUR"}
    theirs = {"amount": 1200, "currency": "EUR"}
    for seq, side, action, text, terms in [
        (1, Turn.Side.OURS, "propose", "I can offer €800.", ours),
        (2, Turn.Side.THEIRS, "counter", "My rate is €1,200.", theirs),
    ]:
        Turn.objects.create(
            tenant=agent.tenant,
            negotiation=negotiation,
            seq=seq,
            side=side,
            action=action,
            message=text,
            terms=terms,
            offer_id=f"o{seq}",
        )

    # Agent without a limit: its negotiator asks before sending anything.
    outbound.negotiation_pump(negotiation_id=negotiation.pk, tenant_id=agent.tenant_id)

    negotiation.refresh_from_db()
    assert negotiation.status == Negotiation.Status.WAITING
    result = Message.across_tenants.get(run=run, role=Message.Role.TOOL).content
    assert result == "\n".join(
        [
            WAITING_HEADING,
            f'- {negotiation.pk} with {NAME} ({URL}) — asks: "{negotiation.parked_question}" '
            '(their last move: "My rate is €1,200." {"amount":1200,"currency":"EUR"})',
        ]
    )


def test_the_digest_text_is_the_seeds() -> None:
    who = {"id": "n1", "peer": NAME, "url": URL}
    last = {"message": "My rate is €1,200.", "terms": {"amount": 1200, "currency": "EUR"}}
    events: list[dict[str, Any]] = [
        {**who, "kind": "recorded", "reason": "guidance kept for their next message"},
        {**who, "kind": "skipped", "reason": "no such thing"},
        {**who, "kind": "failed", "error": "it hung up"},
        {**who, "kind": "budget", "turns": 10, "last": last},
        {**who, "kind": "budget", "turns": 10, "last": None},
        {**who, "kind": "asking", "question": "Your limit?", "last": last},
        {**who, "kind": "asking", "question": "Your limit?", "last": {"message": "Hello.", "terms": None}},
        {
            **who,
            "kind": "settled",
            "settlement": {"outcome": "agreed", "terms": {"amount": 1000}, "reason": "r"},
        },
        {
            **who,
            "kind": "settled",
            "settlement": {"outcome": "declined", "terms": None, "reason": "Task ended."},
        },
        {
            **who,
            "kind": "settled",
            "settlement": {"outcome": "unanswered", "terms": None, "reason": "They didn't."},
        },
        {**who, "kind": "settled", "state": "canceled"},
    ]

    assert digest.render(events) == "\n".join(
        [
            "Settled (4):",
            f'- n1 with {NAME} ({URL}) — agreed: {{"amount":1000}}',
            f"- n1 with {NAME} ({URL}) — declined: Task ended.",
            f"- n1 with {NAME} ({URL}) — unanswered: They didn't.{UNANSWERED_HINT}",
            f"- n1 with {NAME} ({URL}) — ended (canceled)",
            WAITING_HEADING.replace("(1)", "(2)"),
            f'- n1 with {NAME} ({URL}) — asks: "Your limit?" (their last move: "My rate is €1,200." '
            '{"amount":1200,"currency":"EUR"})',
            f'- n1 with {NAME} ({URL}) — asks: "Your limit?" (their last move: "Hello.")',
            "Out of turns (2):",
            f'- n1 with {NAME} ({URL}) — 10 turns, still open (their last move: "My rate is €1,200." '
            '{"amount":1200,"currency":"EUR"})',
            f"- n1 with {NAME} ({URL}) — 10 turns, still open",
            "Failed (1):",
            f"- n1 with {NAME} ({URL}) — it hung up",
            "Skipped (1):",
            f"- n1 with {NAME} ({URL}) — no such thing",
            "Recorded (1):",
            f"- n1 with {NAME} ({URL}) — guidance kept for their next message",
        ]
    )
    assert digest.render([]) == "No negotiations."


# "unanswered" is an open exchange; every other settlement is final.


@pytest.mark.django_db(transaction=True)
def test_answering_an_unanswered_outbound_negotiation_continues_it_to_a_real_close(
    live_stack: LiveStack, agent: Agent, intent: Intent
) -> None:
    buyer = buyer_of(agent)
    with ScriptedPeer("haggle", "Haggling Seller") as peer:
        run = _finished(runs.run_start(agent=buyer, intent=intent, task=f"Find me a CFO. Talk to {peer.url}"))
        negotiation = Negotiation.across_tenants.get(agent=buyer)
        provisional = Settlement.across_tenants.get(negotiation=negotiation)
        assert (negotiation.status, provisional.outcome) == (Negotiation.Status.SETTLED, "unanswered")
        assert UNANSWERED_HINT in run.output

        outcome = batches.batch_answer(
            run=run, tool_call_id="call-answer", ids=[str(negotiation.pk)], guidance="Take their new price."
        )

        assert outcome == Defer()
        wait_until(
            lambda: Negotiation.across_tenants.get(pk=negotiation.pk).status != Negotiation.Status.OPEN,
            timeout=60,
            what="the negotiation to move on",
        )

    negotiation.refresh_from_db()
    final = Settlement.across_tenants.get(negotiation=negotiation)
    assert negotiation.status == Negotiation.Status.SETTLED
    assert negotiation.guidance == ["Take their new price."]
    assert final.pk == provisional.pk  # one settlement per negotiation: the row was replaced in place
    assert (final.outcome, final.basis, final.terms) == (
        "agreed",
        "reference",
        {"amount": 520, "currency": "EUR"},
    )
    turns = list(negotiation.turns.order_by("seq"))
    assert [(t.side, t.action) for t in turns] == [
        ("ours", "propose"),
        ("theirs", "counter"),
        ("ours", "accept"),
        ("theirs", "counter"),
        ("ours", "accept"),
        ("theirs", "accept"),
    ]

    head = {"negotiation": str(negotiation.pk), "agent": str(buyer.pk), "direction": "outbound"}
    assert _events("negotiation.turn", negotiation) == [
        {
            **head,
            "seq": t.seq,
            "side": t.side,
            "action": t.action,
            "terms": t.terms,
            "offerId": t.offer_id,
            "acceptsOfferId": t.accepts_offer_id,
            "taskState": t.task_state,
        }
        for t in turns
    ]
    assert _events("negotiation.settled", negotiation) == [
        {
            **head,
            "outcome": "unanswered",
            "basis": "state",
            "terms": None,
            "reason": provisional.reason,
            "endedBy": "",
        },
        {
            **head,
            "outcome": "agreed",
            "basis": "reference",
            "terms": {"amount": 520, "currency": "EUR"},
            "reason": final.reason,
            "endedBy": "theirs",
        },
    ]

    again = batches.batch_answer(
        run=run, tool_call_id="call-again", ids=[str(negotiation.pk)], guidance="More."
    )
    assert again == Result(
        f"Skipped (1):\n- {negotiation.pk} with Haggling Seller ({peer.url}) — "
        f"already ended (completed) — {ENDED}"
    )


def _incoming(move: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": move}]}


def _inbound(seller: Agent, move: dict[str, Any], task_id: str = "task-1") -> inbound.InboundReply:
    negotiation = Negotiation.across_tenants.filter(agent=seller, task_id=task_id).first()
    prior = selectors.turns_record(negotiation) if negotiation else TaskRecord(state="submitted", history=())
    return inbound.inbound_turn(
        agent=seller, task_id=task_id, context_id="ctx-1", prior=prior, incoming=_incoming(move)
    )


@pytest.fixture
def seller_run(seller: Agent) -> Run:
    """A run of the seller's own, to answer its negotiations from."""
    intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell CFO days.")
    return Run.objects.create(tenant=seller.tenant, agent=seller, intent=intent, status=Run.Status.RUNNING)


@pytest.mark.django_db
def test_an_unanswered_inbound_negotiation_takes_their_next_moves_until_it_settles_for_good(
    seller: Agent, seller_run: Run
) -> None:
    _inbound(seller, {"action": "propose", "message": "€800?", "terms": {"amount": 800, "currency": "EUR"}})
    # They "accept" an offer that appears nowhere; we answer with a counter, so only they closed.
    bogus = {"action": "accept", "message": "Deal at €900.", "terms": {"amount": 900, "currency": "EUR"}}
    _inbound(seller, {**bogus, "acceptsOfferId": "nope"})
    negotiation = Negotiation.across_tenants.get(agent=seller)
    assert negotiation.status == Negotiation.Status.SETTLED
    assert negotiation.settlement.outcome == "unanswered"

    answered = batches.batch_answer(
        run=seller_run, tool_call_id="call-1", ids=[str(negotiation.pk)], guidance="Hold at 950."
    )
    assert answered == Result(f"Recorded (1):\n- {negotiation.pk} — guidance kept for their next message")

    # Their next move goes on: no side has closed now, so there is no settlement.
    _inbound(seller, {"action": "propose", "message": "€500?", "terms": {"amount": 500, "currency": "EUR"}})
    negotiation.refresh_from_db()
    assert negotiation.status == Negotiation.Status.OPEN
    assert negotiation.guidance == ["Hold at 950."]
    assert not Settlement.across_tenants.filter(negotiation=negotiation).exists()

    # They accept our last counter by its id: we confirm, and it settles for good.
    counter = negotiation.turns.filter(side=Turn.Side.OURS).order_by("-seq").first()
    assert counter is not None
    assert counter.action == "counter"
    accept = {
        "action": "accept",
        "message": "Agreed.",
        "terms": counter.terms,
        "acceptsOfferId": counter.offer_id,
    }
    reply = _inbound(seller, accept)
    assert reply.state == "completed"
    assert reply.settlement is not None
    assert (reply.settlement.outcome, reply.settlement.terms) == ("agreed", counter.terms)

    with pytest.raises(inbound.NegotiationClosed, match=CLOSED):
        _inbound(seller, {"action": "propose", "message": "And another day?", "terms": {"amount": 1}})
    assert negotiation.turns.count() == 8
    head = {"negotiation": str(negotiation.pk), "agent": str(seller.pk), "direction": "inbound"}
    settled = _events("negotiation.settled", negotiation)
    assert [(e["outcome"], e["endedBy"]) for e in settled] == [("unanswered", ""), ("agreed", "ours")]
    assert all(e.items() >= head.items() for e in settled)
    turn_events = _events("negotiation.turn", negotiation)
    assert [(e["seq"], e["side"], e["action"]) for e in turn_events] == list(
        negotiation.turns.order_by("seq").values_list("seq", "side", "action")
    )
    assert all(e.items() >= head.items() for e in turn_events)


FINAL = [
    (Settlement.Outcome.AGREED, "completed"),
    (Settlement.Outcome.UNCONFIRMED, "completed"),
    (Settlement.Outcome.DECLINED, "rejected"),
    (Settlement.Outcome.CONFLICT, "completed"),
]


def _settled(agent: Agent, intent: Intent, direction: str, outcome: str, state: str) -> Negotiation:
    negotiation = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=direction,
        counterparty_url=URL if direction == Negotiation.Direction.OUTBOUND else "",
        counterparty_name=NAME,
        task_id="task-1",
        task_state=state,
        status=Negotiation.Status.SETTLED,
    )
    Settlement.objects.create(tenant=agent.tenant, negotiation=negotiation, outcome=outcome, basis="state")
    return negotiation


@pytest.mark.django_db
@pytest.mark.parametrize("direction", [Negotiation.Direction.OUTBOUND, Negotiation.Direction.INBOUND])
@pytest.mark.parametrize(("outcome", "state"), FINAL)
def test_a_final_settlement_refuses_an_answer_and_further_moves(
    agent: Agent, intent: Intent, direction: str, outcome: str, state: str
) -> None:
    negotiation = _settled(agent, intent, direction, outcome, state)
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)

    answered = batches.batch_answer(
        run=run, tool_call_id="call-1", ids=[str(negotiation.pk)], guidance="Go on."
    )

    url = f" ({URL})" if direction == Negotiation.Direction.OUTBOUND else ""
    assert answered == Result(
        f"Skipped (1):\n- {negotiation.pk} with {NAME}{url} — already ended ({state}) — {ENDED}"
    )
    negotiation.refresh_from_db()
    assert (negotiation.status, negotiation.guidance) == (Negotiation.Status.SETTLED, [])
    if direction == Negotiation.Direction.INBOUND:
        with pytest.raises(inbound.NegotiationClosed, match=CLOSED):
            inbound.inbound_check(
                agent=agent, task_id="task-1", incoming=_incoming({"action": "propose", "message": ""})
            )


# The one-live rule (docs/design.md#one-live-negotiation), row by row.

OUT, IN = Negotiation.Direction.OUTBOUND, Negotiation.Direction.INBOUND
S = Negotiation.Status
BINDING = "is still binding ({}); answer it instead of opening another"
DEAL = "closed as {}, and that deal stands; report it"

ONE_LIVE_TABLE = [
    # direction, status, outcome, same URL, same intent -> refused with (None: allowed)
    pytest.param(OUT, S.OPEN, None, True, True, BINDING.format("open"), id="outbound-going"),
    pytest.param(OUT, S.WAITING, None, True, True, BINDING.format("waiting"), id="outbound-waiting"),
    pytest.param(
        OUT, S.OUT_OF_TURNS, None, True, True, BINDING.format("out_of_turns"), id="outbound-out-of-turns"
    ),
    pytest.param(
        OUT, S.SETTLED, "unanswered", True, True, BINDING.format("unanswered"), id="outbound-unanswered"
    ),
    pytest.param(OUT, S.SETTLED, "agreed", True, True, DEAL.format("agreed"), id="outbound-agreed"),
    pytest.param(
        OUT, S.SETTLED, "unconfirmed", True, True, DEAL.format("unconfirmed"), id="outbound-unconfirmed"
    ),
    pytest.param(OUT, S.SETTLED, "declined", True, True, None, id="outbound-declined-frees-it"),
    pytest.param(OUT, S.SETTLED, "conflict", True, True, None, id="outbound-conflict-frees-it"),
    pytest.param(OUT, S.FAILED, None, True, True, None, id="outbound-failed-before-any-task-frees-it"),
    pytest.param(OUT, S.OPEN, None, False, True, None, id="outbound-going-to-another-url"),
    pytest.param(OUT, S.SETTLED, "agreed", True, False, None, id="outbound-agreed-under-another-intent"),
    pytest.param(IN, S.OPEN, None, False, True, BINDING.format("open"), id="inbound-going"),
    pytest.param(IN, S.WAITING, None, False, True, BINDING.format("waiting"), id="inbound-waiting"),
    pytest.param(
        IN, S.SETTLED, "unanswered", False, True, BINDING.format("unanswered"), id="inbound-unanswered"
    ),
    pytest.param(IN, S.SETTLED, "agreed", False, True, DEAL.format("agreed"), id="inbound-agreed"),
    pytest.param(
        IN, S.SETTLED, "unconfirmed", False, True, DEAL.format("unconfirmed"), id="inbound-unconfirmed"
    ),
    pytest.param(IN, S.SETTLED, "declined", False, True, None, id="inbound-declined-frees-it"),
    pytest.param(IN, S.SETTLED, "conflict", False, True, None, id="inbound-conflict-frees-it"),
    pytest.param(IN, S.OPEN, None, False, False, None, id="inbound-going-under-another-intent"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("direction", "status", "outcome", "same_url", "same_intent", "refusal"), ONE_LIVE_TABLE
)
def test_one_live_negotiation_per_counterparty_per_intent(
    agent: Agent,
    intent: Intent,
    direction: str,
    status: str,
    outcome: str | None,
    same_url: bool,
    same_intent: bool,
    refusal: str | None,
) -> None:
    elsewhere = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a designer.")
    existing = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent if same_intent else elsewhere,
        direction=direction,
        counterparty_url="" if direction == IN else URL if same_url else "https://other.example/a2a/y",
        counterparty_name=NAME if direction == OUT else "",
        status=status,
    )
    if outcome:
        Settlement.objects.create(tenant=agent.tenant, negotiation=existing, outcome=outcome, basis="state")
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)

    result = batches.batch_open(run=run, tool_call_id="call-1", targets=[{"url": URL}])

    opened = Negotiation.across_tenants.filter(batch__run=run, counterparty_url=URL)
    if refusal is None:
        assert result == Defer()
        assert opened.count() == 1
        return
    which = (
        "with this counterparty"
        if direction == OUT
        else "that another agent opened with you under this intent"
    )
    peer = f" with {NAME}" if direction == OUT else ""
    assert result == Result(
        f"Skipped (1):\n- {existing.pk}{peer} ({URL}) — negotiation {existing.pk} {which} {refusal}"
    )
    assert not opened.exists()


@pytest.mark.django_db
def test_two_targets_to_one_counterparty_in_one_batch_open_one(agent: Agent, intent: Intent) -> None:
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
    targets = [{"url": URL}, {"url": "HTTPS://CFO.example:443/a2a/x/"}]

    assert batches.batch_open(run=run, tool_call_id="call-1", targets=targets) == Defer()

    opened = Negotiation.across_tenants.get(agent=agent)
    assert opened.batch is not None
    assert opened.batch.events == [
        {
            "kind": "skipped",
            "id": str(opened.pk),
            "peer": "",
            "url": URL,
            "reason": f"negotiation {opened.pk} {STILL_BINDING}",
        }
    ]


class _Pumps:
    """Stands in for the pump task: records what would be pumped instead of reaching out."""

    name = "negotiations.tasks.pump"

    def __init__(self) -> None:
        self.pumped: list[str] = []

    def apply_async(self, args: tuple[str, int], countdown: float = 0.0) -> None:
        self.pumped.append(args[0])


@pytest.mark.django_db(transaction=True)
def test_two_batches_at_once_cannot_both_claim_a_counterparty(
    agent: Agent, intent: Intent, monkeypatch: pytest.MonkeyPatch
) -> None:
    pumps = _Pumps()
    monkeypatch.setattr("negotiations.tasks.pump", pumps)
    runs = [
        Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
        for _ in "ab"
    ]
    results: list[Any] = []

    def second_batch() -> None:
        try:
            results.append(batches.batch_open(run=runs[1], tool_call_id="call-b", targets=[{"url": URL}]))
        finally:
            connection.close()

    with transaction.atomic():
        assert batches.batch_open(run=runs[0], tool_call_id="call-a", targets=[{"url": URL}]) == Defer()
        other = threading.Thread(target=second_batch)
        other.start()
        other.join(timeout=1.0)
        assert other.is_alive(), "the second batch checked before the first one's claim committed"
    other.join(timeout=10)

    first = Negotiation.across_tenants.get(agent=agent)
    assert results == [Result(f"Skipped (1):\n- {first.pk} ({URL}) — negotiation {first.pk} {STILL_BINDING}")]
    assert pumps.pumped == [str(first.pk)]


@pytest.mark.django_db
def test_a_negotiation_that_failed_after_its_task_existed_binds_and_answer_retries_it(
    agent: Agent, intent: Intent
) -> None:
    failed = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=OUT,
        counterparty_url=URL,
        counterparty_name=NAME,
        status=S.FAILED,
        task_id="their-task",
        error="it hung up",
    )
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)

    opened = batches.batch_open(run=run, tool_call_id="call-1", targets=[{"url": URL}])
    assert opened == Result(
        f"Skipped (1):\n- {failed.pk} with {NAME} ({URL}) — negotiation {failed.pk} with this "
        f"counterparty {BINDING.format('failed')}"
    )

    retried = batches.batch_answer(
        run=run, tool_call_id="call-2", ids=[str(failed.pk)], guidance="Try again."
    )
    assert retried == Defer()
    failed.refresh_from_db()
    assert (failed.status, failed.error, failed.guidance) == (S.OPEN, "", ["Try again."])
