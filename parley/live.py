"""Live events: group names, payloads, and publishing after the transaction commits.

Every service that changes what a dashboard shows or a webhook reports
publishes through :func:`publish_on_commit`, which also stores the event (all
but :data:`UNSTORED_EVENTS`) as a :class:`parley.models.Event` row; consumers
only forward. A dropped push loses nothing: every fragment can be
re-rendered from the database, and the stored event is there for the webhooks
and the run's timeline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from parley.models import Event, Membership
from parley.webhooks import fan_out

logger = logging.getLogger(__name__)

EVENTS = frozenset(
    {
        "question.opened",
        "question.answered",
        "run.updated",
        "run.finished",
        "run.retry",
        "run.fallback",
        "negotiation.turn",
        "negotiation.settled",
        "negotiation.waiting",
        "negotiation.answered",
        "intake.received",
        "exchange.completed",
        "exchange.failed",
    }
)
# The stored retries and fallbacks of a run's model calls that its page and the API show.
RUN_TIMELINE_EVENTS = frozenset({"run.retry", "run.fallback"})
# Sent once the change commits but not stored: run.updated comes with every step of every run and
# only tells open pages to re-render the run's row. Nothing reads a stored copy back: it is neither a
# webhook type nor in a run's timeline (a test holds that for every event named here).
UNSTORED_EVENTS = frozenset({"run.updated"})
# Pushed to open pages only, never stored: a page that missed them re-renders from the database.
TRANSIENT_EVENTS = frozenset({"run.delta", "run.withdrawn"})


def tenant_group(tenant_id: int) -> str:
    """Group of the tenant's members who see every party's work: owners, operators and viewers."""
    return f"tenant-{tenant_id}"


def party_group(tenant_id: int, user_id: int) -> str:
    """Group of one party (a principal member) of the tenant: their own agents' events only."""
    return f"tenant-{tenant_id}-party-{user_id}"


def groups_for(*, tenant_id: int, role: str, user_id: int) -> list[str]:
    """The groups a member's socket joins: the party's own group for a principal, else the tenant's."""
    if role == Membership.Role.PRINCIPAL:
        return [party_group(tenant_id, user_id)]
    return [tenant_group(tenant_id)]


def publish_on_commit(*, event: str, tenant_id: int, party_id: int | None, payload: dict[str, Any]) -> None:
    """Store ``event`` (unless it is one of :data:`UNSTORED_EVENTS`) with its deliveries to the
    tenant's webhook endpoints (:func:`parley.webhooks.fan_out.event_fan_out`), and once the
    transaction commits, send it to those who may see it: the tenant's group, and the party
    ``party_id`` is (the user the event is about for: the agent's principal, an intake request's
    owner; None for nobody else).

    Call it inside the transaction that makes the change, so the rows commit or
    roll back with it and the push never announces a change that did not
    happen. Outside a transaction both happen at once.

    A party sees only their own agents' work, so an event reaches a principal's
    socket only through their own group. Payloads carry ids and the facts a
    webhook consumer needs (actions, terms, outcomes), never secrets or text the
    counterparty wrote.

    ``payload`` must be JSON-serialisable. Raises ``ValueError`` for an event
    name not in :data:`EVENTS`, before anything is written.
    """
    if event not in EVENTS:
        raise ValueError(f"unknown live event {event!r}")
    if event not in UNSTORED_EVENTS:
        fan_out.event_fan_out(event=Event.objects.create(tenant_id=tenant_id, kind=event, payload=payload))
    message = {"type": "live.event", "event": event, "payload": payload}
    groups = _audience(tenant_id, party_id)
    transaction.on_commit(lambda: _send(groups, message))


def push_transient(*, event: str, tenant_id: int, party_id: int | None, payload: dict[str, Any]) -> None:
    """Send ``event`` now, without storing it (e.g. a model's text as it streams), to the same
    audience as :func:`publish_on_commit`.

    For what is worth showing live but is stored elsewhere once complete.
    Raises ``ValueError`` for an event name not in :data:`TRANSIENT_EVENTS`.
    """
    if event not in TRANSIENT_EVENTS:
        raise ValueError(f"unknown transient event {event!r}")
    _send(_audience(tenant_id, party_id), {"type": "live.event", "event": event, "payload": payload})


def push_to_group(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` (a channel layer message: a ``type`` and msgpack-serialisable values, bytes
    too) to the channel layer group ``group`` now, unstored, on this process's delivery thread as
    :func:`push_transient` sends: in order with this process's other sends, and never blocking a
    thread that runs an event loop. Best-effort: a lost message is logged, not raised."""
    _send([group], message)


def _audience(tenant_id: int, party_id: int | None) -> list[str]:
    groups = [tenant_group(tenant_id)]
    if party_id is not None:
        groups.append(party_group(tenant_id, party_id))
    return groups


# Seconds a publishing thread waits for its event to be sent to the channel layer (see _send).
SEND_WAIT = 0.5

# (groups, message, resolved once sent or None) queued on a delivery loop.
_Outgoing = tuple[list[str], dict[str, Any], "Future[None] | None"]

_server_loop: asyncio.AbstractEventLoop | None = None
_delivery: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop) of the delivery thread
_delivery_lock = threading.Lock()
_delivery_behind = threading.Event()  # a wait for a send ran out: don't wait again until caught up
_outboxes: dict[asyncio.AbstractEventLoop, asyncio.Queue[_Outgoing]] = {}


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Deliver events on ``loop``, the web server's event loop (embedded default only).

    The in-memory channel layer's queues belong to the loop the consumers run
    on; a worker thread must hand its sends to that loop rather than run them
    on a loop of its own, or the sockets are not woken.
    """
    global _server_loop
    _server_loop = loop


def _send(groups: list[str], message: dict[str, Any]) -> None:
    """Hand ``message`` to each of ``groups``: queued on a long-lived loop when there is one, else sent now.

    A network layer (Redis) is sent on this process's delivery thread: a loop
    that lives as long as the process keeps its connections, where
    ``async_to_sync`` would open a new loop and connection per event (15 to 50
    ms each, in the middle of a worker's step). One queue per loop sends in
    the order events were published, so streamed text arrives in order. The
    calling thread then waits (at most :data:`SEND_WAIT` seconds) until the
    message is sent: a worker thread that went on stepping would hold the GIL
    the delivery thread needs at each of its Redis round trips (5 ms switch
    interval each), and in a burst pile up a backlog behind which every frame
    waits. Once a wait runs out (Redis slow or gone) callers stop waiting until
    the delivery thread has caught up, so a lost Redis holds a step up once,
    not at every event; a thread that runs an event loop never waits. The
    in-memory layer (tests, the embedded default) must be sent on its
    consumers' loop: the server's when bound, else the caller's.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    if _server_loop is not None and _server_loop.is_running():
        _server_loop.call_soon_threadsafe(_enqueue, _server_loop, groups, message, None)
        return
    if isinstance(layer, InMemoryChannelLayer):
        for group in groups:
            try:
                async_to_sync(layer.group_send)(group, message)
            except Exception:  # a lost push never loses state; the page re-syncs from the database
                logger.warning("live event %s to %s was not delivered", _name(message), group, exc_info=True)
        return
    loop = _delivery_loop()
    waits = not _delivery_behind.is_set() and not _runs_a_loop()
    sent: Future[None] | None = Future() if waits else None
    loop.call_soon_threadsafe(_enqueue, loop, groups, message, sent)
    if sent is None:
        return
    try:
        sent.result(timeout=SEND_WAIT)
    except TimeoutError:
        _delivery_behind.set()


def _name(message: dict[str, Any]) -> str:
    """What ``message`` is, for a log line: a live event's name, else its type."""
    return str(message["event"] if message["type"] == "live.event" else message["type"])


def _runs_a_loop() -> bool:
    """Whether this thread runs an event loop (which must never block on a send)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _delivery_loop() -> asyncio.AbstractEventLoop:
    """This process's delivery loop, started on a daemon thread at first use (and again after a fork)."""
    global _delivery
    with _delivery_lock:
        if _delivery is None or _delivery[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="live-events", daemon=True).start()
            _delivery = (os.getpid(), loop)
        return _delivery[1]


def _enqueue(
    loop: asyncio.AbstractEventLoop, groups: list[str], message: dict[str, Any], sent: Future[None] | None
) -> None:
    """On ``loop``: queue the send, starting the loop's sender at the first one."""
    outbox = _outboxes.get(loop)
    if outbox is None:
        outbox = _outboxes[loop] = asyncio.Queue()
        loop.create_task(_deliver(outbox))
    outbox.put_nowait((groups, message, sent))


async def _deliver(outbox: asyncio.Queue[_Outgoing]) -> None:
    """Send what ``outbox`` holds, one message after another, for as long as its loop runs.

    A message's groups are sent at once (a principal's group need not wait
    behind the tenant's); the next message waits for all of them, so each
    group gets its events in order. ``sent`` is resolved once they are.
    """
    while True:
        groups, message, sent = await outbox.get()
        layer = get_channel_layer()  # read each time: tests swap layers
        if layer is not None:
            results = await asyncio.gather(
                *(layer.group_send(g, message) for g in groups), return_exceptions=True
            )
            for group, result in zip(groups, results, strict=True):
                if isinstance(result, Exception):  # a lost push never loses state; the page re-syncs
                    logger.warning(
                        "live event %s to %s was not delivered", _name(message), group, exc_info=result
                    )
        if sent is not None and not sent.done():
            sent.set_result(None)
        if outbox.empty():
            _delivery_behind.clear()
