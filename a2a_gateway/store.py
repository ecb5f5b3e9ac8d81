"""a2a-sdk's TaskStore over the Django ORM: every agent's Tasks in Postgres.

The agent comes from the call context (the gateway resolves it from the URL
before the SDK runs); the owner partition is the agent plus the caller, so one
agent can never read another's Tasks, whatever id it is given.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import decode_page_token, encode_page_token
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection
from django.db.models import QuerySet
from django.utils import timezone
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a_gateway.models import ID_LENGTH, A2ATask
from agents.models import Agent
from negotiations.wire import storage_problem
from representative.answers import HISTORY_EXCHANGES, Exchange

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
# Beyond any real listing, within what an OFFSET holds.
MAX_PAGE_START = 2**31
# Where the gateway leaves, in the call context's state, the id it has just generated for a new task
# (a fresh UUID no one else can know): until the task is first saved, it is known not to be stored.
NEW_TASK = "new_task"
# Where the gateway marks, in the call context's state, a call answered only once its task is final
# (SendMessage, 0.3 message/send) that opens a task without push configs: the task's passing states
# need not be written before the answer.
ANSWERED_AT_END = "answered_at_end"
# Seconds a passing state of such a call's task is held before it is written, unless a later state
# replaces it first: a turn that answers at once writes its task once.
HOLD_SECONDS = 0.1
# The states held: only SUBMITTED (and its artifacts). WORKING is written at once: an executor says it
# before a long turn, during which the task must be found from any process (GetTask, CancelTask).
PASSING = frozenset({TaskState.TASK_STATE_SUBMITTED})


def call_agent(context: ServerCallContext) -> Agent:
    """The agent the gateway resolved for this call (``state['agent']``)."""
    agent = context.state.get("agent")
    if not isinstance(agent, Agent):
        raise LookupError("the call context carries no agent; the gateway must resolve it first")
    return agent


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a stored task or context id ("must be at most 200 characters",
    "must not contain a NUL character", which Postgres refuses), or None if it can."""
    return storage_problem(value, ID_LENGTH)


def owner_of(context: ServerCallContext) -> str:
    """The partition of this call's Tasks (and push configs, inbound contexts, rate counts):
    ``<agent id>|<caller>``.

    The caller is the ``user_name`` the gateway's edge gives every HTTP call
    (:mod:`a2a_gateway.auth`): ``key:<prefix>`` for a caller with a key of the
    agent, ``anon:<digest>`` for an anonymous counterparty (a keyed digest of its
    address, :func:`a2a_gateway.auth.client_address`), so no two callers share
    one and another caller's task id is "not found". A context built in process
    without a user (tests) has ``<agent id>|``, which no HTTP caller can reach.
    """
    return owner_for(call_agent(context), context.user.user_name)


def owner_for(agent: Agent, caller: str) -> str:
    """The partition of ``caller`` (a :class:`a2a_gateway.auth.Caller`'s name) at ``agent``: see
    :func:`owner_of`."""
    return f"{agent.pk}|{caller}"


def stored_task(row: A2ATask) -> Task:
    """The Task ``row`` holds."""
    return ParseDict(row.data, Task(), ignore_unknown_fields=True)


def row_fields(task: Task) -> dict[str, Any]:
    """What an :class:`A2ATask` row keeps of ``task`` besides its ids, owner and agent."""
    timestamp = task.status.timestamp.ToDatetime(tzinfo=UTC) if task.status.HasField("timestamp") else None
    return {
        "context_id": task.context_id,
        "state": TaskState.Name(task.status.state),
        "status_timestamp": timestamp,
        "data": MessageToDict(task),
    }


@dataclass
class _Write:
    """One write of a task row: ``task`` (a copy: the SDK changes its own at the next event) in
    ``owner``'s partition at ``agent``. A held one replaced before it is written is never made
    into the row's fields (:func:`row_fields`)."""

    agent: Agent
    owner: str
    task: Task


class DjangoTaskStore(TaskStore):
    """Tasks as protobuf JSON in :class:`a2a_gateway.models.A2ATask`, owner-scoped.

    The SDK saves a task at every event of a turn. For a call answered only once
    its task is final (:data:`ANSWERED_AT_END`), a passing state (:data:`PASSING`) is held up to
    :data:`HOLD_SECONDS` and written only if no later state replaces it by then; the
    final one is written before :meth:`save` returns, and the gateway writes the
    task's held state (:meth:`flush`) before it answers, so every answer stands on a
    stored task. Writes of one task happen in the order of its saves; a read in this
    process first writes what it holds of the task.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[_Write, asyncio.TimerHandle]] = {}
        self._last: dict[str, asyncio.Future[None]] = {}

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Store ``task`` in the caller's partition (:func:`_task_write`), or hold a passing state.

        Raises IntegrityError for a task id another partition holds (ids are unique over all).
        """
        if context.state.get(NEW_TASK) == task.id:
            del context.state[NEW_TASK]  # saved (or held, which get writes first): it may be stored now
        snapshot = Task()
        snapshot.CopyFrom(task)
        write = _Write(call_agent(context), owner_of(context), snapshot)
        held = self._held.pop(task.id, None)
        if held is not None:
            held[1].cancel()
        if context.state.get(ANSWERED_AT_END) and task.status.state in PASSING:
            timer = asyncio.get_running_loop().call_later(HOLD_SECONDS, self._release, task.id)
            self._held[task.id] = (write, timer)
            return
        await self._write(write)

    async def flush(self, task_id: str) -> None:
        """Write the held state of ``task_id`` now, if any, and wait for its writes under way."""
        held = self._held.pop(task_id, None)
        if held is not None:
            held[1].cancel()
            await self._write(held[0])
        elif task_id in self._last:
            await asyncio.wait([self._last[task_id]])

    async def aclose(self) -> None:
        """Write every held state (at shutdown)."""
        for task_id in list(self._held):
            await self.flush(task_id)

    def _release(self, task_id: str) -> None:
        """The hold of ``task_id`` is over: write its state in the background."""
        held = self._held.pop(task_id, None)
        if held is not None:
            self._chain(held[0])

    async def _write(self, write: _Write) -> None:
        await asyncio.shield(self._chain(write))

    def _chain(self, write: _Write) -> asyncio.Future[None]:
        """Schedule ``write`` after the writes of its task under way."""
        previous = self._last.get(write.task.id)
        current = asyncio.ensure_future(_write_after(previous, write))
        self._last[write.task.id] = current
        current.add_done_callback(lambda done: self._forget(write.task.id, done))
        return current

    def _forget(self, task_id: str, done: asyncio.Future[None]) -> None:
        if self._last.get(task_id) is done:
            del self._last[task_id]
        if not done.cancelled() and done.exception() is not None and task_id not in self._held:
            logger.error("task %s: a held state could not be written", task_id, exc_info=done.exception())

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        if id_problem(task_id):
            # No task has such an id, and asking Postgres would fail (NUL): the caller gets -32001.
            return None
        if context.state.get(NEW_TASK) == task_id:
            # The SDK looks a new task up before its first save, three times: none can be stored yet.
            return None
        if task_id in self._held or task_id in self._last:
            await self.flush(task_id)
        row = await _tasks(context).filter(task_id=task_id).afirst()
        return stored_task(row) if row else None

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        rows = _tasks(context)
        if params.context_id:
            if id_problem(params.context_id):
                return ListTasksResponse(page_size=0)  # no context has such an id
            rows = rows.filter(context_id=params.context_id)
        if params.status:
            rows = rows.filter(state=TaskState.Name(params.status))
        if params.HasField("status_timestamp_after"):
            rows = rows.filter(status_timestamp__gte=params.status_timestamp_after.ToDatetime(tzinfo=UTC))
        total = await rows.acount()
        size = min(params.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        start = _page_start(params.page_token)
        page = [stored_task(r) async for r in rows[start : start + size]]
        next_token = encode_page_token(str(start + size)) if start + size < total else None
        return ListTasksResponse(tasks=page, next_page_token=next_token, total_size=total, page_size=size)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await _tasks(context).filter(task_id=task_id).adelete()


async def _write_after(previous: asyncio.Future[None] | None, write: _Write) -> None:
    if previous is not None:
        await asyncio.wait([previous])
    await sync_to_async(_task_write)(write.agent, write.owner, write.task.id, row_fields(write.task))


def _page_start(token: str) -> int:
    """Where the page ``token`` (one :meth:`DjangoTaskStore.list` issued) starts; 0 for none.

    Raises InvalidParamsError (-32602) for a token no listing issued: tokens
    come from strangers.
    """
    if not token:
        return 0
    try:
        start = int(decode_page_token(token))
    except ValueError as exc:
        raise InvalidParamsError(message="pageToken is not one this endpoint issued") from exc
    if not 0 <= start <= MAX_PAGE_START:
        raise InvalidParamsError(message="pageToken is not one this endpoint issued")
    return start


def _task_write(agent: Agent, owner: str, task_id: str, fields: dict[str, Any]) -> None:
    """Write ``fields`` of the task ``task_id`` in ``owner``'s partition at ``agent``, creating it if new.

    The SDK saves a task at every event of a turn (five or more), and a save replaces the whole
    task and reads nothing: one statement, an INSERT that updates the partition's stored task
    instead (INSERT … ON CONFLICT DO UPDATE … WHERE it is the partition's). Raw SQL: Django
    compiled it for longer than Postgres ran it. Raises IntegrityError when another partition
    holds ``task_id`` (ids are unique over all).
    """
    now = timezone.now()
    values = {
        "created_at": now,
        "updated_at": now,
        "tenant_id": agent.tenant_id,
        "task_id": task_id,
        "agent_id": agent.pk,
        "owner": owner,
        **fields,
    }
    model = {field.attname: field for field in A2ATask._meta.concrete_fields}
    params = [model[name].get_db_prep_save(value, connection) for name, value in values.items()]
    quote = connection.ops.quote_name
    table = quote(A2ATask._meta.db_table)
    columns = ", ".join(quote(model[name].column) for name in values)
    replaced = [quote(model[name].column) for name in ("updated_at", *fields)]
    with connection.cursor() as cursor:
        cursor.execute(
            # The names are the model's own.
            f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(params))}) "
            "ON CONFLICT (task_id) DO UPDATE "
            f"SET {', '.join(f'{column} = excluded.{column}' for column in replaced)} "
            f"WHERE {table}.tenant_id = excluded.tenant_id AND {table}.owner = excluded.owner "
            "RETURNING task_id",
            params,
        )
        if cursor.fetchone() is None:
            raise IntegrityError(f"task {task_id} is stored in another partition")


def _tasks(context: ServerCallContext) -> QuerySet[A2ATask]:
    """The Tasks of this call's partition, within the agent's tenant."""
    return A2ATask.objects.for_tenant(call_agent(context).tenant_id).filter(owner=owner_of(context))


# --- A visitor's conversation -----------------------------------------------------------------------


def visitor_history(*, agent: Agent, caller: str, context_id: str, task_id: str) -> list[Exchange]:
    """The caller's earlier exchanges with ``agent``'s representative in ``context_id``, oldest first
    (what :func:`representative.answers.visitor_turn` is given).

    Read from the caller's own stored Tasks (the partition ``caller``), except
    ``task_id``; a task with a data part anywhere (a negotiation) is skipped.
    At most :data:`~representative.answers.HISTORY_EXCHANGES`. Only what the caller can already read
    back (GetTask in its own partition) is used: nothing of another caller.
    """
    rows = (
        A2ATask.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, owner=caller, context_id=context_id)
        .exclude(task_id=task_id)
        .order_by("-created_at")[:HISTORY_EXCHANGES]
    )
    exchanges = []
    for row in reversed(list(rows)):
        history = row.data.get("history", [])
        if any("data" in part for m in history for part in m.get("parts", [])):
            continue
        asked = [_text_of(m) for m in history if m.get("role") == "ROLE_USER"]
        answered = [_text_of(m) for m in history if m.get("role") == "ROLE_AGENT"]
        if asked and answered and asked[0] and answered[-1]:
            exchanges.append(Exchange(question=asked[0], answer=answered[-1]))
    return exchanges


def _text_of(message: dict[str, Any]) -> str:
    return "\n".join(p["text"] for p in message.get("parts", []) if isinstance(p.get("text"), str))
