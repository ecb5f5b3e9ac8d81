"""The evaluation hook, against a real HTTP server on loopback: what it is sent, what it attaches,
and that a failing hook never breaks a negotiation."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.db import connection
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agents.models import Agent, Intent, Run
from agents.services import runs
from negotiations import evaluation, selectors
from negotiations.evaluation import EvaluationError, evaluate
from negotiations.models import Negotiation, Turn
from negotiations.services import inbound
from negotiations.wire import TaskRecord
from tests.a2a_gateway import rpc
from tests.a2a_gateway.rpc import task_of
from tests.a2a_gateway.servers import InProcessGateway
from tests.conftest import PRIVATE, LiveStack, free_port, wait_until
from tests.loopback import LoopbackServer


class HookServer(LoopbackServer):
    """An evaluation hook on loopback. By default it attaches ``{"seen": seq, "by": "hook"}``;
    ``answers`` maps a path to a canned (status, body) instead, and ``/moved`` redirects (307) to
    :attr:`location`. It records every request and whether the turn it names was committed when the
    request arrived."""

    what = "the evaluation hook"

    def __init__(self, answers: dict[str, tuple[int, bytes]] | None = None) -> None:
        super().__init__()
        self.answers = answers or {}
        self.url = f"{self.origin}/hook"
        self.location = ""
        self.calls: list[dict[str, Any]] = []
        self.committed: list[bool] = []
        app = Starlette(
            routes=[
                Route("/hook", self.hook, methods=["POST"]),
                Route("/slow", self.slow, methods=["POST"]),
                Route("/trickle", self.trickle, methods=["POST"]),
                Route("/canned/{name}", self.canned, methods=["POST"]),
                Route("/moved", self.moved, methods=["POST"]),
            ]
        )
        self.listen(app)

    async def hook(self, request: Request) -> Response:
        body = await request.json()
        self.calls.append(body)
        self.committed.append(await run_in_threadpool(_turn_committed, body))
        return JSONResponse({"artifact": {"seen": body["turn"]["seq"], "by": "hook"}})

    async def slow(self, request: Request) -> Response:
        await asyncio.sleep(2)
        return JSONResponse({"artifact": {}})

    async def trickle(self, request: Request) -> Response:
        """A byte every tenth of a second for three seconds: each read is quick, the answer never ends."""

        async def drip() -> AsyncIterator[bytes]:
            for _ in range(30):
                yield b" "
                await asyncio.sleep(0.1)

        return StreamingResponse(drip(), media_type="application/json")

    async def moved(self, request: Request) -> Response:
        self.calls.append(await request.json())
        return Response(status_code=307, headers={"Location": self.location})

    async def canned(self, request: Request) -> Response:
        self.calls.append(await request.json())
        status, body = self.answers[request.path_params["name"]]
        return Response(body, status_code=status, media_type="application/json")


def _turn_committed(body: dict[str, Any]) -> bool:
    """Whether the turn the hook is asked about is visible to another connection."""
    try:
        return Turn.across_tenants.filter(
            negotiation_id=body["negotiation"], seq=body["turn"]["seq"]
        ).exists()
    finally:
        connection.close()


REQUEST: evaluation.Request = {
    "negotiation": "7b0e1f5c-0000-4000-8000-000000000001",
    "agent": "7b0e1f5c-0000-4000-8000-000000000002",
    "direction": "outbound",
    "turn": {
        "seq": 1,
        "side": "ours",
        "action": "propose",
        "message": "I can offer €800.",
        "terms": {"amount": 800, "currency": "EUR"},
        "offerId": "o-1",
        "acceptsOfferId": "",
    },
    "taskState": "input-required",
}


# The module on its own.


@pytest.fixture
def canned() -> Iterator[HookServer]:
    answers = {
        "ok": (200, b'{"artifact": {"score": 0.8}}'),
        "error": (500, b'{"artifact": {"score": 0.8}}'),
        "not-json": (200, b"<html>"),
        "no-artifact": (200, b'{"score": 0.8}'),
        "list": (200, b'{"artifact": [0.8]}'),
        "array": (200, b"[]"),
        "nul": (200, b'{"artifact": {"note": "a\\u0000b"}}'),
        "deep": (200, b'{"artifact": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"),
        "nested": (200, b'{"artifact": {"a": ' + b"[" * 150 + b"]" * 150 + b"}}"),
        "huge": (200, b'{"artifact": {"note": "' + b"x" * evaluation.MAX_BYTES + b'"}}'),
    }
    with HookServer(answers) as server:
        yield server


def test_the_hook_gets_the_turn_and_its_artifact_comes_back(canned: HookServer) -> None:
    result = evaluate(f"{canned.origin}/canned/ok", REQUEST)

    assert result == evaluation.Evaluation(artifact={"score": 0.8})
    assert canned.calls == [REQUEST]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("error", "answered HTTP 500"),
        ("not-json", "answered with a body that is not JSON we can read"),
        ("deep", "answered with a body that is not JSON we can read"),
        ("no-artifact", 'answered without an object "artifact"'),
        ("list", 'answered without an object "artifact"'),
        ("array", 'answered without an object "artifact"'),
        ("nul", "answered with a NUL character in the artifact"),
        ("nested", f"answered with an artifact nested deeper than {evaluation.MAX_DEPTH} levels"),
        ("huge", f"answered more than {evaluation.MAX_BYTES} bytes"),
    ],
)
def test_an_answer_outside_the_contract_is_our_error(canned: HookServer, name: str, error: str) -> None:
    url = f"{canned.origin}/canned/{name}"
    with pytest.raises(EvaluationError) as raised:
        evaluate(url, REQUEST)
    assert str(raised.value) == f"{url} {error}"


def test_a_slow_hook_times_out(canned: HookServer) -> None:
    with pytest.raises(EvaluationError, match=r"/slow did not answer within 0.2 s$"):
        evaluate(f"{canned.origin}/slow", REQUEST, timeout=0.2)


def test_a_trickling_hook_is_cut_off_at_its_deadline(canned: HookServer) -> None:
    with pytest.raises(EvaluationError, match=r"/trickle did not answer within 0.5 s$"):
        evaluate(f"{canned.origin}/trickle", REQUEST, timeout=0.5)


def test_a_hook_nobody_serves_is_our_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    with pytest.raises(EvaluationError, match=r"^http://127\.0\.0\.1:\d+/hook: ConnectError: "):
        evaluate(url, REQUEST)


# A hook on a private address is never called (parley.outbound): the tenant chose the URL.

INTERNAL = {"prod-internal": (200, b'{"artifact": {"internal_secret": "s3cr3t-from-the-inside"}}')}


@pytest.mark.parametrize("host", ["localhost", "169.254.169.254"])
def test_a_hook_on_a_private_address_is_not_called(settings: Any, host: str) -> None:
    """``localhost`` is a name that resolves to loopback: a hook saved before the rule, or whose
    name has come to resolve there since, is refused where the call connects."""
    settings.OUTBOUND_ALLOW_PRIVATE = False
    with HookServer(INTERNAL) as internal:
        url = f"http://{host}:{internal.port}/canned/prod-internal"

        with pytest.raises(EvaluationError) as raised:
            evaluate(url, REQUEST)

    assert str(raised.value) == f"{url} was not called: the host '{host}' {PRIVATE}"
    assert internal.calls == []


def test_a_hook_that_redirects_to_a_private_address_is_not_followed(settings: Any, public_name: str) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False
    with HookServer(INTERNAL) as internal, HookServer() as public:
        public.location = f"{internal.origin}/canned/prod-internal"
        url = f"http://{public_name}:{public.port}/moved"

        with pytest.raises(EvaluationError) as raised:
            evaluate(url, REQUEST)

    assert str(raised.value) == f"{url} answered HTTP 307"
    assert public.calls == [REQUEST]
    assert internal.calls == []


@pytest.mark.django_db(transaction=True)
def test_an_anonymous_caller_gets_no_artifact_from_a_hook_on_a_private_address(
    settings: Any, seller: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    """The tester's report: a hook on loopback answered an anonymous SendMessage, and its answer came
    back to the caller on the Task. The row was saved before the rule (or its name resolves to
    loopback since); the gateway is served from this process, so the setting applies to it."""
    with HookServer(INTERNAL) as internal, InProcessGateway() as gateway:
        Agent.across_tenants.filter(pk=seller.pk).update(
            evaluation_url=f"http://localhost:{internal.port}/canned/prod-internal"
        )
        settings.OUTBOUND_ALLOW_PRIVATE = False

        task = task_of(
            rpc.call(rpc.endpoint_on(gateway.origin, seller), "SendMessage", rpc.message(PROPOSAL))
        )

    assert [artifact["artifactId"] for artifact in task.get("artifacts", [])] == ["negotiator:reply"]
    assert "s3cr3t" not in json.dumps(task)
    assert internal.calls == []
    assert list(Turn.across_tenants.values_list("artifact", flat=True)) == [None, None]
    negotiation = Negotiation.across_tenants.get(agent=seller)
    refused = f"was not called: the host 'localhost' {PRIVATE}"
    assert [r.getMessage() for r in caplog.records if r.name == "negotiations.services.recording"] == [
        f"evaluating turn {seq} of negotiation {negotiation.pk}: http://localhost:{internal.port}"
        f"/canned/prod-internal {refused}"
        for seq in (1, 2)
    ]


# Inbound turns: both moves are evaluated once committed, and the artifacts go to the gateway.


def _incoming(move: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": move}]}


def _inbound(seller: Agent, task_id: str, move: dict[str, Any]) -> inbound.InboundReply:
    negotiation = Negotiation.across_tenants.filter(agent=seller, task_id=task_id).first()
    prior = selectors.turns_record(negotiation) if negotiation else TaskRecord(state="submitted", history=())
    return inbound.inbound_turn(
        agent=seller, task_id=task_id, context_id="ctx-1", prior=prior, incoming=_incoming(move)
    )


PROPOSAL = {
    "action": "propose",
    "message": "I can offer €800.",
    "terms": {"amount": 800, "currency": "EUR"},
    "offerId": "their-offer-1",
}


@pytest.mark.django_db(transaction=True)
def test_an_inbound_exchange_is_evaluated_after_commit_and_its_artifacts_reach_the_gateway(
    seller: Agent,
) -> None:
    with HookServer() as hook:
        seller.evaluation_url = hook.url
        seller.save()
        reply = _inbound(seller, "task-1", PROPOSAL)

    negotiation = Negotiation.across_tenants.get(agent=seller)
    theirs, ours = negotiation.turns.order_by("seq")
    assert hook.committed == [True, True]
    assert hook.calls[0] == {
        "negotiation": str(negotiation.pk),
        "agent": str(seller.pk),
        "direction": "inbound",
        "turn": {
            "seq": 1,
            "side": "theirs",
            "action": "propose",
            "message": "I can offer €800.",
            "terms": {"amount": 800, "currency": "EUR"},
            "offerId": "their-offer-1",
            "acceptsOfferId": "",
        },
        "taskState": "input-required",
    }
    assert hook.calls[1]["turn"] == {
        "seq": 2,
        "side": "ours",
        "action": ours.action,
        "message": ours.message,
        "terms": ours.terms,
        "offerId": ours.offer_id,
        "acceptsOfferId": "",
    }
    assert (theirs.artifact, ours.artifact) == ({"seen": 1, "by": "hook"}, {"seen": 2, "by": "hook"})
    assert reply.artifacts == [
        {"artifactId": "turn-evaluation:1", "name": "turn-evaluation", "data": {"seen": 1, "by": "hook"}},
        {"artifactId": "turn-evaluation:2", "name": "turn-evaluation", "data": {"seen": 2, "by": "hook"}},
    ]


@pytest.mark.django_db(transaction=True)
def test_a_failing_hook_costs_only_its_artifact(seller: Agent, caplog: pytest.LogCaptureFixture) -> None:
    gone = f"http://127.0.0.1:{free_port()}/gone"
    with HookServer() as hook:
        missing = f"{hook.origin}/missing"
        seller.evaluation_url = missing
        seller.save()
        first = _inbound(seller, "task-1", PROPOSAL)
        seller.evaluation_url = gone
        seller.save()
        second = _inbound(seller, "task-1", {**PROPOSAL, "offerId": "their-offer-2"})

    negotiation = Negotiation.across_tenants.get(agent=seller)
    assert (first.state, second.state) == ("input-required", "input-required")
    assert first.artifacts == second.artifacts == []
    assert list(negotiation.turns.values_list("side", "artifact")) == [("theirs", None), ("ours", None)] * 2
    warnings = [r.getMessage() for r in caplog.records if r.name == "negotiations.services.recording"]
    assert warnings[:2] == [
        f"evaluating turn 1 of negotiation {negotiation.pk}: {missing} answered HTTP 404",
        f"evaluating turn 2 of negotiation {negotiation.pk}: {missing} answered HTTP 404",
    ]
    assert [w.split(": ", 1)[1].startswith(f"{gone}: ConnectError") for w in warnings[2:]] == [True, True]


@pytest.mark.django_db(transaction=True)
def test_an_agent_without_a_hook_calls_none(seller: Agent) -> None:
    with HookServer() as hook:
        reply = _inbound(seller, "task-1", PROPOSAL)

    assert hook.calls == []
    assert reply.artifacts == []
    assert list(Turn.across_tenants.values_list("artifact", flat=True)) == [None, None]


# Outbound, through the running platform: the worker asks the hook about our move and their reply.


@pytest.mark.django_db(transaction=True)
def test_an_outbound_negotiation_is_evaluated_turn_by_turn(
    live_stack: LiveStack, agent: Agent, intent: Intent
) -> None:
    from tests.negotiations.test_engine import ScriptedPeer, buyer_of

    buyer = buyer_of(agent)
    with HookServer() as hook, ScriptedPeer("agree", "Agreeable Seller") as peer:
        buyer.evaluation_url = hook.url
        buyer.save()
        run = runs.run_start(agent=buyer, intent=intent, task=f"Find me a fractional CFO. Talk to {peer.url}")
        wait_until(
            lambda: Run.across_tenants.get(pk=run.pk).status not in Run.ACTIVE, timeout=60, what="the run"
        )

    negotiation = Negotiation.across_tenants.get(agent=buyer)
    turns = list(negotiation.turns.order_by("seq"))
    assert [(t.side, t.action) for t in turns] == [("ours", "propose"), ("theirs", "accept")]
    assert [t.artifact for t in turns] == [{"seen": 1, "by": "hook"}, {"seen": 2, "by": "hook"}]
    assert [(c["direction"], c["turn"]["seq"], c["taskState"]) for c in hook.calls] == [
        ("outbound", 1, "completed"),
        ("outbound", 2, "completed"),
    ]
    assert hook.committed == [True, True]
