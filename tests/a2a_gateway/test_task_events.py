"""Task events on every web process: a SubscribeToTask stream (0.3 ``tasks/resubscribe``) on one web
process gets the events of a turn another web process runs (a2a_gateway.events).

Two real uvicorn processes on the live stack's Postgres and Redis: the live stack's own (A) and
:func:`tests.a2a_gateway.servers.web_process` (B). The follow-up goes to A, whose turn waits in the
held evaluation hook while a2a-sdk's client subscribes on B. A worker's reply reaches a subscription
too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.server.cluster import TaskVersion
from a2a.types import StreamResponse, SubscribeToTaskRequest, Task, TaskState
from asgiref.sync import sync_to_async
from django.db import connections

from a2a_gateway.events import SharedTaskEvents
from a2a_gateway.models import A2ATask, PushConfig
from agents.models import Agent
from negotiations.models import Negotiation
from negotiations.services import parking
from tests.a2a_gateway.conftest import Endpoint, endpoint_of, move, proposal, run, user_message
from tests.a2a_gateway.servers import HeldHook, on_wire, web_process
from tests.a2a_gateway.test_streaming import data_of, shape
from tests.conftest import LiveStack, principal_member, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]
# Seconds a subscription may take to reach its task's next parked or final state before the test
# fails (a bound on a stream that would otherwise wait for ever, not a timing asserted).
STREAM_LIMIT = 30.0


@pytest.fixture(scope="module")
def other_origin(live_stack: LiveStack) -> Iterator[str]:
    """Web process B, beside the live stack's A, on the same database and Redis."""
    with web_process(live_stack) as origin:
        yield origin


def seller_at(origin: str, seller: Agent) -> Endpoint:
    return Endpoint(agent=seller, url=f"{origin}/a2a/{seller.tenant.slug}/{seller.slug}")


def subscribe_until_settled(card: Any, task_id: str, hook: HeldHook) -> list[StreamResponse]:
    """Subscribe to ``task_id`` with a2a-sdk's streaming client from ``card``; once the first event
    is in, release ``hook``; every event until the task is parked or final."""

    async def call(http: httpx.AsyncClient) -> list[StreamResponse]:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        events = client.subscribe(SubscribeToTaskRequest(id=task_id))
        seen = [await anext(events)]
        hook.release.set()

        async def rest() -> None:
            async for event in events:
                seen.append(event)
                if shape(event)[1] in ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"):
                    return

        try:
            await asyncio.wait_for(rest(), STREAM_LIMIT)
        except TimeoutError:
            pytest.fail(f"the stream on the other web process stopped after {[shape(e) for e in seen]}")
        finally:
            await events.aclose()
        return seen

    return run(call)


@pytest.mark.parametrize(
    ("wire", "opened_on"),
    [("1.0", "B"), ("0.3", "B"), ("1.0", "A")],
    ids=["1.0-opened-on-B", "0.3-opened-on-B", "1.0-opened-on-A"],
)
def test_a_subscriber_on_another_web_process_gets_the_turn_that_process_a_runs(
    live_stack: LiveStack, other_origin: str, seller: Agent, wire: str, opened_on: str
) -> None:
    here, there = endpoint_of(live_stack, seller), seller_at(other_origin, seller)
    card_here, card_there = on_wire(here.card(), wire), on_wire(there.card(), wire)
    # Opened on B, B keeps the task's ActiveTask parked in memory while A runs the next turn; opened on
    # A, B has none.
    opener, opener_card = (there, card_there) if opened_on == "B" else (here, card_here)
    first = opener.send(user_message(proposal(800)), card=opener_card)
    assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    offer = data_of(first.history[-1])
    accept = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )

    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        seller.evaluation_url = hook.url
        seller.save()
        sent = pool.submit(here.send, user_message(accept, task=first), card=card_here)
        wait_until(hook.entered.is_set, what="the turn on web process A to reach the evaluation hook")
        events = subscribe_until_settled(card_there, first.id, hook)
        answered = sent.result()

    assert shape(events[0]) == ("task", "TASK_STATE_WORKING")
    assert events[0].task.id == first.id
    assert [shape(e) for e in events[1:]] == [
        ("status", "TASK_STATE_WORKING", "message"),
        ("artifact", "negotiator:reply"),
        ("artifact", "negotiator:negotiation-outcome"),
        # The hook's artifact for each move of the turn: theirs and ours, the negotiation's third and fourth.
        ("artifact", "turn-evaluation:3"),
        ("artifact", "turn-evaluation:4"),
        ("status", "TASK_STATE_COMPLETED", ""),
    ]
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert events[1].status_update.status.message == answered.history[-1]


def test_a_subscriber_on_another_web_process_gets_the_end_of_a_task_whose_call_answers_at_its_end(
    live_stack: LiveStack, other_origin: str, seller: Agent
) -> None:
    """A blocking SendMessage's new task publishes no event (its caller learns its id from the
    answer); a subscriber on another process that found it anyway (here: in the database; a caller:
    ListTasks) gets the stored task, then the task as it ends, read from the store."""
    here, there = endpoint_of(live_stack, seller), seller_at(other_origin, seller)
    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        seller.evaluation_url = hook.url
        seller.save()
        sent = pool.submit(here.send, user_message(proposal(800)))
        wait_until(hook.entered.is_set, what="the turn on web process A to reach the evaluation hook")
        task_id = A2ATask.across_tenants.get().task_id
        events = subscribe_until_settled(there.card(), task_id, hook)
        answered = sent.result()

    assert [shape(e) for e in events] == [
        ("task", "TASK_STATE_WORKING"),
        ("task", "TASK_STATE_INPUT_REQUIRED"),
    ]
    assert events[1].task == answered


@pytest.fixture
def asking_seller(seller: Agent) -> Agent:
    """The seller without its floor: its offline negotiator asks its party, Idris, for the limit."""
    seller.term_guards = []
    seller.principal = principal_member(seller.tenant, "idris")
    seller.save()
    return seller


def test_the_reply_a_worker_puts_on_a_task_reaches_its_subscribers(
    live_stack: LiveStack, asking_seller: Agent
) -> None:
    """The live worker's reply to a parked task (a2a_gateway.replies, once its party answers) is
    published as the Task to the task's group, which a subscription on any web process joins
    (SharedTaskEvents.subscribe, here in the test process, on the same Redis)."""
    held = endpoint_of(live_stack, asking_seller).send(user_message(proposal(800)))
    assert held.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    # The worker replies at once only on a task with a push config of its owner (push.invalid: the
    # push itself goes nowhere).
    PushConfig.objects.create(
        tenant=asking_seller.tenant,
        agent=asking_seller,
        owner=A2ATask.across_tenants.get(task_id=held.id).owner,
        task_id=held.id,
        config_id=held.id,
        data={"url": "https://push.invalid/hook", "taskId": held.id, "id": held.id},
    )
    negotiation = Negotiation.across_tenants.get(agent=asking_seller, task_id=held.id)
    subscription = SharedTaskEvents().subscribe(held.id, after=TaskVersion.MISSING)
    loop = asyncio.new_event_loop()
    try:
        before = loop.run_until_complete(anext(subscription)).event
        parking.negotiation_guidance_give(negotiation=negotiation, answer="At least €1,000 a day.", user=None)
        after = loop.run_until_complete(asyncio.wait_for(anext(subscription), STREAM_LIMIT)).event
    finally:
        loop.run_until_complete(subscription.aclose())
        loop.run_until_complete(sync_to_async(connections.close_all)())
        loop.close()

    assert isinstance(before, Task)
    assert isinstance(after, Task)
    assert [m.message_id for m in after.history[:-1]] == [m.message_id for m in before.history]
    assert data_of(after.history[-1])["terms"] == {"amount": 1429, "currency": "EUR"}
    assert after.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
