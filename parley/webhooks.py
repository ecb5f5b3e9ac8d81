"""The host's webhooks: endpoints, signing, fan-out of events, delivery with retries, resending.

**What is sent.** Some live events (:mod:`parley.live`) are webhook events
too, under the type :data:`WEBHOOK_TYPES` gives them. Each is POSTed to every
active endpoint of the tenant subscribed to its type, as Standard Webhooks
(https://www.standardwebhooks.com, "Standard Webhooks" spec v1)::

    POST <endpoint url>
    content-type: application/json
    webhook-id: msg_3b0c…          (one per delivery: the same on every retry and resend)
    webhook-timestamp: 1767225600  (Unix seconds of this attempt)
    webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">

    {"data":{…the event's payload…},"timestamp":"2026-01-01T00:00:00.123456Z","type":"run.finished"}

The HMAC key is the base64-decoded part of the endpoint's secret after
``whsec_``. ``timestamp`` in the body is when the event happened (ISO 8601,
UTC); ``data`` is the live event's payload.

**Delivery.** :func:`event_fan_out` runs inside the transaction that makes
the change (from :func:`parley.live.publish_on_commit`): it writes one
:class:`~parley.models.WebhookDelivery` per subscribed endpoint and enqueues
each after the commit, so nothing is lost and nothing is announced that rolled
back. :func:`delivery_attempt` (the Celery task ``parley.tasks.webhook_deliver``)
POSTs once, within ``WEBHOOK_TIMEOUT`` seconds in all, following no redirect;
the status counts once it has arrived in time, even if the body has not (the
body is only kept as an excerpt). A 2xx answer is success. 410 Gone ends the
delivery ``failed`` at once and makes the endpoint inactive, saying why in its
``disabled_reason`` (Standard Webhooks: the receiver wants nothing more).
Anything else — another status, no answer, a URL the address policy refuses —
is retried after ``WEBHOOK_BACKOFF_BASE`` * 2^(n-1) seconds (n: attempts
since the window opened), or after the ``Retry-After`` of a 429 or 503
answer (seconds or an HTTP-date) when that is longer, the wait being at most
``WEBHOOK_BACKOFF_MAX`` either way. An attempt is made only while it falls
within ``WEBHOOK_RETRY_FOR`` seconds of the delivery's creation or last
resend: a wait that would end after that ends the delivery ``failed`` at once
(``last_error`` says so when ``Retry-After`` asked for that wait).
:func:`delivery_resend` opens the window again and sends at once. A task may
run twice and a delivery is still attempted once (see :func:`delivery_attempt`);
one whose message was lost with the broker is sent again by
:func:`deliveries_overdue_enqueue` (beat, every five minutes): at least once,
and a receiver tells a repeat by its ``webhook-id``.

**URLs** (:mod:`parley.netguard`): https only unless
``settings.WEBHOOKS_ALLOW_HTTP``, and a host that resolves to a private,
loopback, link-local or otherwise non-public address is refused unless
``settings.WEBHOOKS_ALLOW_PRIVATE`` (both False in production). Checked when
an endpoint is made or its URL changed, and again at every attempt, on the
address actually connected to.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import math
import secrets
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.http import parse_http_date_safe

from parley import netguard
from parley.celery import enqueue_each, enqueue_on_commit
from parley.models import Event, Tenant, WebhookDelivery, WebhookEndpoint, WebhookEventType

logger = logging.getLogger(__name__)

# Live event kind → webhook event type. Live events not listed here are not sent as webhooks.
WEBHOOK_TYPES: dict[str, str] = {
    "question.opened": WebhookEventType.RUN_NEEDS_INPUT,
    "run.finished": WebhookEventType.RUN_FINISHED,
    "question.answered": WebhookEventType.QUESTION_ANSWERED,
    "negotiation.turn": WebhookEventType.NEGOTIATION_TURN,
    "negotiation.settled": WebhookEventType.NEGOTIATION_SETTLED,
    "intake.received": WebhookEventType.INTAKE_RECEIVED,
    "exchange.completed": WebhookEventType.EXCHANGE_COMPLETED,
    "exchange.failed": WebhookEventType.EXCHANGE_FAILED,
}

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
# Bytes of a response's body kept on the delivery; the rest is not read.
RESPONSE_EXCERPT_BYTES = 2048
# Attempts kept in a delivery's attempt_log (the latest).
ATTEMPT_LOG_MAX = 50
# An attempt's claim outlives its time limit by this much: a second copy of the task waits it out.
CLAIM_MARGIN = timedelta(seconds=30)
# A pending delivery whose attempt is this late was lost on the way (a broker restart): send it again.
OVERDUE_AFTER = timedelta(minutes=5)
# Overdue deliveries sent again per sweep.
OVERDUE_BATCH = 1000
USER_AGENT = "Parley-Webhooks/1.0"

_ERROR_CHARS = 500


class ResendRefused(Exception):
    """The delivery cannot be resent now; the message says why (an attempt is under way, the
    endpoint is inactive)."""


# Secrets and signatures.


def new_secret() -> str:
    """A fresh endpoint secret: ``whsec_`` + base64 of :data:`SECRET_BYTES` random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def sign(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>`` of ``"{msg_id}.{timestamp}.{body}"``
    keyed with the base64-decoded ``secret`` (its ``whsec_`` prefix removed)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def body_of(delivery: WebhookDelivery) -> bytes:
    """The bytes POSTed for ``delivery``: its payload as compact JSON with sorted keys, so every
    attempt sends the same bytes (jsonb does not keep key order)."""
    return json.dumps(delivery.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# Endpoints.


def webhook_endpoint_create(
    *, tenant: Tenant, url: str, events: Iterable[str], description: str = "", active: bool = True
) -> WebhookEndpoint:
    """Make an endpoint of ``tenant`` receiving ``events`` at ``url``, with a new secret (its
    ``secret`` attribute: show it to the host once).

    Raises ``ValidationError`` naming the field: ``url`` (not a URL, not https,
    refused by the address policy), ``events`` (empty, unknown or repeated
    types), ``description`` (too long).
    """
    endpoint = WebhookEndpoint(
        tenant=tenant,
        url=url,
        events=list(events),
        description=description,
        active=active,
        secret=new_secret(),
    )
    endpoint.full_clean()
    _check_url(url)
    endpoint.save()
    return endpoint


def webhook_endpoint_update(
    *,
    endpoint: WebhookEndpoint,
    url: str | None = None,
    events: Iterable[str] | None = None,
    description: str | None = None,
    active: bool | None = None,
) -> WebhookEndpoint:
    """Change what is given (None: leave it) of ``endpoint``; returns the endpoint as saved.

    A new URL is checked as in :func:`webhook_endpoint_create`. Pending
    deliveries go to the URL and with the secret the endpoint has at each
    attempt; an endpoint made inactive gets none (they fail at their next
    attempt). Giving ``active`` clears ``disabled_reason``: the host has
    decided. Raises ``ValidationError`` naming the field.
    """
    if url is not None:
        _check_url(url)  # before the lock: it resolves the host
    with transaction.atomic():
        locked = (
            WebhookEndpoint.objects.for_tenant(endpoint.tenant_id).select_for_update().get(pk=endpoint.pk)
        )
        changes: dict[str, Any] = {"url": url, "description": description, "active": active}
        changes["events"] = None if events is None else list(events)
        if active is not None:
            changes["disabled_reason"] = ""
        fields = [name for name, value in changes.items() if value is not None]
        for name in fields:
            setattr(locked, name, changes[name])
        locked.full_clean()
        locked.save(update_fields=[*fields, "updated_at"])
    return locked


def webhook_endpoint_rotate_secret(*, endpoint: WebhookEndpoint) -> WebhookEndpoint:
    """Give ``endpoint`` a new secret (show it once); the old one signs nothing from now on,
    attempts already under way aside."""
    with transaction.atomic():
        locked = (
            WebhookEndpoint.objects.for_tenant(endpoint.tenant_id).select_for_update().get(pk=endpoint.pk)
        )
        locked.secret = new_secret()
        locked.save(update_fields=["secret", "updated_at"])
    return locked


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    """Delete ``endpoint`` and its deliveries; an attempt under way is not recorded."""
    WebhookEndpoint.objects.for_tenant(endpoint.tenant_id).filter(pk=endpoint.pk).delete()


def _check_url(url: str) -> None:
    """``ValidationError({"url": …})`` unless webhooks may go to ``url`` now (see the module docstring)."""
    try:
        WebhookEndpoint._meta.get_field("url").clean(url, None)
    except ValidationError as exc:
        raise ValidationError({"url": exc.messages}) from None
    if problem := _url_problem(url):
        raise ValidationError({"url": f"Webhooks are not sent to this URL: {problem}."})


def _url_problem(url: str) -> str:
    """Why webhooks may not go to ``url`` now, or "" when they may (it resolves the host)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme != "https" and not (scheme == "http" and settings.WEBHOOKS_ALLOW_HTTP):
        return "it must use https"
    try:
        netguard.vetted_addresses_sync(url, allow_private=settings.WEBHOOKS_ALLOW_PRIVATE)
    except netguard.URLRefused as exc:
        return str(exc)
    return ""


# Fan-out.


def event_fan_out(*, event: Event) -> list[WebhookDelivery]:
    """Write a delivery of ``event`` for each active endpoint of its tenant subscribed to its type,
    and send each once the transaction commits; returns them.

    Call it in the transaction that stored ``event`` (as
    :func:`parley.live.publish_on_commit` does): the deliveries commit or roll
    back with the change. One query when the tenant has no endpoint, none for
    an event that is not a webhook type.
    """
    event_type = WEBHOOK_TYPES.get(event.kind)
    if event_type is None:
        return []
    # In Python rather than SQL: JSON containment is Postgres-only, and a tenant has few endpoints.
    endpoints = WebhookEndpoint.objects.for_tenant(event.tenant_id).filter(active=True).only("pk", "events")
    subscribed = [endpoint for endpoint in endpoints if event_type in endpoint.events]
    if not subscribed:
        return []
    now = timezone.now()
    payload = {"type": event_type, "timestamp": _iso(event.created_at), "data": event.payload}
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            tenant_id=event.tenant_id,
            endpoint=endpoint,
            event=event,
            event_type=event_type,
            payload=payload,
            window_opened_at=now,
            next_attempt_at=now,
        )
        for endpoint in subscribed
    )
    for delivery in deliveries:
        _enqueue_on_commit(delivery, countdown=0.0)
    return deliveries


def _enqueue_on_commit(delivery: WebhookDelivery, *, countdown: float) -> None:
    """Send ``delivery``'s next attempt ``countdown`` seconds after the transaction commits.

    A broker that refuses the message is logged, never raised to the caller
    whose change committed (:func:`parley.celery.enqueue_on_commit`): the
    overdue sweep sends the delivery later.
    """
    from parley.tasks import webhook_deliver

    enqueue_on_commit(
        webhook_deliver, str(delivery.pk), delivery.tenant_id, delivery.generation, countdown=countdown
    )


# Attempts.


@dataclass(frozen=True)
class _Claim:
    """An attempt this process has claimed: what to send, and where."""

    delivery_id: str
    tenant_id: int
    generation: int
    number: int
    started: datetime
    url: str
    secret: str
    webhook_id: str
    body: bytes


@dataclass(frozen=True)
class _Outcome:
    """What came of one attempt: the status answered (None for none), an error, the body's start,
    and the seconds a 429 or 503 answer asked to wait (its ``Retry-After``; None: it did not)."""

    status_code: int | None
    error: str
    excerpt: str
    retry_after: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def gone(self) -> bool:
        """Standard Webhooks: 410 Gone asks the sender to disable the endpoint."""
        return self.status_code == HTTPStatus.GONE


def delivery_attempt(*, delivery_id: str, tenant_id: int, generation: int) -> None:
    """Make the attempt of delivery ``delivery_id`` of ``tenant_id`` scheduled as ``generation``.

    Does nothing when the delivery is gone, no longer pending, was scheduled
    again since (a newer generation), or has an attempt under way (another
    copy of the task): a task may run twice, the delivery is sent once. A
    delivery whose endpoint is inactive fails without being sent. Otherwise it
    POSTs (see the module docstring), records the outcome, and schedules the
    next attempt or ends the delivery.
    """
    claim = _claim(delivery_id, tenant_id, generation)
    if claim is None:
        return
    outcome = _send(claim)
    _record(claim, outcome)


def _claim(delivery_id: str, tenant_id: int, generation: int) -> _Claim | None:
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.for_tenant(tenant_id)
            .select_for_update(of=("self",))
            .select_related("endpoint")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None or delivery.status != WebhookDelivery.Status.PENDING:
            return None
        if delivery.generation != generation:
            return None
        if delivery.claimed_until is not None and delivery.claimed_until > now:
            return None
        endpoint = delivery.endpoint
        if not endpoint.active:
            delivery.status = WebhookDelivery.Status.FAILED
            delivery.last_error = "The endpoint is inactive; nothing was sent."
            delivery.next_attempt_at = None
            delivery.save(update_fields=["status", "last_error", "next_attempt_at", "updated_at"])
            return None
        delivery.attempts += 1
        delivery.window_attempts += 1
        delivery.last_attempt_at = now
        delivery.claimed_until = now + timedelta(seconds=settings.WEBHOOK_TIMEOUT) + CLAIM_MARGIN
        delivery.save(
            update_fields=["attempts", "window_attempts", "last_attempt_at", "claimed_until", "updated_at"]
        )
    return _Claim(
        delivery_id=str(delivery.pk),
        tenant_id=tenant_id,
        generation=generation,
        number=delivery.attempts,
        started=now,
        url=endpoint.url,
        secret=endpoint.secret,
        webhook_id=delivery.webhook_id,
        body=body_of(delivery),
    )


def _send(claim: _Claim) -> _Outcome:
    """POST the claimed delivery, within ``WEBHOOK_TIMEOUT`` seconds in all (address check included).

    httpx's timeouts bound each network wait, not the whole exchange, so the
    exchange runs in a daemon thread and we stop waiting at the deadline; the
    abandoned thread ends soon after, its every wait bounded too. A status that
    arrived by the deadline is the outcome even if the body has not: the
    receiver has answered, and the body is only kept as an excerpt.
    """
    timeout = float(settings.WEBHOOK_TIMEOUT)
    scheme = urllib.parse.urlsplit(claim.url).scheme
    if scheme != "https" and not (scheme == "http" and settings.WEBHOOKS_ALLOW_HTTP):
        return _Outcome(None, "Refused, nothing sent: the URL must use https.", "")
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        # A compressed answer could inflate far past the excerpt's size before it is cut.
        "accept-encoding": "identity",
        "webhook-id": claim.webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(
            secret=claim.secret, msg_id=claim.webhook_id, timestamp=timestamp, body=claim.body
        ),
    }
    deadline = time.monotonic() + timeout
    answer: Future[_Outcome] = Future()
    head: Future[_Outcome] = Future()
    threading.Thread(
        target=_exchange,
        args=(answer, head, claim.url, claim.body, headers, timeout, deadline),
        name="webhook-delivery",
        daemon=True,
    ).start()
    try:
        return answer.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        if head.done():  # the status came in time, the body did not: the status decides
            return head.result()
        return _Outcome(None, f"Timed out after {timeout:g} s.", "")
    except Exception as exc:  # recorded and retried like any failure: a delivery never stays claimed
        logger.exception(
            "webhook delivery %s attempt %d failed unexpectedly", claim.delivery_id, claim.number
        )
        return _Outcome(None, f"{type(exc).__name__}: {exc}", "")


def _exchange(
    answer: Future[_Outcome],
    head: Future[_Outcome],
    url: str,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    deadline: float,
) -> None:
    """The HTTP exchange, in its own thread; its outcome goes to ``answer``, and the status to
    ``head`` as soon as it arrives."""
    try:
        answer.set_result(_post(url, body, headers, timeout, deadline, head))
    except Exception as exc:  # even a bug must reach the waiting attempt rather than look like a timeout
        answer.set_exception(exc)


def _post(
    url: str, body: bytes, headers: dict[str, str], timeout: float, deadline: float, head: Future[_Outcome]
) -> _Outcome:
    transport = netguard.PinnedTransport(allow_private=lambda: bool(settings.WEBHOOKS_ALLOW_PRIVATE))
    try:
        with (
            httpx.Client(transport=transport, timeout=timeout, follow_redirects=False) as http,
            http.stream("POST", url, content=body, headers=headers) as response,
        ):
            status = response.status_code
            answered = _Outcome(status, _status_error(status), "", _retry_after(status, response.headers))
            head.set_result(answered)
            return replace(answered, excerpt=_excerpt(response, deadline))
    except netguard.AddressRefused as exc:
        return _Outcome(None, f"Refused, nothing sent: {exc}.", "")
    except httpx.TimeoutException:
        return _Outcome(None, f"Timed out after {timeout:g} s.", "")
    except httpx.HTTPError as exc:
        return _Outcome(None, f"{type(exc).__name__}: {exc}", "")


def _excerpt(response: httpx.Response, deadline: float) -> str:
    """The start of ``response``'s body, as much of its first :data:`RESPONSE_EXCERPT_BYTES` as
    arrives by ``deadline`` or before the connection fails: the status has arrived and decides."""
    received = bytearray()
    try:
        for chunk in response.iter_raw():
            received += chunk
            if len(received) >= RESPONSE_EXCERPT_BYTES or time.monotonic() > deadline:
                break
    except httpx.HTTPError:
        pass
    return _storable(bytes(received[:RESPONSE_EXCERPT_BYTES]).decode("utf-8", errors="replace"))


def _retry_after(status: int, headers: httpx.Headers) -> float | None:
    """The seconds a 429 or 503 answer asks the next attempt to wait (``Retry-After``: delta-seconds
    or an HTTP-date, a past date being 0), or None: another status, no header, or one that does not
    parse."""
    if status not in (HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.SERVICE_UNAVAILABLE):
        return None
    value = headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():
        return float(value) if len(value) <= 15 else math.inf  # capped when the wait is chosen
    when = parse_http_date_safe(value)
    return None if when is None else max(0.0, when - time.time())


def _record(claim: _Claim, outcome: _Outcome) -> None:
    """Record the attempt's outcome; end the delivery, or schedule its next attempt."""
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.for_tenant(claim.tenant_id)
            .select_for_update()
            .filter(pk=claim.delivery_id)
            .first()
        )
        if delivery is None:  # its endpoint was deleted meanwhile
            return
        delivery.last_status_code = outcome.status_code
        delivery.last_error = _short(outcome.error)
        delivery.last_response = outcome.excerpt
        if outcome.gone and _endpoint_disable_gone(claim, delivery.endpoint_id, now):
            delivery.last_error = _short(
                f"{outcome.error} The receiver wants no more webhooks: the endpoint is now inactive."
            )
        retry_in = None
        # An attempt that outlived its claim is only recorded: the newer one decides what follows.
        if delivery.status == WebhookDelivery.Status.PENDING and delivery.generation == claim.generation:
            retry_in = _conclude(delivery, outcome, now)
            delivery.claimed_until = None
        entry: dict[str, Any] = {
            "attempt": claim.number,
            "at": _iso(claim.started),
            "status_code": outcome.status_code,
            "error": delivery.last_error,
            "retry_in": retry_in,
        }
        delivery.attempt_log = [*delivery.attempt_log, entry][-ATTEMPT_LOG_MAX:]
        delivery.save()
    logger.info(
        "webhook delivery %s attempt %d: %s",
        claim.delivery_id,
        claim.number,
        outcome.status_code if outcome.succeeded else outcome.error,
    )


def _endpoint_disable_gone(claim: _Claim, endpoint_id: uuid.UUID, now: datetime) -> bool:
    """Make the endpoint of a delivery answered 410 Gone inactive, saying why in its
    ``disabled_reason``, unless it has been made inactive or given another URL since the attempt
    started; returns whether it was."""
    reason = (
        f"Answered 410 Gone at {_iso(now)} (webhook-id {claim.webhook_id}): the receiver wants no "
        "more webhooks. Make the endpoint active again to resume."
    )
    disabled = (
        WebhookEndpoint.objects.for_tenant(claim.tenant_id)
        .filter(pk=endpoint_id, active=True, url=claim.url)
        .update(active=False, disabled_reason=reason, updated_at=now)
    )
    return disabled > 0


def _conclude(delivery: WebhookDelivery, outcome: _Outcome, now: datetime) -> float | None:
    """End ``delivery`` (succeeded; failed on 410 Gone or once the window is past) or schedule its
    next attempt, after the commit; returns the wait before that attempt, in seconds (None: there
    is none).

    The wait is the backoff, or the answer's ``Retry-After`` when longer, both at
    most ``WEBHOOK_BACKOFF_MAX``. An attempt the wait would put after the window
    closes is not made: the delivery fails now, and ``last_error`` says so when
    it was ``Retry-After`` that asked for that wait.
    """
    if outcome.succeeded:
        delivery.status = WebhookDelivery.Status.SUCCEEDED
        delivery.delivered_at = now
        delivery.next_attempt_at = None
        return None
    if outcome.gone:  # the receiver wants nothing more: no retry
        delivery.status = WebhookDelivery.Status.FAILED
        delivery.next_attempt_at = None
        return None
    backoff = min(
        settings.WEBHOOK_BACKOFF_BASE * 2 ** (delivery.window_attempts - 1), settings.WEBHOOK_BACKOFF_MAX
    )
    wait = backoff
    if outcome.retry_after is not None:
        wait = max(backoff, min(outcome.retry_after, settings.WEBHOOK_BACKOFF_MAX))
    next_at = now + timedelta(seconds=wait)
    if next_at > delivery.window_opened_at + timedelta(seconds=settings.WEBHOOK_RETRY_FOR):
        delivery.status = WebhookDelivery.Status.FAILED
        delivery.next_attempt_at = None
        if wait > backoff:
            delivery.last_error = _short(
                f"{delivery.last_error} The receiver asked (Retry-After) for a wait that ends after "
                "the retry window: no attempt follows."
            )
        return None
    delivery.generation += 1
    delivery.next_attempt_at = next_at
    _enqueue_on_commit(delivery, countdown=wait)
    return float(wait)


def delivery_resend(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send ``delivery`` again now, whatever its status: it is pending again, with the same
    ``webhook-id`` and body, and a new retry window from now. Returns it as saved.

    Raises :class:`ResendRefused` while an attempt is under way (resend once it
    has finished) or when its endpoint is inactive.
    """
    now = timezone.now()
    with transaction.atomic():
        locked = (
            WebhookDelivery.objects.for_tenant(delivery.tenant_id)
            .select_for_update(of=("self",))
            .select_related("endpoint")
            .get(pk=delivery.pk)
        )
        if locked.claimed_until is not None and locked.claimed_until > now:
            raise ResendRefused("An attempt of this delivery is under way; resend it once that has finished.")
        if not locked.endpoint.active:
            raise ResendRefused("The endpoint of this delivery is inactive; activate it first.")
        locked.status = WebhookDelivery.Status.PENDING
        locked.window_opened_at = now
        locked.window_attempts = 0
        locked.generation += 1
        locked.next_attempt_at = now
        locked.delivered_at = None
        locked.save()
        _enqueue_on_commit(locked, countdown=0.0)
    return locked


def deliveries_overdue_enqueue() -> int:
    """Send again the pending deliveries whose attempt is more than :data:`OVERDUE_AFTER` late and
    not under way (its message was lost, or its worker died); returns how many were sent, at most
    :data:`OVERDUE_BATCH`. A broker still down refuses the first and the rest wait for the next
    sweep (:func:`parley.celery.enqueue_each`).

    Across tenants, as the periodic sweep it is: each is sent as its own
    tenant's. A delivery sent twice this way is attempted once.
    """
    from parley.tasks import webhook_deliver

    now = timezone.now()
    overdue = (
        WebhookDelivery.across_tenants.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lt=now - OVERDUE_AFTER
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("next_attempt_at")
        .values_list("pk", "tenant_id", "generation")[:OVERDUE_BATCH]
    )
    return len(enqueue_each(webhook_deliver, [(str(pk), tenant_id, gen) for pk, tenant_id, gen in overdue]))


def _status_error(status: int) -> str:
    """The error an answer of ``status`` is ("" for 2xx)."""
    if 200 <= status < 300:
        return ""
    if 300 <= status < 400:
        return f"HTTP {status}: redirects are not followed."
    return f"HTTP {status}."


def _iso(moment: datetime) -> str:
    """``moment`` as ISO 8601 in UTC with a ``Z``: ``2026-01-01T00:00:00.123456Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _storable(text: str) -> str:
    """``text`` without NUL characters, which a Postgres text column refuses."""
    return text.replace("\x00", "")


def _short(text: str) -> str:
    return _storable(text)[:_ERROR_CHARS]
