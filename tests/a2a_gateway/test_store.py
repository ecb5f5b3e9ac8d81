"""The Task store keeps status timestamps as the UTC instants the protobuf Timestamps are."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from a2a.helpers import new_task
from a2a.server.context import ServerCallContext
from a2a.types import ListTasksRequest, TaskState
from asgiref.sync import sync_to_async
from django.db import connections

from a2a_gateway.models import A2ATask
from a2a_gateway.store import DjangoTaskStore
from agents.models import Agent

pytestmark = pytest.mark.django_db(transaction=True)

STAMP = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in a process timezone twelve hours from UTC, so a conversion through it would show."""
    monkeypatch.setenv("TZ", "Pacific/Auckland")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_status_timestamps_are_stored_and_filtered_as_utc(seller: Agent) -> None:
    context = ServerCallContext(state={"agent": seller})

    async def scenario() -> tuple[list[str], list[str]]:
        store = DjangoTaskStore()
        task = new_task("task-utc", "ctx-utc", TaskState.TASK_STATE_INPUT_REQUIRED)
        task.status.timestamp.FromDatetime(STAMP)
        try:
            await store.save(task, context)
            before, after = ListTasksRequest(), ListTasksRequest()
            before.status_timestamp_after.FromDatetime(datetime(2025, 1, 2, 3, 4, 4, tzinfo=UTC))
            after.status_timestamp_after.FromDatetime(datetime(2025, 1, 2, 3, 4, 6, tzinfo=UTC))
            return (
                [t.id for t in (await store.list(before, context)).tasks],
                [t.id for t in (await store.list(after, context)).tasks],
            )
        finally:
            await sync_to_async(connections.close_all)()

    since_before, since_after = asyncio.run(scenario())

    assert A2ATask.objects.get(task_id="task-utc").status_timestamp == STAMP
    assert since_before == ["task-utc"]
    assert since_after == []
