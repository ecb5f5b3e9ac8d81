"""The caps on an agent's public endpoint, through the live stack: each refusal, its message, no write.

A turn is made slow for real, without a clock, by an evaluation hook that holds it
(:class:`tests.a2a_gateway.servers.HeldHook`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from a2a.client.errors import A2AClientError
from a2a.server.context import ServerCallContext
from a2a.types import TaskState
from a2a.utils.errors import UnsupportedOperationError
from django.conf import settings
from django.utils import timezone

from a2a_gateway.caps import (
    BUSY,
    TURN_RELEASE,
    Counters,
    MemoryCounters,
    RedisCounters,
    month_start,
    turn_admit,
)
from agents.models import Agent, Intent, Run
from tests.a2a_gateway.conftest import Endpoint, counts, move, proposal, user_message
from tests.a2a_gateway.rpc import call, endpoint_on, inbound_contexts, message, refusal, task_of, tune
from tests.a2a_gateway.servers import HeldHook, web_process
from tests.conftest import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TRY_AGAIN = -32010
INVALID_PARAMS = -32602
UNSUPPORTED_OPERATION = -32004
# The second web process: a short rate window, and X-Real-IP trusted as the caller's address.
SHORT_WINDOW = 2
TRUSTED_HEADER = "X-Real-IP"


@pytest.fixture(scope="module")
def other_web(live_stack: LiveStack) -> Iterator[str]:
    """A second web process: a rate window of :data:`SHORT_WINDOW` s, :data:`TRUSTED_HEADER` trusted."""
    with web_process(
        live_stack,
        A2A_RATE_LIMIT_WINDOW=str(SHORT_WINDOW),
        A2A_TRUSTED_PROXY_HEADERS=TRUSTED_HEADER,
    ) as origin:
        yield origin


# --- max_input_chars ------------------------------------------------------------------------


def test_a_message_over_max_input_chars_is_invalid_params(seller_endpoint: Endpoint, seller: Agent) -> None:
    tune(seller, max_input_chars=40)
    data = {"action": "propose", "message": "hi"}
    params = message(data)
    params["message"]["parts"].append({"text": "x" * 30})
    size = len(json.dumps(data, separators=(",", ":"))) + 30

    response = call(seller_endpoint.url, "SendMessage", params)

    assert refusal(response, status=200, code=INVALID_PARAMS) == (
        f"The message has {size} characters of text and data; this agent takes at most 40."
    )
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
    assert inbound_contexts(seller) == {}


def test_a_message_at_max_input_chars_is_taken(seller_endpoint: Endpoint, seller: Agent) -> None:
    data = proposal(800)
    # As parsed: numbers are floats; the euro sign is one character.
    parsed = {**data, "terms": {"amount": 800.0, "currency": "EUR"}}
    tune(seller, max_input_chars=len(json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))))

    task = task_of(call(seller_endpoint.url, "SendMessage", message(data)))

    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


# --- The per-caller rate limit --------------------------------------------------------------


def test_a_caller_over_the_rate_limit_is_told_when_to_try_again(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    tune(seller, rate_limit=2)
    for amount in (800, 810):
        task_of(call(seller_endpoint.url, "SendMessage", message(proposal(amount))))
    before = counts()

    response = call(seller_endpoint.url, "SendMessage", message(proposal(820)))

    text = refusal(response, status=429, code=TRY_AGAIN)
    retry = int(response.headers["Retry-After"])
    assert 1 <= retry <= 60
    assert text == (
        f"Too many messages: this agent takes at most 2 a minute from each caller. Try again in {retry} s."
    )
    assert counts() == before
    # Per caller: another counterparty is still taken, and reads are not counted.
    assert task_of(call(seller_endpoint.url, "SendMessage", message(proposal(830)), address="127.0.0.2"))
    assert call(seller_endpoint.url, "ListTasks", {}).status_code == 200


def test_the_rate_limit_window_moves_on(other_web: str, seller: Agent) -> None:
    tune(seller, rate_limit=1)
    url = endpoint_on(other_web, seller)
    answers: list[httpx.Response] = []

    def sent_and(status: int) -> bool:
        answers.append(call(url, "SendMessage", message(proposal(800 + len(answers)))))
        return answers[-1].status_code == status

    # However slow this machine, the window holds one message, so a burst meets the limit.
    wait_until(lambda: sent_and(429), timeout=SHORT_WINDOW * 10, what="the rate limit")
    assert answers[0].status_code == 200
    assert refusal(answers[-1], status=429, code=TRY_AGAIN).startswith(
        f"Too many messages: this agent takes at most 1 per {SHORT_WINDOW} s from each caller."
    )

    # Refused messages are not counted: once the last taken leaves the window, the next is taken.
    wait_until(lambda: sent_and(200), timeout=SHORT_WINDOW * 10, interval=0.25, what="the window to move on")

    assert task_of(answers[-1])["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


# --- The tenant's model budget --------------------------------------------------------------


@pytest.fixture
def intent(seller: Agent) -> Intent:
    return Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell a week of work.")


def spend(intent: Intent, cost: str) -> Run:
    return Run.objects.create(tenant=intent.tenant, agent=intent.agent, intent=intent, cost=Decimal(cost))


def test_a_tenant_that_has_spent_its_budget_takes_no_inbound_turn(
    seller_endpoint: Endpoint, seller: Agent, intent: Intent
) -> None:
    seller.tenant.model_budget = Decimal("2.50")
    seller.tenant.save()
    spend(intent, "1.25")
    spend(intent, "1.25")
    this_month = month_start(timezone.now())
    following = month_start(this_month + timedelta(days=32))

    response = call(seller_endpoint.url, "SendMessage", message(proposal(800)))

    assert refusal(response, status=429, code=TRY_AGAIN) == (
        f"This agent's organisation has used its model budget for {this_month:%B %Y}; "
        f"it takes no new messages until 1 {following:%B %Y} (UTC)."
    )
    assert 0 < int(response.headers["Retry-After"]) <= 31 * 24 * 3600
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
    assert inbound_contexts(seller) == {}


def test_only_this_months_spend_counts_against_the_budget(
    seller_endpoint: Endpoint, seller: Agent, intent: Intent
) -> None:
    seller.tenant.model_budget = Decimal("2.50")
    seller.tenant.save()
    spend(intent, "1.00")
    earlier = spend(intent, "9.00")
    Run.across_tenants.filter(pk=earlier.pk).update(
        created_at=month_start(timezone.now()) - timedelta(seconds=1)
    )

    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))

    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


# --- Conversations: max_turns_per_context and max_contexts ----------------------------------


def test_a_conversation_takes_at_most_max_turns_per_context(seller_endpoint: Endpoint, seller: Agent) -> None:
    tune(seller, max_turns_per_context=2)
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(850), task=task)))
    before, stored = counts(), call(seller_endpoint.url, "GetTask", {"id": task["id"]}).json()["result"]

    response = call(seller_endpoint.url, "SendMessage", message(proposal(900), task=task))

    assert refusal(response, status=200, code=UNSUPPORTED_OPERATION) == (
        f"Conversation {task['contextId']} has reached this agent's limit of 2 messages; "
        "start a new one (a message without taskId and contextId)."
    )
    assert counts() == before
    assert call(seller_endpoint.url, "GetTask", {"id": task["id"]}).json()["result"] == stored
    assert inbound_contexts(seller) == {task["contextId"]: 2}
    # A new conversation is taken.
    assert task_of(call(seller_endpoint.url, "SendMessage", message(proposal(900))))


def test_contexts_beyond_max_contexts_forget_the_least_recently_used(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    tune(seller, max_contexts=2)
    first, second, third = (
        task_of(call(seller_endpoint.url, "SendMessage", message(proposal(amount))))
        for amount in (800, 810, 820)
    )
    assert inbound_contexts(seller) == {second["contextId"]: 1, third["contextId"]: 1}

    counter = move("counter", "Meet me at €900.", terms={"amount": 900, "currency": "EUR"})
    task_of(call(seller_endpoint.url, "SendMessage", message(counter, task=first)))

    # The first conversation starts its count again; the second, now the least recent, goes.
    assert inbound_contexts(seller) == {third["contextId"]: 1, first["contextId"]: 1}


def test_the_conversation_counter_counts_and_forgets_on_this_database(seller: Agent) -> None:
    """In process, so the embedded default's SQLite runs it too: turns counted up to the cap, and a
    new conversation beyond ``max_contexts`` forgetting the least recently used."""
    tune(seller, max_contexts=2, max_turns_per_context=2)

    def admit(context_id: str) -> None:
        context = ServerCallContext(state={"agent": seller})
        try:
            asyncio.run(turn_admit(context, context_id))
        finally:
            release = context.state.get(TURN_RELEASE)
            if release is not None:
                asyncio.run(release())

    for context_id in ("first", "second", "first", "third"):
        admit(context_id)
    with pytest.raises(UnsupportedOperationError):
        admit("first")

    # "second" was the least recently used when "third" came.
    assert inbound_contexts(seller) == {"first": 2, "third": 1}


# --- max_concurrency ------------------------------------------------------------------------


def test_a_busy_agent_says_try_again_on_every_web_process(
    seller_endpoint: Endpoint, seller: Agent, other_web: str
) -> None:
    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        tune(seller, max_concurrency=1, evaluation_url=hook.url)
        first = pool.submit(call, seller_endpoint.url, "SendMessage", message(proposal(800)))
        wait_until(hook.entered.is_set, what="the first turn to reach its hook")
        before = counts()

        here = call(seller_endpoint.url, "SendMessage", message(proposal(810)))
        there = call(endpoint_on(other_web, seller), "SendMessage", message(proposal(820)))

        for response in (here, there):
            assert refusal(response, status=503, code=TRY_AGAIN) == BUSY
            assert response.headers["Retry-After"] == "2"
        assert counts() == before
        hook.release.set()
        assert task_of(first.result())["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    # The turn gave its slot back as it ended.
    assert task_of(call(seller_endpoint.url, "SendMessage", message(proposal(830))))


def test_busy_refusals_cost_the_caller_none_of_its_rate(seller_endpoint: Endpoint, seller: Agent) -> None:
    """A caller that retries on 503, as it is told to, is taken once the agent is free, and then
    still has its whole allowance: no more (a2a-sdk's client, at 1.0, as the caller)."""
    limit = 3
    card = seller_endpoint.card()
    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        tune(seller, max_concurrency=1, rate_limit=limit, evaluation_url=hook.url)
        # Another caller's turn holds the one slot.
        other = "127.0.0.2"
        held = pool.submit(call, seller_endpoint.url, "SendMessage", message(proposal(800)), address=other)
        wait_until(hook.entered.is_set, what="the other caller's turn to reach its hook")

        for attempt in range(limit * 3):
            with pytest.raises(A2AClientError) as refused:
                seller_endpoint.send(user_message(proposal(810 + attempt)), card=card)
            answer = refused.value.__cause__
            assert isinstance(answer, httpx.HTTPStatusError)
            assert refusal(answer.response, status=503, code=TRY_AGAIN) == BUSY
            assert answer.response.headers["Retry-After"] == "2"
        hook.release.set()
        assert task_of(held.result())["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    for attempt in range(limit):
        task = seller_endpoint.send(user_message(proposal(900 + attempt)), card=card)
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    with pytest.raises(A2AClientError) as refused:
        seller_endpoint.send(user_message(proposal(990)), card=card)
    answer = refused.value.__cause__
    assert isinstance(answer, httpx.HTTPStatusError)
    assert refusal(answer.response, status=429, code=TRY_AGAIN).startswith(
        f"Too many messages: this agent takes at most {limit} a minute from each caller."
    )


# --- The counters, in Redis and in the process ----------------------------------------------


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "memory"])
def backend(request: pytest.FixtureRequest) -> Counters:
    """Redis's counters, or the embedded default's in-process ones: the same behaviour."""
    return RedisCounters(settings.REDIS_URL) if request.param == "redis" else MemoryCounters()


def scenario(steps: Callable[[str], Awaitable[None]]) -> None:
    """Run ``steps`` on a fresh key, in one event loop."""
    asyncio.run(steps(f"test:{uuid.uuid4().hex}"))


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(200):
        if await check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def test_slots_are_bounded_given_back_and_expire(backend: Counters) -> None:
    async def steps(key: str) -> None:
        one = await backend.slot_acquire(key, 2, 60)
        two = await backend.slot_acquire(key, 2, 60)
        assert one is not None
        assert two not in (None, one)
        assert await backend.slot_acquire(key, 2, 60) is None
        await backend.slot_release(key, one)
        assert await backend.slot_acquire(key, 2, 0.2) is not None
        assert await backend.slot_acquire(key, 2, 60) is None

        async def free() -> bool:
            return await backend.slot_acquire(key, 2, 60) is not None

        # The short slot expires on its own, as one of a process that died would.
        await eventually(free, "the short slot to expire")

    scenario(steps)


def test_the_rate_log_counts_within_its_window(backend: Counters) -> None:
    def token() -> str:
        return uuid.uuid4().hex

    async def steps(key: str) -> None:
        assert await backend.hit(key, 2, 60, token()) == 0
        assert await backend.hit(key, 2, 60, token()) == 0
        wait = await backend.hit(key, 2, 60, token())
        assert 0 < wait <= 60
        assert await backend.hit(key, 3, 60, token()) == 0  # refused hits were not counted

        short = f"{key}:short"
        assert await backend.hit(short, 1, 0.2, token()) == 0
        assert await backend.hit(short, 1, 0.2, token()) > 0

        async def counted() -> bool:
            return await backend.hit(short, 1, 0.2, token()) == 0

        await eventually(counted, "the short window to move on")

    scenario(steps)


def test_a_hit_given_back_no_longer_counts(backend: Counters) -> None:
    async def steps(key: str) -> None:
        kept, given_back = uuid.uuid4().hex, uuid.uuid4().hex
        assert await backend.hit(key, 2, 60, kept) == 0
        assert await backend.hit(key, 2, 60, given_back) == 0
        assert await backend.hit(key, 2, 60, uuid.uuid4().hex) > 0

        await backend.unhit(key, given_back)
        await backend.unhit(key, uuid.uuid4().hex)  # one never counted: nothing to give back

        again = uuid.uuid4().hex
        assert await backend.hit(key, 2, 60, again) == 0
        assert await backend.hit(key, 2, 60, uuid.uuid4().hex) > 0
        # The hits kept are the ones counted: giving one back frees exactly one.
        await backend.unhit(key, kept)
        assert await backend.hit(key, 2, 60, uuid.uuid4().hex) == 0

    scenario(steps)
