"""Inbound turns at once on one web process: they wait on their models together, not in turn.

The model is a chat-completions server on loopback that holds every call until
:data:`AT_ONCE` calls are in, then answers them all: a turn that waited for
another to end before calling its model would leave the others held until the
gathering gives up, and they would fail. Nothing here is timed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from a2a_gateway.executor import TRY_AGAIN
from agents.models import Agent
from negotiations.models import Negotiation
from tests.a2a_gateway.conftest import TIMEOUT, Endpoint, endpoint_of, proposal
from tests.a2a_gateway.rpc import call, message, task_of, tune
from tests.a2a_gateway.servers import HeldHook, web_process
from tests.chat_server import ChatServer, Reply, status, text
from tests.conftest import LiveStack, on_chat_model, wait_until
from tests.negotiating_policy import NegotiatingPolicy

pytestmark = pytest.mark.django_db(transaction=True)

# The burst: 20 counterparties at once, all admitted by the default max_concurrency.
AT_ONCE = 20
# Seconds the gathering waits for the last call before it gives up (a failure, never a measure).
GATHER_LIMIT = 30.0
ANSWER = "We open at nine."


class Gathering:
    """A responder that holds each call until :data:`AT_ONCE` are held, then lets them all go
    to ``then``; ``gathered`` says whether they all came. Once it has given up, a call is
    answered 503 (the endpoint's one try fails)."""

    def __init__(self, then: Callable[[dict[str, Any]], Reply]) -> None:
        self.then = then
        self.barrier = threading.Barrier(AT_ONCE, timeout=GATHER_LIMIT)
        self.gathered = False

    def __call__(self, body: dict[str, Any]) -> Reply:
        try:
            if self.barrier.wait() == 0:
                self.gathered = True
        except threading.BrokenBarrierError:
            return status(503)
        return self.then(body)


@pytest.fixture
def gathering_chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


def at_once(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """POST every JSON-RPC ``SendMessage`` params of ``bodies`` to ``url`` at once, on connections of
    their own."""

    async def main() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(bodies))
        async with httpx.AsyncClient(timeout=TIMEOUT + GATHER_LIMIT, limits=limits) as http:
            return list(
                await asyncio.gather(
                    *(
                        http.post(
                            url,
                            json={"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": params},
                            headers={"A2A-Version": "1.0"},
                        )
                        for i, params in enumerate(bodies)
                    )
                )
            )

    return asyncio.run(main())


def test_visitors_questions_at_once_all_wait_on_the_model_together(
    live_stack: LiveStack, vera: Agent, gathering_chat: ChatServer
) -> None:
    gathering = Gathering(lambda body: text(ANSWER))
    gathering_chat.responder = gathering
    endpoint = endpoint_of(live_stack, on_chat_model(vera, gathering_chat))
    questions = [
        {"message": {"messageId": f"q-{i}", "role": "ROLE_USER", "parts": [{"text": "When do you open?"}]}}
        for i in range(AT_ONCE)
    ]

    answers = [task_of(r) for r in at_once(endpoint.url, questions)]

    assert gathering.gathered
    assert [a["status"]["state"] for a in answers] == ["TASK_STATE_COMPLETED"] * AT_ONCE
    assert [a["history"][-1]["parts"] for a in answers] == [[{"text": ANSWER}]] * AT_ONCE
    assert len(gathering_chat.requests) == AT_ONCE


def test_moves_of_counterparties_at_once_all_wait_on_the_model_together(
    seller_endpoint: Endpoint, seller: Agent, gathering_chat: ChatServer
) -> None:
    gathering = Gathering(NegotiatingPolicy())
    gathering_chat.responder = gathering
    on_chat_model(seller, gathering_chat)

    answers = [task_of(r) for r in at_once(seller_endpoint.url, [message(proposal(800))] * AT_ONCE)]

    assert gathering.gathered
    assert [a["status"]["state"] for a in answers] == ["TASK_STATE_INPUT_REQUIRED"] * AT_ONCE
    moves = [a["history"][-1]["parts"][0]["data"] for a in answers]
    assert {m["action"] for m in moves} <= {"counter", "propose"}
    assert all(m["terms"]["amount"] >= 950 for m in moves)
    assert len({a["id"] for a in answers}) == AT_ONCE
    assert Negotiation.across_tenants.filter(agent=seller).count() == AT_ONCE


def test_a_turn_waiting_for_a_thread_is_answered_try_again_and_runs_later(
    live_stack: LiveStack, seller: Agent
) -> None:
    """With one turn thread (A2A_TURN_THREADS=1) held by a turn, the next turn waits for it within
    its own turn_timeout, is answered the try-again text like any late turn, and runs once the
    thread is free."""
    with (
        web_process(live_stack, A2A_TURN_THREADS="1") as origin,
        HeldHook() as hook,
        ThreadPoolExecutor(1) as pool,
    ):
        url = endpoint_of(LiveStack(url=origin, env=live_stack.env), seller).url
        tune(seller, turn_timeout=1.0, evaluation_url=hook.url)
        first = pool.submit(call, url, "SendMessage", message(proposal(800)))
        wait_until(hook.entered.is_set, what="the first turn to hold the thread at its hook")

        second = task_of(call(url, "SendMessage", message(proposal(810))))

        # Its turn had not started: the only thread was still in the first turn's hook.
        assert len(hook.calls) == 1
        assert second["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert second["history"][-1]["parts"] == [{"text": TRY_AGAIN}]
        assert task_of(first.result())["history"][-1]["parts"] == [{"text": TRY_AGAIN}]
        hook.release.set()
        # Both turns run to their end, one after the other (the hook answers both moves of each).
        wait_until(lambda: hook.answered == 4, what="both turns to end")
