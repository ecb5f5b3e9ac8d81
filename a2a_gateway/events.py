"""Task events across web processes: a2a-sdk's ``TaskEventStream`` on Channels' channel layer (Redis).

a2a-sdk streams a task's events (SubscribeToTask, 0.3 ``tasks/resubscribe``)
from the in-memory ActiveTask of the process running it, but a counterparty's
subscription may land on any web process behind the load balancer. With a
:class:`SharedTaskEvents` given to the request handler (``event_stream``),
the SDK's ActiveTask publishes every event it has applied to the stored task,
wherever it runs (:meth:`SharedTaskEvents.publish`), and a worker publishes
the Task it changed (:func:`publish_task`). Each goes to the task's channel
layer group (:func:`task_group`). A subscriber on any process
(:func:`follow`) joins that group first, then reads the task from the store
(Postgres, the truth) and gets the events that follow. Events of one process
arrive in the order it published them; one published before the subscriber
joined is in the stored task it reads. Redis is disposable: a subscription that
hears nothing for a while reads the store again, so a lost event delays the
task's end, never loses it.

A new task's id is first known to its caller from the answer, so the events of a
task whose call answers only at its end (a blocking SendMessage) are not published
(:meth:`SharedTaskEvents.mark_unseen`): the hot path makes no round trip for them.
The embedded default (one process, no Redis) uses none of this.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.agent_execution.active_task import INTERRUPTED_TASK_STATES, TERMINAL_TASK_STATES
from a2a.server.cluster import TaskEventStream, TaskVersion, VersionedEvent
from a2a.server.events import Event
from a2a.types import Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2a.utils.proto_utils import to_stream_response
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from a2a_gateway.models import A2ATask
from a2a_gateway.store import stored_task
from parley.live import push_to_group

# The channel layer message type of a task event; its ``response`` is the event as a serialized
# StreamResponse (A2A spec §3.2.3).
EVENT_TYPE = "a2a.task_event"
# Seconds a subscription waits for an event before it reads its task from the store again.
STORE_CHECK_SECONDS = 2.0
# States after which a task's stream ends: final, or waiting on its caller (A2A spec §3.1.6).
STREAM_ENDS = TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES


def task_group(task_id: str) -> str:
    """The channel layer group of ``task_id``'s subscribers: ``a2a-task.<64 hex digits>``, the
    SHA-256 of the id (a task id may hold any character and 200 of them; a group name may not)."""
    return f"a2a-task.{hashlib.sha256(task_id.encode()).hexdigest()}"


class SharedTaskEvents(TaskEventStream):
    """a2a-sdk's ``TaskEventStream`` over the channel layer: every process's task events, for
    subscribers on any process (see the module)."""

    def __init__(self) -> None:
        self._unseen: set[str] = set()

    def mark_unseen(self, task_id: str) -> None:
        """Publish nothing of ``task_id`` until :meth:`unmark`: a task new in a call that answers
        only at its end (and sends no pushes), whose id its caller learns from the answer. A
        subscriber that finds it sooner (ListTasks) gets its end from the store
        (:meth:`subscribe`)."""
        self._unseen.add(task_id)

    def unmark(self, task_id: str) -> None:
        """End :meth:`mark_unseen` (no-op for a task not marked)."""
        self._unseen.discard(task_id)

    def unseen(self, task_id: str) -> bool:
        """Whether ``task_id`` is marked unseen: its turn runs in this process, its events stay here."""
        return task_id in self._unseen

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Send ``event`` of ``task_id`` to its group, unless the task is unseen; never waits on
        Redis (:func:`parley.live.push_to_group`)."""
        if task_id not in self._unseen:
            _publish(task_id, event.event)

    async def subscribe(self, task_id: str, *, after: TaskVersion) -> AsyncGenerator[VersionedEvent, None]:
        """The stored task, read once this subscriber has joined the task's group, then every event
        published after that, as they come; ``after`` is ignored (the store keeps no versions: the
        stored task stands for all that came before).

        After :data:`STORE_CHECK_SECONDS` without an event the task is read again, and given
        whole if its state is not the last one given: the end of an unseen task's turn
        (:meth:`mark_unseen`), or of one whose events Redis lost, still comes. Leaves the
        group when closed. Yields nothing for a task that is not stored.
        """
        layer = get_channel_layer()
        if layer is None:
            raise LookupError("no channel layer is configured (CHANNEL_LAYERS)")
        group = task_group(task_id)
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        receiving: asyncio.Future[dict[str, Any]] | None = None
        try:
            task = await sync_to_async(_stored)(task_id)
            if task is None:
                return
            state = task.status.state
            yield VersionedEvent(event=task, version=TaskVersion.MISSING)
            while True:
                receiving = receiving or asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receiving}, timeout=STORE_CHECK_SECONDS)
                if not done:
                    task = await sync_to_async(_stored)(task_id)
                    if task is not None and task.status.state != state:
                        state = task.status.state
                        yield VersionedEvent(event=task, version=TaskVersion.MISSING)
                    continue
                message, receiving = receiving.result(), None
                if message.get("type") != EVENT_TYPE:
                    continue
                event = _event(message["response"])
                if isinstance(event, Task | TaskStatusUpdateEvent):
                    state = event.status.state
                yield VersionedEvent(event=event, version=TaskVersion.MISSING)
        finally:
            if receiving is not None:
                receiving.cancel()
            await layer.group_discard(group, channel)

    async def destroy(self, task_id: str) -> None:
        """Nothing to release: a group empties as its subscribers leave."""


async def follow(stream: TaskEventStream, task_id: str) -> AsyncGenerator[Event, None]:
    """A subscription to ``task_id`` through ``stream``: its events until the task is final, or waits
    on its caller, or a Message ends it (as a2a-sdk ends one to a task another process runs).

    The caller has checked that the task is the subscriber's own and not final.
    """
    subscription = stream.subscribe(task_id, after=TaskVersion.MISSING)
    try:
        async for versioned in subscription:
            event = versioned.event
            yield event
            if isinstance(event, Message) or (
                isinstance(event, Task | TaskStatusUpdateEvent) and event.status.state in STREAM_ENDS
            ):
                return
    finally:
        await subscription.aclose()


def publish_task(task: Task) -> None:
    """Send ``task`` as it now stands to its subscribers on every process, for a change made outside
    the SDK (a worker's). Call it once the change is committed. The embedded default has no
    subscriber to send it to (:func:`a2a_gateway.app.build_app`)."""
    if not settings.EMBEDDED:
        _publish(task.id, task)


def _publish(task_id: str, event: Event) -> None:
    response = to_stream_response(event).SerializeToString()
    push_to_group(task_group(task_id), {"type": EVENT_TYPE, "response": response})


def _event(serialized: bytes) -> Event:
    """The event a serialized StreamResponse carries."""
    response = StreamResponse.FromString(serialized)
    kind = response.WhichOneof("payload")
    event: Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent = getattr(response, kind)
    return event


def _stored(task_id: str) -> Task | None:
    """The stored task ``task_id`` in whatever partition holds it (its subscriber has been checked)."""
    row = A2ATask.across_tenants.filter(task_id=task_id).first()
    return stored_task(row) if row else None
