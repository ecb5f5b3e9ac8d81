"""A message's claim (:mod:`a2a_gateway.claims`) lasts while its turn runs, and no longer.

A message waits for another's claim at most its turn timeout and then some. A request may end
before its turn does: a stream whose client left, a SendMessage with
``returnImmediately``. The claim then stays held until the turn ends, so the same message sent
again meanwhile waits and is applied once, and it is freed then, however the request ended, so no
later message on the Task waits for it. The sweep of Tasks left under way leaves a Task whose
claim is held. The counterparty is a raw JSON-RPC caller of the live stack's gateway; the seller's
model is a loopback chat model whose next call can be held.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from django.utils import timezone

from a2a_gateway.abandoned import abandoned_tasks_answer
from a2a_gateway.claims import CLAIM_GRACE_SECONDS
from a2a_gateway.models import A2ATask
from agents.models import Agent, ModelEndpoint
from negotiations.models import Negotiation, Turn
from parley import locks
from tests.a2a_gateway.conftest import TIMEOUT, Endpoint, move, proposal
from tests.a2a_gateway.rpc import call, message_params, task_of, tune
from tests.chat_server import ChatServer, Reply
from tests.conftest import on_chat_model, wait_until
from tests.negotiating_policy import NegotiatingPolicy

pytestmark = pytest.mark.django_db(transaction=True)

INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


class HoldNext:
    """A negotiating model that, once armed (:meth:`arm`), holds its next call until ``release`` is set."""

    def __init__(self) -> None:
        self.policy = NegotiatingPolicy()
        self.armed = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def arm(self) -> None:
        self.held.clear()
        self.release.clear()
        self.armed.set()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if self.armed.is_set():
            self.armed.clear()
            self.held.set()
            self.release.wait(timeout=120)
        return self.policy(body)


@pytest.fixture
def model() -> Iterator[HoldNext]:
    hold = HoldNext()
    with ChatServer(responder=hold) as server:
        hold.server = server  # type: ignore[attr-defined]
        yield hold
        hold.release.set()


@pytest.fixture
def on_model(seller: Agent, model: HoldNext) -> Agent:
    """The seller on ``model``, a turn allowed 30 s."""
    on_chat_model(seller, model.server)  # type: ignore[attr-defined]
    ModelEndpoint.objects.for_tenant(seller.tenant).filter().update(timeout=60)
    return tune(seller, turn_timeout=30.0)


def on_0_3(params: dict[str, Any]) -> dict[str, Any]:
    """``params``' message as the 0.3 wire writes it."""
    m = params["message"]
    message = {"kind": "message", "messageId": m["messageId"], "contextId": m["contextId"], "role": "user"}
    message["parts"] = [{"kind": "data", "data": m["parts"][0]["data"]}]
    if "taskId" in m:
        message["taskId"] = m["taskId"]
    return {"message": message}


def stream_then_leave(url: str, method: str, params: dict[str, Any], *, version: str | None) -> None:
    """Open a stream, read its first event, and close the connection: a client that left."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"Accept": "text/event-stream", **({"A2A-Version": version} if version else {})}

    async def read_one() -> None:
        async with (
            httpx.AsyncClient(timeout=TIMEOUT) as http,
            http.stream("POST", url, json=body, headers=headers) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    return

    asyncio.run(read_one())


def claim_held(task: dict[str, Any]) -> bool:
    """Whether anyone holds the claim of a message on the stored Task ``task``."""
    row = A2ATask.across_tenants.get(task_id=task["id"])
    return locks.holder_exists(f"a2a-message|{row.owner}|task|{task['id']}")


def applied(message_id: str) -> int:
    return Turn.across_tenants.filter(side=Turn.Side.THEIRS, raw__messageId=message_id).count()


@pytest.mark.parametrize(("method", "version"), [("SendStreamingMessage", "1.0"), ("message/stream", None)])
def test_a_stream_whose_client_left_mid_turn_holds_its_claim_until_the_turn_ends(
    seller_endpoint: Endpoint, on_model: Agent, model: HoldNext, method: str, version: str | None
) -> None:
    url = seller_endpoint.url
    task = task_of(call(url, "SendMessage", message_params(proposal(800))))
    params = message_params(move("counter", "900?", terms={"amount": 900, "currency": "EUR"}), task=task)
    model.arm()
    stream_then_leave(url, method, params if version else on_0_3(params), version=version)
    wait_until(model.held.is_set, timeout=30, what="the turn to wait on the model")
    assert claim_held(task), "the turn runs without its message's claim"

    model.release.set()
    wait_until(
        lambda: A2ATask.across_tenants.get(task_id=task["id"]).state == INPUT_REQUIRED,
        timeout=60,
        what="the turn to end",
    )
    wait_until(lambda: not claim_held(task), timeout=30, what="the claim to be freed")
    following = message_params(move("counter", "920?", terms={"amount": 920, "currency": "EUR"}), task=task)
    assert task_of(call(url, "SendMessage", following))["status"]["state"] == INPUT_REQUIRED
    assert applied(params["message"]["messageId"]) == 1


@pytest.mark.parametrize("first_answer", ["returnImmediately", "stream left"])
def test_a_first_message_sent_again_while_its_turn_runs_after_an_early_answer_is_applied_once(
    seller_endpoint: Endpoint, on_model: Agent, model: HoldNext, first_answer: str
) -> None:
    url = seller_endpoint.url
    params = message_params(proposal(800))
    model.arm()
    if first_answer == "returnImmediately":
        early = call(url, "SendMessage", {**params, "configuration": {"returnImmediately": True}})
        assert task_of(early)["status"]["state"] in {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
    else:
        stream_then_leave(url, "SendStreamingMessage", params, version="1.0")
    wait_until(model.held.is_set, timeout=30, what="the turn to wait on the model")
    answers: list[httpx.Response] = []
    again = threading.Thread(target=lambda: answers.append(call(url, "SendMessage", params)), daemon=True)
    again.start()
    again.join(timeout=3)
    assert again.is_alive(), "the message sent again was answered while its first turn still ran"
    model.release.set()
    again.join(timeout=60)

    [answer] = answers
    assert task_of(answer)["status"]["state"] == INPUT_REQUIRED
    assert applied(params["message"]["messageId"]) == 1
    assert Negotiation.across_tenants.filter(agent=on_model).count() == 1
    assert list(A2ATask.across_tenants.filter(agent=on_model).values_list("task_id", flat=True)) == [
        task_of(answer)["id"]
    ]


def test_the_sweep_leaves_a_task_whose_turn_holds_its_claim(
    seller_endpoint: Endpoint, on_model: Agent, model: HoldNext
) -> None:
    url = seller_endpoint.url
    params = message_params(proposal(800))
    model.arm()
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(call(url, "SendMessage", params)), daemon=True)
    first.start()
    wait_until(model.held.is_set, timeout=30, what="the turn to wait on the model")
    row = A2ATask.across_tenants.get(context_id=params["message"]["contextId"])
    # An operator shortens the turn timeout while the turn runs: by the clock the Task is overdue.
    tune(on_model, turn_timeout=5.0)
    assert abandoned_tasks_answer(now=timezone.now() + timedelta(minutes=5)) == []

    model.release.set()
    first.join(timeout=60)
    [answer] = answers
    assert task_of(answer)["id"] == row.task_id
    stored = A2ATask.across_tenants.get(task_id=row.task_id)
    assert stored.state == task_of(answer)["status"]["state"]
    assert stored.data["history"] == task_of(answer)["history"]


class NegotiationHeld:
    """The Negotiation row of the Task ``task_id`` held ``FOR UPDATE`` from a connection of its own
    until :meth:`free`: a turn on it waits for the row, past its turn timeout, and keeps its claim."""

    def __init__(self, task_id: str) -> None:
        self.taken = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._hold, args=(task_id,), daemon=True)
        self.thread.start()
        assert self.taken.wait(timeout=30), "the negotiation's row could not be locked"

    def _hold(self, task_id: str) -> None:
        try:
            with transaction.atomic():
                list(Negotiation.across_tenants.select_for_update().filter(task_id=task_id))
                self.taken.set()
                self.release.wait(timeout=120)
        finally:
            connection.close()

    def free(self) -> None:
        self.release.set()
        self.thread.join(timeout=30)


def test_a_message_waits_for_its_claim_at_most_the_turn_timeout_and_then_some(
    seller_endpoint: Endpoint, on_model: Agent
) -> None:
    url = seller_endpoint.url
    task = task_of(call(url, "SendMessage", message_params(proposal(800))))
    tune(on_model, turn_timeout=1.0)
    stuck = NegotiationHeld(task["id"])
    try:
        first = message_params(move("counter", "900?", terms={"amount": 900, "currency": "EUR"}), task=task)
        # Answered with the try-again text after a second; the turn goes on, waiting for the row.
        assert task_of(call(url, "SendMessage", first))["status"]["state"] == INPUT_REQUIRED
        answers: list[httpx.Response] = []
        following = message_params(
            move("counter", "930?", terms={"amount": 930, "currency": "EUR"}), task=task
        )
        waiting = threading.Thread(
            target=lambda: answers.append(call(url, "SendMessage", following)), daemon=True
        )
        waiting.start()
        # turn_timeout + CLAIM_GRACE_SECONDS, and a turn timeout of its own, with room to spare.
        waiting.join(timeout=1.0 + CLAIM_GRACE_SECONDS + 30)
        assert not waiting.is_alive(), "the message waited on the stuck turn's claim past its bound"
    finally:
        stuck.free()
    [answer] = answers
    assert task_of(answer)["status"]["state"] == INPUT_REQUIRED
    # The stuck turns end once the row is free, and let their claims go.
    wait_until(lambda: not claim_held(task), timeout=60, what="the overrunning turns to end")
