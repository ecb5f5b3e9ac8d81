"""Delivery attempts: POST a delivery once, record what came of it, schedule the next or end it.

A delivery is written by :func:`parley.webhooks.fan_out.event_fan_out`.
:func:`delivery_attempt` (the Celery task ``parley.tasks.webhook_deliver``)
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
:func:`parley.webhooks.resend.delivery_resend` opens the window again and
sends at once. A task may run twice and a delivery is still attempted once
(see :func:`delivery_attempt`); one whose message was lost with the broker is
sent again by :func:`parley.webhooks.sweeps.deliveries_overdue_enqueue` (beat,
every five minutes): at least once, and a receiver tells a repeat by its
``webhook-id``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.http import parse_http_date_safe

from parley import netguard
from parley.celery import enqueue_on_commit
from parley.models import WebhookDelivery, WebhookEndpoint
from parley.webhooks import signing

logger = logging.getLogger(__name__)


# Bytes of a response's body kept on the delivery; the rest is not read.
RESPONSE_EXCERPT_BYTES = 2048
# Attempts kept in a delivery's attempt_log (the latest).
ATTEMPT_LOG_MAX = 50
# An attempt's claim outlives its time limit by this much: a second copy of the task waits it out.
CLAIM_MARGIN = timedelta(seconds=30)
USER_AGENT = "Parley-Webhooks/1.0"

_ERROR_CHARS = 500


def delivery_enqueue_on_commit(delivery: WebhookDelivery, *, countdown: float) -> None:
    """Send ``delivery``'s next attempt ``countdown`` seconds after the transaction commits.

    A broker that refuses the message is logged, never raised to the caller
    whose change committed (:func:`parley.celery.enqueue_on_commit`): the
    overdue sweep sends the delivery later.
    """
    from parley.tasks import webhook_deliver

    enqueue_on_commit(
        webhook_deliver, str(delivery.pk), delivery.tenant_id, delivery.generation, countdown=countdown
    )


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
        body=signing.body_of(delivery),
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
        "webhook-signature": signing.sign(
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
            "at": signing.iso(claim.started),
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
        f"Answered 410 Gone at {signing.iso(now)} (webhook-id {claim.webhook_id}): the receiver wants no "
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
    delivery_enqueue_on_commit(delivery, countdown=wait)
    return float(wait)


def _status_error(status: int) -> str:
    """The error an answer of ``status`` is ("" for 2xx)."""
    if 200 <= status < 300:
        return ""
    if 300 <= status < 400:
        return f"HTTP {status}: redirects are not followed."
    return f"HTTP {status}."


def _storable(text: str) -> str:
    """``text`` without NUL characters, which a Postgres text column refuses."""
    return text.replace("\x00", "")


def _short(text: str) -> str:
    return _storable(text)[:_ERROR_CHARS]
