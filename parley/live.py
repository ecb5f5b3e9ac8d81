"""Live events: group names, payloads, and publishing after the transaction commits.

Every service that changes what a dashboard shows or a webhook reports
publishes through :func:`publish_on_commit`, which also stores the event as a
:class:`parley.models.Event` row; consumers only forward. A dropped push loses
nothing: every fragment can be re-rendered from the database, and the stored
event is there for the webhooks.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from parley.models import Event

logger = logging.getLogger(__name__)

EVENTS = frozenset(
    {
        "question.opened",
        "question.answered",
        "run.updated",
        "run.retry",
        "run.fallback",
        "negotiation.turn",
        "negotiation.settled",
        "intake.received",
    }
)
# Pushed to open pages only, never stored: a page that missed them re-renders from the database.
TRANSIENT_EVENTS = frozenset({"run.delta"})


def tenant_group(tenant_id: int) -> str:
    """Group every member of a tenant's dashboard joins."""
    return f"tenant-{tenant_id}"


def publish_on_commit(*, event: str, tenant_id: int, payload: dict[str, Any]) -> None:
    """Store ``event`` for the tenant's webhooks and send it to the tenant's group once the
    transaction commits.

    Call it inside the transaction that makes the change, so the row commits or
    rolls back with it and the push never announces a change that did not
    happen. Outside a transaction both happen at once.

    Every member's socket is in its tenants' groups and every member of the
    tenant may see what a payload holds, so payloads carry ids and the facts a
    webhook consumer needs (actions, terms, outcomes), never secrets or text the
    counterparty wrote.

    ``payload`` must be JSON-serialisable. Raises ``ValueError`` for an event
    name not in :data:`EVENTS`, before anything is written.
    """
    if event not in EVENTS:
        raise ValueError(f"unknown live event {event!r}")
    Event.objects.create(tenant_id=tenant_id, kind=event, payload=payload)
    group = tenant_group(tenant_id)
    message = {"type": "live.event", "event": event, "payload": payload}
    transaction.on_commit(lambda: _send(group, message))


def push_transient(*, event: str, tenant_id: int, payload: dict[str, Any]) -> None:
    """Send ``event`` to the tenant's group now, without storing it (e.g. a model's text as it streams).

    For what is worth showing live but is stored elsewhere once complete.
    Raises ``ValueError`` for an event name not in :data:`TRANSIENT_EVENTS`.
    """
    if event not in TRANSIENT_EVENTS:
        raise ValueError(f"unknown transient event {event!r}")
    _send(tenant_group(tenant_id), {"type": "live.event", "event": event, "payload": payload})


_server_loop: asyncio.AbstractEventLoop | None = None


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Deliver events on ``loop``, the web server's event loop (embedded default only).

    The in-memory channel layer's queues belong to the loop the consumers run
    on; a worker thread must hand its sends to that loop rather than run them
    on a loop of its own, or the sockets are not woken.
    """
    global _server_loop
    _server_loop = loop


def _send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if _server_loop is not None and _server_loop.is_running():
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), _server_loop)
        else:
            async_to_sync(layer.group_send)(group, message)
    except Exception:  # a lost push never loses state; the page re-syncs from the database
        logger.warning("live event %s to %s was not delivered", message["event"], group, exc_info=True)
