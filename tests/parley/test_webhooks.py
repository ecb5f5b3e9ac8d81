"""Webhooks: fan-out of live events to the tenant's endpoints, Standard Webhooks signatures checked by
the reference verifier (``standardwebhooks``), retries with backoff in a bounded window, resending,
and the address policy at creation and at every attempt.

Receivers are real HTTP servers on loopback. Attempts run in this process through
:func:`parley.webhooks.attempts.delivery_attempt`, as the task would, except in the end-to-end test, where
the live stack's worker steps a run and delivers and retries by itself.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.http import http_date
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from agents.models import Agent, Intent, Question
from agents.services import runs
from parley import live
from parley.models import Event, Tenant, WebhookDelivery, WebhookEndpoint
from parley.webhooks import attempts, endpoints, fan_out, resend, signing, sweeps
from tests.conftest import DEPLOYMENT_SECRETS, PRIVATE, LiveStack, free_port, wait_until

FINISHED = {"run": "r-1", "status": "done", "output": "Hired Ada."}


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes


class Receiver:
    """An HTTP server on loopback answering each POST, after ``delay`` seconds, with the next of
    ``statuses`` (then 204; a redirect to ``/moved`` for 3xx), the extra ``headers``, and ``body``,
    sent ``body_delay`` seconds after the status line and headers; what it received is in
    ``received``."""

    def __init__(
        self,
        statuses: Sequence[int] = (),
        body: bytes = b"",
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
        body_delay: float = 0.0,
    ) -> None:
        self.statuses = list(statuses)
        self.body = body
        self.delay = delay
        self.headers = headers or {}
        self.body_delay = body_delay
        self.received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append(Received({k.lower(): v for k, v in self.headers.items()}, data))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                time.sleep(receiver.delay)
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/moved")
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.flush()
                time.sleep(receiver.body_delay)
                self.wfile.write(receiver.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def endpoint_for(
    tenant: Tenant, url: str, events: Sequence[str] = ("run.finished",), **kw: Any
) -> WebhookEndpoint:
    return endpoints.webhook_endpoint_create(tenant=tenant, url=url, events=events, **kw)


def publish(tenant: Tenant, event: str = "run.finished", payload: dict[str, Any] | None = None) -> None:
    live.publish_on_commit(event=event, tenant_id=tenant.pk, party_id=None, payload=payload or FINISHED)


def attempt(delivery: WebhookDelivery, *, generation: int | None = None) -> WebhookDelivery:
    """Run the attempt the task scheduled as ``generation`` (default: the current one), in this process."""
    attempts.delivery_attempt(
        delivery_id=str(delivery.pk),
        tenant_id=delivery.tenant_id,
        generation=delivery.generation if generation is None else generation,
    )
    delivery.refresh_from_db()
    return delivery


def verified(endpoint: WebhookEndpoint, request: Received) -> Any:
    return Webhook(endpoint.secret).verify(request.body, request.headers)


# Signing.


@pytest.mark.django_db
def test_a_delivery_is_signed_as_standard_webhooks(tenant: Tenant, receiver: Receiver) -> None:
    endpoint = endpoint_for(tenant, receiver.url)
    publish(tenant)
    event = Event.across_tenants.get(kind="run.finished")
    delivery = WebhookDelivery.across_tenants.get(endpoint=endpoint)

    delivery = attempt(delivery)

    [request] = receiver.received
    body = verified(endpoint, request)
    stamp = event.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    assert body == {"type": "run.finished", "timestamp": stamp, "data": FINISHED}
    assert request.headers["webhook-id"] == delivery.webhook_id == f"msg_{delivery.pk.hex}"
    assert request.headers["content-type"] == "application/json"
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("succeeded", 1, 204)
    assert delivery.delivered_at is not None
    assert delivery.last_error == ""
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.new_secret()).verify(request.body, request.headers)


def test_a_secret_is_whsec_and_32_random_bytes() -> None:
    first, second = signing.new_secret(), signing.new_secret()
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32
    assert first != second


# Retries.


@pytest.mark.django_db
def test_a_receiver_failing_twice_gets_three_attempts_with_growing_waits(
    settings: Any, tenant: Tenant, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    settings.WEBHOOK_BACKOFF_BASE, settings.WEBHOOK_BACKOFF_MAX = 10.0, 1000.0
    with Receiver(statuses=[500, 503, 200], body=b'{"ok": true}') as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        delivery = WebhookDelivery.across_tenants.get(endpoint=endpoint)

        with django_capture_on_commit_callbacks() as scheduled:
            delivery = attempt(delivery)
        assert (delivery.status, delivery.last_status_code, delivery.last_error) == (
            "pending",
            500,
            "HTTP 500.",
        )
        assert len(scheduled) == 1  # the next attempt, sent once this commits
        assert delivery.next_attempt_at is not None
        assert delivery.next_attempt_at - delivery.last_attempt_at >= timedelta(seconds=10)

        delivery = attempt(delivery)
        assert (delivery.status, delivery.last_status_code) == ("pending", 503)
        delivery = attempt(delivery)

    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("succeeded", 3, 200)
    assert delivery.last_response == '{"ok": true}'
    log = delivery.attempt_log
    assert [(e["attempt"], e["status_code"], e["retry_in"]) for e in log] == [
        (1, 500, 10.0),
        (2, 503, 20.0),
        (3, 200, None),
    ]
    times = [datetime.fromisoformat(e["at"]) for e in log]
    assert times == sorted(times)
    assert len({r.headers["webhook-id"] for r in server.received}) == 1
    assert all(verified(endpoint, r)["type"] == "run.finished" for r in server.received)


@pytest.mark.django_db
def test_a_receiver_always_failing_ends_failed_when_the_window_closes(settings: Any, tenant: Tenant) -> None:
    settings.WEBHOOK_BACKOFF_BASE, settings.WEBHOOK_BACKOFF_MAX = 600.0, 1200.0
    settings.WEBHOOK_RETRY_FOR = 3600.0
    with Receiver(statuses=[500] * 5, body=b"x" * 10_000) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        # Made 2500 s ago: a wait of 600 s still falls in the window, one of 1200 s does not.
        WebhookDelivery.across_tenants.filter(endpoint=endpoint).update(
            window_opened_at=timezone.now() - timedelta(seconds=2500)
        )
        delivery = WebhookDelivery.across_tenants.get(endpoint=endpoint)

        delivery = attempt(delivery)
        assert delivery.status == "pending"
        delivery = attempt(delivery)
        assert delivery.status == "failed"
        attempt(delivery)  # a task left over does nothing

    assert len(server.received) == 2
    assert (delivery.attempts, delivery.last_status_code, delivery.next_attempt_at) == (2, 500, None)
    assert [e["retry_in"] for e in delivery.attempt_log] == [600.0, None]
    assert delivery.last_response == "x" * attempts.RESPONSE_EXCERPT_BYTES


@pytest.mark.django_db
def test_no_answer_is_a_failed_attempt_with_the_error_recorded(settings: Any, tenant: Tenant) -> None:
    settings.WEBHOOK_BACKOFF_BASE, settings.WEBHOOK_BACKOFF_MAX = 5.0, 100.0
    endpoint = endpoint_for(tenant, f"http://127.0.0.1:{free_port()}/hooks")  # nobody listens there
    publish(tenant)

    delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
    assert delivery.last_error.startswith("ConnectError: ")
    assert delivery.attempt_log[0]["retry_in"] == 5.0


@pytest.mark.django_db
def test_a_redirect_is_not_followed(tenant: Tenant) -> None:
    with Receiver(statuses=[302]) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert [r.body for r in server.received] == [signing.body_of(delivery)]
    assert (delivery.status, delivery.last_status_code) == ("pending", 302)
    assert delivery.last_error == "HTTP 302: redirects are not followed."


@pytest.mark.django_db
def test_a_receiver_slower_than_the_timeout_is_a_failed_attempt(settings: Any, tenant: Tenant) -> None:
    settings.WEBHOOK_TIMEOUT = 0.5
    with Receiver(delay=3.0) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert (delivery.status, delivery.last_status_code) == ("pending", None)
    assert delivery.last_error == "Timed out after 0.5 s."


@pytest.mark.django_db
def test_a_2xx_whose_body_arrives_after_the_timeout_has_succeeded_and_is_not_sent_again(
    settings: Any, tenant: Tenant
) -> None:
    settings.WEBHOOK_TIMEOUT = 1.0
    with Receiver(statuses=[200], body=b'{"ok":true}', body_delay=3.0) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert (delivery.status, delivery.last_status_code, delivery.last_error) == ("succeeded", 200, "")
    assert delivery.next_attempt_at is None
    assert len(server.received) == 1


@pytest.mark.django_db
def test_410_gone_fails_the_delivery_at_once_and_makes_the_endpoint_inactive(
    tenant: Tenant, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    with Receiver(statuses=[410]) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        with django_capture_on_commit_callbacks() as scheduled:
            delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))
        publish(tenant)  # the endpoint gets nothing more

    endpoint.refresh_from_db()
    assert (delivery.status, delivery.last_status_code, delivery.next_attempt_at) == ("failed", 410, None)
    assert delivery.last_error == (
        "HTTP 410. The receiver wants no more webhooks: the endpoint is now inactive."
    )
    assert delivery.attempt_log[0]["retry_in"] is None
    assert scheduled == []
    assert endpoint.active is False
    assert endpoint.disabled_reason.startswith("Answered 410 Gone at ")
    assert delivery.webhook_id in endpoint.disabled_reason
    assert WebhookDelivery.across_tenants.filter(endpoint=endpoint).count() == 1
    assert len(server.received) == 1

    endpoint = endpoints.webhook_endpoint_update(endpoint=endpoint, active=True)
    assert (endpoint.active, endpoint.disabled_reason) == (True, "")


IN_600_S_AS_A_DATE = "an HTTP-date 600 s from now"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "retry_after", "wait"),
    [
        (429, "600", (600.0, 600.0)),
        (503, "600", (600.0, 600.0)),
        (503, IN_600_S_AS_A_DATE, (595.0, 600.0)),
        (429, "5", (30.0, 30.0)),  # shorter than the backoff: the backoff
        (429, "86400", (1800.0, 1800.0)),  # at most WEBHOOK_BACKOFF_MAX
        (429, "soon", (30.0, 30.0)),  # not seconds nor a date: ignored
        (500, "600", (30.0, 30.0)),  # only 429 and 503 ask for a wait
    ],
)
def test_retry_after_of_a_429_or_503_makes_the_next_attempt_wait_longer(
    settings: Any, tenant: Tenant, status: int, retry_after: str, wait: tuple[float, float]
) -> None:
    settings.WEBHOOK_BACKOFF_BASE, settings.WEBHOOK_BACKOFF_MAX = 30.0, 1800.0
    settings.WEBHOOK_RETRY_FOR = 24 * 3600.0
    if retry_after == IN_600_S_AS_A_DATE:
        retry_after = http_date(time.time() + 600)
    with Receiver(statuses=[status], headers={"Retry-After": retry_after}) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert (delivery.status, delivery.last_status_code) == ("pending", status)
    [entry] = delivery.attempt_log
    assert wait[0] <= entry["retry_in"] <= wait[1]
    assert delivery.next_attempt_at is not None
    assert delivery.last_attempt_at is not None
    assert delivery.next_attempt_at - delivery.last_attempt_at >= timedelta(seconds=wait[0])


@pytest.mark.django_db
def test_a_retry_after_ending_past_the_window_fails_the_delivery_at_once(
    settings: Any, tenant: Tenant, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    settings.WEBHOOK_BACKOFF_BASE, settings.WEBHOOK_BACKOFF_MAX = 30.0, 1800.0
    settings.WEBHOOK_RETRY_FOR = 3600.0
    with Receiver(statuses=[503], headers={"Retry-After": "600"}) as server:
        endpoint = endpoint_for(tenant, server.url)
        publish(tenant)
        # Made 3300 s ago: the backoff (30 s) would still fall in the window, Retry-After's 600 s does not.
        WebhookDelivery.across_tenants.filter(endpoint=endpoint).update(
            window_opened_at=timezone.now() - timedelta(seconds=3300)
        )
        with django_capture_on_commit_callbacks() as scheduled:
            delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert (delivery.status, delivery.last_status_code, delivery.next_attempt_at) == ("failed", 503, None)
    assert delivery.last_error == (
        "HTTP 503. The receiver asked (Retry-After) for a wait that ends after the retry window: "
        "no attempt follows."
    )
    assert delivery.attempt_log[0]["retry_in"] is None
    assert scheduled == []
    assert len(server.received) == 1


@pytest.mark.django_db
def test_a_task_scheduled_before_or_running_twice_sends_nothing(tenant: Tenant, receiver: Receiver) -> None:
    endpoint = endpoint_for(tenant, receiver.url)
    publish(tenant)
    delivery = WebhookDelivery.across_tenants.get(endpoint=endpoint)
    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(
        claimed_until=timezone.now() + timedelta(minutes=1)
    )

    attempt(delivery)  # another copy of the task holds the attempt
    assert receiver.received == []

    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(claimed_until=None)
    attempt(delivery, generation=delivery.generation + 1)  # not scheduled (yet)
    assert receiver.received == []
    delivery = attempt(delivery)
    attempt(delivery, generation=0)  # again, once it succeeded
    assert len(receiver.received) == 1
    assert delivery.attempts == 1


@pytest.mark.django_db
def test_an_inactive_endpoint_is_sent_nothing(tenant: Tenant, receiver: Receiver) -> None:
    endpoint = endpoint_for(tenant, receiver.url)
    publish(tenant)
    endpoints.webhook_endpoint_update(endpoint=endpoint, active=False)

    delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert receiver.received == []
    assert (delivery.status, delivery.attempts) == ("failed", 0)
    assert delivery.last_error == "The endpoint is inactive; nothing was sent."


# Resending.


@pytest.mark.django_db
def test_resend_redelivers_with_the_same_webhook_id(
    tenant: Tenant, receiver: Receiver, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    endpoint = endpoint_for(tenant, receiver.url)
    publish(tenant)
    delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))
    assert delivery.status == "succeeded"

    with django_capture_on_commit_callbacks() as scheduled:
        resent = resend.delivery_resend(delivery=delivery)
    assert len(scheduled) == 1
    assert (resent.status, resent.generation, resent.window_attempts, resent.delivered_at) == (
        "pending",
        delivery.generation + 1,
        0,
        None,
    )
    attempt(delivery, generation=delivery.generation)  # the first attempt's task, again: stale
    delivery = attempt(resent)

    first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == delivery.webhook_id
    assert verified(endpoint, first) == verified(endpoint, second)
    assert (delivery.status, delivery.attempts) == ("succeeded", 2)


@pytest.mark.django_db
def test_resend_is_refused_while_an_attempt_is_under_way_or_the_endpoint_is_inactive(
    tenant: Tenant, receiver: Receiver
) -> None:
    endpoint = endpoint_for(tenant, receiver.url)
    publish(tenant)
    delivery = WebhookDelivery.across_tenants.get(endpoint=endpoint)
    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(
        claimed_until=timezone.now() + timedelta(minutes=1)
    )
    with pytest.raises(resend.ResendRefused, match="under way"):
        resend.delivery_resend(delivery=delivery)

    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(claimed_until=None)
    endpoints.webhook_endpoint_update(endpoint=endpoint, active=False)
    with pytest.raises(resend.ResendRefused, match="inactive"):
        resend.delivery_resend(delivery=delivery)
    delivery.refresh_from_db()
    assert (delivery.generation, delivery.status) == (0, "pending")


# Fan-out.


@pytest.mark.django_db
def test_fan_out_goes_to_subscribed_active_endpoints_of_the_same_tenant_only(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    subscribed = endpoint_for(tenant, "http://127.0.0.1:9/a", ["run.finished", "negotiation.turn"])
    endpoint_for(tenant, "http://127.0.0.1:9/b", ["negotiation.settled"])
    endpoint_for(tenant, "http://127.0.0.1:9/c", ["run.finished"], active=False)
    elsewhere = endpoint_for(other_tenant, "http://127.0.0.1:9/d", ["run.finished"])

    publish(tenant)

    [delivery] = WebhookDelivery.across_tenants.all()
    assert (delivery.endpoint_id, delivery.tenant_id, delivery.event_type) == (
        subscribed.pk,
        tenant.pk,
        "run.finished",
    )
    assert delivery.payload["data"] == FINISHED
    assert not WebhookDelivery.across_tenants.filter(endpoint=elsewhere).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "webhook_type"), sorted(fan_out.WEBHOOK_TYPES.items()))
def test_each_webhook_event_comes_from_its_live_event(tenant: Tenant, kind: str, webhook_type: str) -> None:
    endpoint_for(tenant, "http://127.0.0.1:9/all", [str(t) for t in fan_out.WEBHOOK_TYPES.values()])

    publish(tenant, kind, {"id": "x-1"})

    [delivery] = WebhookDelivery.across_tenants.all()
    assert (delivery.event_type, delivery.payload["type"], delivery.payload["data"]) == (
        webhook_type,
        webhook_type,
        {"id": "x-1"},
    )


@pytest.mark.django_db
def test_live_events_that_are_not_webhook_types_are_not_sent(tenant: Tenant) -> None:
    endpoint_for(tenant, "http://127.0.0.1:9/all", [str(t) for t in fan_out.WEBHOOK_TYPES.values()])

    for kind in ("run.updated", "run.retry", "run.fallback"):
        publish(tenant, kind, {"run": "r-1"})

    assert sorted(Event.across_tenants.values_list("kind", flat=True)) == ["run.fallback", "run.retry"]
    assert not WebhookDelivery.across_tenants.exists()


@pytest.mark.django_db
def test_fan_out_costs_one_query_when_the_tenant_has_no_endpoint(
    tenant: Tenant, other_tenant: Tenant, django_assert_num_queries: Callable[..., Any]
) -> None:
    endpoint_for(other_tenant, "http://127.0.0.1:9/d", ["run.finished"])
    event = Event.objects.create(tenant=tenant, kind="run.finished", payload=FINISHED)
    updated = Event.objects.create(tenant=tenant, kind="run.updated", payload={})

    with django_assert_num_queries(1):
        assert fan_out.event_fan_out(event=event) == []
    with django_assert_num_queries(0):
        assert fan_out.event_fan_out(event=updated) == []


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_change_creates_no_delivery(tenant: Tenant) -> None:
    endpoint_for(tenant, "http://127.0.0.1:9/a")

    def change_that_fails() -> None:
        with transaction.atomic():
            publish(tenant)
            assert WebhookDelivery.across_tenants.count() == 1
            raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError):
        change_that_fails()

    assert not WebhookDelivery.across_tenants.exists()
    assert not Event.across_tenants.exists()


# The address policy.


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://127.0.0.1/hooks", f"the host '127.0.0.1' {PRIVATE}."),
        ("https://localhost/hooks", f"the host 'localhost' {PRIVATE}."),
        ("https://10.1.2.3/hooks", f"the host '10.1.2.3' {PRIVATE}."),
        ("https://169.254.169.254/latest/meta-data/", f"the host '169.254.169.254' {PRIVATE}."),
        ("https://[::1]/hooks", f"the host '::1' {PRIVATE}."),
        ("https://[::ffff:192.168.1.1]/hooks", f"the host '::ffff:192.168.1.1' {PRIVATE}."),
        ("https://hooks.invalid/x", "does not resolve"),
        ("http://8.8.8.8/hooks", "it must use https"),
        ("ftp://8.8.8.8/hooks", "it must use https"),
    ],
)
def test_a_url_refused_by_the_policy_is_refused_at_creation(
    settings: Any, tenant: Tenant, url: str, problem: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE, settings.WEBHOOKS_ALLOW_HTTP = False, False

    with pytest.raises(ValidationError) as refused:
        endpoint_for(tenant, url)

    [message] = refused.value.message_dict["url"]
    assert message.startswith("Webhooks are not sent to this URL: ")
    assert problem in message
    assert not WebhookEndpoint.across_tenants.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        # RFC 8215 local-use NAT64 prefix: through the site's NAT64 gateway, 169.254.169.254 (metadata).
        "https://[64:ff9b:1::a9fe:a9fe]/latest/meta-data/",
        # The same prefix carrying 10.0.0.1 (a private address).
        "https://[64:ff9b:1::a00:1]/hooks",
        # Site-local (fec0::/10, RFC 3879): deprecated but still routed inside some sites.
        "https://[fec0::1]/hooks",
        # IPv4-translated (SIIT, RFC 6145) 10.0.0.1.
        "https://[::ffff:0:a00:1]/hooks",
        # Documentation (RFC 9637).
        "https://[3fff::1]/hooks",
    ],
)
def test_an_ipv6_address_python_calls_global_but_that_is_special_purpose_is_refused_at_creation(
    settings: Any, tenant: Tenant, url: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE, settings.WEBHOOKS_ALLOW_HTTP = False, False

    with pytest.raises(ValidationError) as refused:
        endpoint_for(tenant, url)

    assert PRIVATE in refused.value.message_dict["url"][0]
    assert not WebhookEndpoint.across_tenants.exists()


@pytest.mark.django_db
def test_a_host_whose_first_address_is_unreachable_is_delivered_to_at_the_next(
    tenant: Tenant, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dual-stack receiver seen from a worker without IPv6 (as in many containers): its AAAA
    address fails to connect, its A address answers."""
    port = receiver.server.server_address[1]
    real = socket.getaddrinfo

    def resolver(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "dual.example":  # AAAA first (nothing listens there), then A (the receiver)
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            ]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    endpoint = endpoint_for(tenant, f"http://dual.example:{port}/hooks")
    publish(tenant)

    delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert (delivery.status, delivery.last_error) == ("succeeded", "")
    [request] = receiver.received
    assert request.headers["host"] == f"dual.example:{port}"


@pytest.mark.django_db
def test_a_public_https_url_is_accepted_with_production_settings(settings: Any, tenant: Tenant) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE, settings.WEBHOOKS_ALLOW_HTTP = False, False

    endpoint = endpoint_for(tenant, "https://8.8.8.8/hooks")

    assert WebhookEndpoint.across_tenants.get().pk == endpoint.pk


@pytest.mark.django_db
def test_a_url_changed_to_a_private_address_is_refused_and_nothing_changes(
    settings: Any, tenant: Tenant
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    endpoint = endpoint_for(tenant, "https://8.8.8.8/hooks")

    with pytest.raises(ValidationError) as refused:
        endpoints.webhook_endpoint_update(endpoint=endpoint, url="https://192.168.0.10/hooks", active=False)

    assert refused.value.message_dict["url"] == [
        f"Webhooks are not sent to this URL: the host '192.168.0.10' {PRIVATE}."
    ]
    endpoint.refresh_from_db()
    assert (endpoint.url, endpoint.active) == ("https://8.8.8.8/hooks", True)


@pytest.mark.django_db
def test_a_private_address_is_refused_at_the_attempt_and_nothing_is_sent(
    settings: Any, tenant: Tenant, receiver: Receiver
) -> None:
    endpoint = endpoint_for(tenant, receiver.url)  # allowed when made (test settings)
    publish(tenant)
    settings.WEBHOOKS_ALLOW_PRIVATE = False  # as in production

    delivery = attempt(WebhookDelivery.across_tenants.get(endpoint=endpoint))

    assert receiver.received == []
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
    assert delivery.last_error == (f"Refused, nothing sent: the host '127.0.0.1' {PRIVATE}.")
    assert delivery.attempt_log[0]["retry_in"] is not None


@pytest.mark.parametrize(
    ("module", "env", "expected"),
    [
        ("parley.settings.base", {}, "False False"),
        ("parley.settings.base", {"WEBHOOKS_ALLOW_PRIVATE": "true"}, "True False"),
        (
            "parley.settings.production",
            {"WEBHOOKS_ALLOW_PRIVATE": "true", "WEBHOOKS_ALLOW_HTTP": "true"},
            "False False",
        ),
    ],
)
def test_private_addresses_and_plain_http_are_refused_by_default_and_always_in_production(
    module: str, env: dict[str, str], expected: str
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WEBHOOK")}
    code = f"import {module} as s; print(s.WEBHOOKS_ALLOW_PRIVATE, s.WEBHOOKS_ALLOW_HTTP)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**environment, **DEPLOYMENT_SECRETS, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == expected


# The overdue sweep.


@pytest.mark.django_db
def test_the_sweep_sends_again_only_deliveries_whose_attempt_was_lost(tenant: Tenant) -> None:
    endpoint = endpoint_for(tenant, "http://127.0.0.1:9/a")
    for _ in range(3):
        publish(tenant)
    lost, under_way, _on_time = WebhookDelivery.across_tenants.filter(endpoint=endpoint)
    long_ago = timezone.now() - timedelta(minutes=10)
    WebhookDelivery.across_tenants.filter(pk__in=[lost.pk, under_way.pk]).update(next_attempt_at=long_ago)
    WebhookDelivery.across_tenants.filter(pk=under_way.pk).update(
        claimed_until=timezone.now() + timedelta(minutes=1)
    )

    assert sweeps.deliveries_overdue_enqueue() == 1


# End to end: the worker delivers and retries by itself.


@pytest.mark.django_db(transaction=True)
def test_the_worker_delivers_run_needs_input_retrying_until_the_receiver_answers(
    live_stack: LiveStack, agent: Agent, intent: Intent, principal: AbstractUser
) -> None:
    with Receiver(statuses=[500, 502, 200]) as server:
        endpoint = endpoint_for(agent.tenant, server.url, ["run.needs_input"])

        run = runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO.")

        delivery = wait_until(
            lambda: WebhookDelivery.across_tenants.filter(endpoint=endpoint, status="succeeded").first(),
            what="the delivery to succeed",
        )

    question = Question.across_tenants.get(run=run)
    assert (delivery.attempts, delivery.last_status_code) == (3, 200)
    log = delivery.attempt_log
    assert [(e["status_code"], e["retry_in"]) for e in log] == [(500, 0.3), (502, 0.6), (200, None)]
    assert [datetime.fromisoformat(e["at"]) for e in log] == sorted(
        datetime.fromisoformat(e["at"]) for e in log
    )
    assert len(server.received) == 3
    assert {r.headers["webhook-id"] for r in server.received} == {delivery.webhook_id}
    bodies = [verified(endpoint, r) for r in server.received]
    assert bodies[0] == bodies[2]
    assert bodies[0]["type"] == "run.needs_input"
    assert bodies[0]["data"] == {"question": str(question.pk), "run": str(run.pk), "kind": "question"}
    assert json.loads(server.received[0].body) == bodies[0]
