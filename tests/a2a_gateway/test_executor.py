"""The executor's public boundary, in process: a failure of ours is logged here and withheld there."""

from __future__ import annotations

import asyncio
import logging

import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.types import SendMessageRequest
from a2a.utils.errors import InternalError
from asgiref.sync import sync_to_async
from django.db import connections

from a2a_gateway.executor import NegotiationExecutor
from agents.models import Agent
from tests.a2a_gateway.conftest import proposal, user_message


class Recorder(EventQueue):
    """An event queue that keeps what the executor emits."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def enqueue_event(self, event: Event) -> None:
        self.events.append(event)


async def execute(context: RequestContext, events: EventQueue) -> None:
    try:
        await NegotiationExecutor().execute(context, events)
    finally:
        # The ORM ran in asgiref's worker thread: close its connection, or the test
        # database cannot be dropped.
        await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
def test_an_unexpected_error_is_logged_with_agent_and_task_and_withheld(
    seller: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    # An action without a name: the real negotiator fails with a KeyError deep inside.
    seller.allowed_actions = [{"description": "nameless"}]
    seller.save()
    context = RequestContext(
        call_context=ServerCallContext(state={"agent": seller}),
        request=SendMessageRequest(message=user_message(proposal(800))),
        task_id="task-1",
        context_id="ctx-1",
    )
    events = Recorder()

    with (
        caplog.at_level(logging.ERROR, logger="a2a_gateway.executor"),
        pytest.raises(InternalError) as raised,
    ):
        asyncio.run(execute(context, events))

    assert raised.value.message == "The agent could not answer this move."
    assert "'name'" not in str(raised.value)
    # The new Task and WORKING, emitted before the turn ran; no reply.
    assert [type(e).__name__ for e in events.events] == ["Task", "TaskStatusUpdateEvent"]
    assert not events.events[1].status.HasField("message")
    [record] = caplog.records
    assert record.name == "a2a_gateway.executor"
    assert record.getMessage() == "Agent globex/idris could not answer a move on task task-1"
    assert record.exc_info is not None
    failure = record.exc_info[1]
    assert isinstance(failure, KeyError)
    assert str(failure) == "'name'"
