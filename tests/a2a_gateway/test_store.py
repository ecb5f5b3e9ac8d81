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
from django.db import IntegrityError, connections

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

    assert A2ATask.across_tenants.get(task_id="task-utc").status_timestamp == STAMP
    assert since_before == ["task-utc"]
    assert since_after == []


def test_a_saved_task_is_replaced_whole_in_its_partition(seller: Agent) -> None:
    context = ServerCallContext(state={"agent": seller})

    async def scenario() -> None:
        store = DjangoTaskStore()
        try:
            await store.save(new_task("task-1", "ctx-1", TaskState.TASK_STATE_WORKING), context)
            await store.save(new_task("task-1", "ctx-1", TaskState.TASK_STATE_INPUT_REQUIRED), context)
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(scenario())

    [row] = A2ATask.across_tenants.all()
    assert (row.task_id, row.owner, row.agent_id, row.tenant_id) == (
        "task-1",
        f"{seller.pk}|",
        seller.pk,
        seller.tenant_id,
    )
    assert (row.context_id, row.state) == ("ctx-1", "TASK_STATE_INPUT_REQUIRED")
    assert row.data["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_a_task_id_another_partition_holds_is_refused_and_left_as_it_was(seller: Agent, agent: Agent) -> None:
    mine, theirs = ServerCallContext(state={"agent": seller}), ServerCallContext(state={"agent": agent})

    async def scenario() -> None:
        store = DjangoTaskStore()
        try:
            await store.save(new_task("task-1", "ctx-1", TaskState.TASK_STATE_WORKING), mine)
            with pytest.raises(IntegrityError):
                await store.save(new_task("task-1", "ctx-2", TaskState.TASK_STATE_COMPLETED), theirs)
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(scenario())

    [row] = A2ATask.across_tenants.all()
    assert (row.owner, row.tenant_id, row.context_id, row.state) == (
        f"{seller.pk}|",
        seller.tenant_id,
        "ctx-1",
        "TASK_STATE_WORKING",
    )
