"""Agent Exchange on the requester's side, as data: queue a request for sending, record how it went.

:func:`exchange_send_start` validates a request and stores it (complete, tokens included) on an
:class:`exchange.models.OutboundExchange` row, and the Celery task :func:`exchange.tasks.exchange_send`
runs :func:`exchange_send` after the commit, which sends it with :func:`exchange.client.send` and
writes the outcome — the receipt, or why it failed — clearing the request in the same transaction:
once sent (or given up) the request lives only with the recipient, and the reference stays here.

A send is not retried: the recipient takes each ``exchangeId`` once (a second preparation is a
replay), so a failed exchange is final and the host sends a new one under a new ``exchangeId``. A
send whose message the broker lost was never made: :func:`stalled_sends_resend` sends it again.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.configuration import is_unique_violation
from agents.models import Agent
from exchange import client, wire
from exchange.models import OutboundExchange
from negotiations.client import canonical_url
from parley import outbound
from parley.celery import SWEEP_BATCH, enqueue_on_commit, stalled_resend
from parley.live import publish_on_commit
from parley.locks import alone

logger = logging.getLogger(__name__)

URL_LENGTH: int = OutboundExchange._meta.get_field("url").max_length or 500
INTERNAL_ERROR = "An internal error stopped this exchange; the request was not kept."


def exchange_send_start(
    *, agent: Agent, url: str, request: Any, prepared_by_host: bool = False
) -> OutboundExchange:
    """Queue ``request`` (an Agent Exchange request, docs/agent-exchange.md) from ``agent`` to the
    agent at ``url`` and return the QUEUED row; the send runs in a worker after the commit.

    ``prepared_by_host``: the host delivered the request to the recipient through a channel of its
    own, so no preparation endpoint is called; the request is still needed, for its reference.

    Raises ``django.core.exceptions.ValidationError`` keyed by field, nothing written: ``url`` when
    it is no http(s) URL of at most 500 characters, or one Parley does not call
    (:data:`parley.outbound.url_validator`: its host is or resolves to a private address);
    ``request`` when it is no valid request (:func:`exchange.wire.reference_of`'s message,
    ``request.<member>: …``), names another recipient than ``url`` (its complete request would go
    to an agent it is not for), or its ``exchangeId`` was already sent by ``agent``.
    """
    problems: dict[str, list[str]] = {}
    try:
        outbound.url_validator(url)
        if len(url) > URL_LENGTH:
            raise ValidationError(f"Give a URL of at most {URL_LENGTH} characters.")
    except ValidationError as exc:
        problems["url"] = exc.messages
    try:
        reference = wire.reference_of(request)
        if "url" not in problems and canonical_url(request["recipient"]) != canonical_url(url):
            raise wire.WireError(
                f"request.recipient: names {request['recipient']!r}, but the exchange goes to {url!r}; "
                "a request goes only to the agent it names"
            )
    except wire.WireError as exc:
        problems["request"] = [str(exc)]
    if problems:
        raise ValidationError(problems)
    try:
        with transaction.atomic():
            exchange = OutboundExchange.objects.create(
                tenant_id=agent.tenant_id,
                agent=agent,
                url=url,
                exchange_id=request["exchangeId"],
                reference=reference,
                request=request,
                prepared_by_host=prepared_by_host,
            )
            _send_after_commit(exchange.pk, agent.tenant_id)
    except IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        raise ValidationError(
            {
                "request": [
                    f"request.exchangeId: this agent already sent an exchange {request['exchangeId']!r}; "
                    "give each request its own exchangeId."
                ]
            }
        ) from None
    return exchange


def _send_after_commit(exchange_id: int, tenant_id: int) -> None:
    from exchange.tasks import exchange_send as exchange_send_task  # the task module imports this one

    enqueue_on_commit(exchange_send_task, exchange_id, tenant_id)


def stalled_sends(*, before: datetime) -> list[tuple[int, int]]:
    """``(exchange pk, tenant id)`` of each exchange ``queued`` and untouched since ``before``, across
    tenants, at most :data:`parley.celery.SWEEP_BATCH`, oldest first: its send never ran (its
    message was lost), as a send in flight ends within its task's time limit (330 s).

    The rows are locked (``FOR UPDATE SKIP LOCKED``): call it in a transaction.
    """
    rows = (
        OutboundExchange.across_tenants.filter(status=OutboundExchange.Status.QUEUED, updated_at__lt=before)
        .select_for_update(skip_locked=True)
        .order_by("updated_at")
        .values_list("pk", "tenant_id")[:SWEEP_BATCH]
    )
    return list(rows)


def stalled_sends_resend() -> list[tuple[int, int]]:
    """Send again the exchanges whose message was lost: the periodic sweep (Celery beat, every
    ``SWEEP_INTERVAL`` seconds) of :func:`stalled_sends` not moved for ``SWEEP_STALLED_AFTER``
    seconds, stamping each one's ``updated_at``. A send that finds its exchange no longer queued
    does nothing; a broker still down stops the sweep at its first refusal. Returns what it found.
    """
    from exchange.tasks import exchange_send as exchange_send_task

    return stalled_resend(
        find=lambda before: stalled_sends(before=before),
        task=exchange_send_task,
        model=OutboundExchange,
        what="agent exchanges' sends",
    )


def exchange_send(*, exchange_id: int, tenant_id: int) -> None:
    """Send the QUEUED exchange ``exchange_id`` of ``tenant_id`` (:func:`exchange.client.send`) and
    record the outcome in one transaction: COMPLETED with the receipt, or FAILED with the reason;
    ``finished_at`` set and ``request`` cleared either way, and ``exchange.completed`` or
    ``exchange.failed`` published.

    Quietly does nothing for an exchange that is gone or no longer QUEUED, or whose send is running
    (a task run twice: :func:`parley.locks.alone` holds the send, as the recipient takes one).
    """
    with alone(f"exchange-send:{exchange_id}") as mine:
        if mine:
            _send_queued(exchange_id=exchange_id, tenant_id=tenant_id)
        else:
            logger.warning("agent exchange %s is being sent already: this copy does nothing", exchange_id)


def _send_queued(*, exchange_id: int, tenant_id: int) -> None:
    exchange = (
        OutboundExchange.objects.for_tenant(tenant_id).select_related("agent").filter(pk=exchange_id).first()
    )
    if exchange is None or exchange.status != OutboundExchange.Status.QUEUED:
        return
    receipt: dict[str, Any] | None = None
    error = ""
    try:
        receipt = client.send(exchange)
    except client.ExchangeFailed as exc:
        # The recipient's words may echo a protected value back at us.
        error = wire.redacted(str(exc), exchange.request)
    except Exception:
        # Whatever broke, the row must end and its request (tokens, protected values) must go:
        # a QUEUED row would keep them for good. Not retried (see the module docstring).
        logger.exception("agent exchange %s failed unexpectedly", exchange_id)
        error = INTERNAL_ERROR
    _finish(exchange, receipt=receipt, error=error)


def _finish(exchange: OutboundExchange, *, receipt: dict[str, Any] | None, error: str) -> None:
    with transaction.atomic():
        row = (
            OutboundExchange.objects.for_tenant(exchange.tenant_id)
            .select_for_update()
            .filter(pk=exchange.pk, status=OutboundExchange.Status.QUEUED)
            .first()
        )
        if row is None:
            return
        done = receipt is not None
        row.status = OutboundExchange.Status.COMPLETED if done else OutboundExchange.Status.FAILED
        row.receipt = receipt
        row.error = error
        row.request = None
        row.finished_at = timezone.now()
        row.save(update_fields=["status", "receipt", "error", "request", "finished_at", "updated_at"])
        publish_on_commit(
            event="exchange.completed" if done else "exchange.failed",
            tenant_id=row.tenant_id,
            party_id=exchange.agent.principal_id,
            payload={
                "exchange": str(row.pk),
                "agent": str(row.agent_id),
                "exchange_id": row.exchange_id,
                "status": row.status,
                "reference": row.reference,
            },
        )
