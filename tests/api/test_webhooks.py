"""``/api/v1/webhook-endpoints`` and ``/api/v1/webhook-deliveries``: the secret shown only on create
and rotate, URLs and event types checked, deliveries read, filtered and resent, admin scope for every
write, and another tenant's ids a 404 that changes nothing.

Deliveries are made the way the platform makes them: a live event published for the tenant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from parley import live
from parley.models import Tenant, WebhookDelivery, WebhookEndpoint
from parley.webhooks import endpoints

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hooks"


def create(api: APIClient, **body: Any) -> Any:
    return api.post(
        "/api/v1/webhook-endpoints", {"url": URL, "events": ["run.finished"], **body}, format="json"
    )


def delivery_of(tenant: Tenant, endpoint: WebhookEndpoint, kind: str = "run.finished") -> WebhookDelivery:
    """A delivery to ``endpoint``, made by publishing ``kind`` for ``tenant`` (it must subscribe)."""
    live.publish_on_commit(event=kind, tenant_id=tenant.pk, party_id=None, payload={"run": "r-1"})
    return WebhookDelivery.across_tenants.filter(endpoint=endpoint).latest("created_at")


@pytest.fixture
def endpoint(tenant: Tenant) -> WebhookEndpoint:
    return endpoints.webhook_endpoint_create(
        tenant=tenant, url=URL, events=["run.finished", "negotiation.settled"], description="orders"
    )


# Endpoints.


def test_create_answers_the_secret_once(api: APIClient, tenant: Tenant) -> None:
    response = create(api, description="CRM", events=["run.needs_input", "negotiation.settled"])

    assert response.status_code == 201
    body = response.json()
    stored = WebhookEndpoint.across_tenants.get(tenant=tenant)
    assert body == {
        "id": str(stored.pk),
        "url": URL,
        "description": "CRM",
        "events": ["run.needs_input", "negotiation.settled"],
        "active": True,
        "disabled_reason": "",
        "created_at": body["created_at"],
        "updated_at": body["updated_at"],
        "secret": stored.secret,
    }
    assert stored.secret.startswith("whsec_")
    shown = [
        api.get(f"/api/v1/webhook-endpoints/{stored.pk}").json(),
        api.get("/api/v1/webhook-endpoints").json(),
    ]
    assert "secret" not in shown[0]
    assert stored.secret not in str(shown)
    assert [e["id"] for e in shown[1]["results"]] == [str(stored.pk)]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"events": ["run.exploded"]}, "events", '"run.exploded" is not a valid choice.'),
        ({"events": []}, "events", "This list may not be empty."),
        ({"events": "run.finished"}, "events", 'Expected a list of items but got type "str".'),
        ({"events": ["run.finished", "run.finished"]}, "events", "An event type is listed twice."),
        ({"url": "not a url"}, "url", "Enter a valid URL."),
        (
            {"url": "https://hooks.invalid/x"},
            "url",
            "Webhooks are not sent to this URL: the host 'hooks.invalid' does not resolve.",
        ),
        ({"description": "x" * 501}, "description", "Ensure this field has no more than 500 characters."),
    ],
)
def test_a_bad_field_is_400_naming_it(api: APIClient, body: dict[str, Any], field: str, message: str) -> None:
    response = create(api, **body)

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {field: [message]}
    assert not WebhookEndpoint.across_tenants.exists()


def test_a_private_or_plain_http_url_is_refused_in_production_settings(settings: Any, api: APIClient) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE, settings.WEBHOOKS_ALLOW_HTTP = False, False

    loopback = create(api, url="https://127.0.0.1:8443/hooks")
    metadata = create(api, url="https://169.254.169.254/latest/meta-data/")
    plain = create(api, url="http://8.8.8.8/hooks")

    assert [r.status_code for r in (loopback, metadata, plain)] == [400, 400, 400]
    [refusal] = loopback.json()["error"]["fields"]["url"]
    assert refusal == (
        "Webhooks are not sent to this URL: the host '127.0.0.1' resolves to a private address; Parley "
        "does not call private addresses."
    )
    assert "169.254.169.254" in metadata.json()["error"]["fields"]["url"][0]
    assert plain.json()["error"]["fields"] == {
        "url": ["Webhooks are not sent to this URL: it must use https."]
    }
    assert not WebhookEndpoint.across_tenants.exists()
    assert create(api, url="https://8.8.8.8/hooks").status_code == 201


def test_patch_changes_what_is_given(api: APIClient, endpoint: WebhookEndpoint) -> None:
    response = api.patch(
        f"/api/v1/webhook-endpoints/{endpoint.pk}",
        {"events": ["intake.received"], "active": False, "url": "http://127.0.0.1:10/new"},
        format="json",
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["events"], body["active"], body["url"], body["description"]) == (
        ["intake.received"],
        False,
        "http://127.0.0.1:10/new",
        "orders",
    )
    assert "secret" not in body
    endpoint.refresh_from_db()
    assert (endpoint.events, endpoint.active, endpoint.url) == (
        ["intake.received"],
        False,
        "http://127.0.0.1:10/new",
    )


def test_an_endpoint_disabled_for_a_410_shows_why_until_the_host_activates_it(
    api: APIClient, endpoint: WebhookEndpoint
) -> None:
    reason = "Answered 410 Gone at 2026-01-01T00:00:00Z (webhook-id msg_1): the receiver wants no more."
    WebhookEndpoint.across_tenants.filter(pk=endpoint.pk).update(active=False, disabled_reason=reason)
    at = f"/api/v1/webhook-endpoints/{endpoint.pk}"

    shown = api.get(at).json()
    activated = api.patch(at, {"active": True}, format="json")

    assert (shown["active"], shown["disabled_reason"]) == (False, reason)
    assert activated.status_code == 200
    assert (activated.json()["active"], activated.json()["disabled_reason"]) == (True, "")
    endpoint.refresh_from_db()
    assert (endpoint.active, endpoint.disabled_reason) == (True, "")


def test_patch_to_a_private_url_in_production_settings_is_400_and_changes_nothing(
    settings: Any, api: APIClient, endpoint: WebhookEndpoint
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE = False

    response = api.patch(
        f"/api/v1/webhook-endpoints/{endpoint.pk}",
        {"url": "http://10.0.0.5/hooks", "description": "moved"},
        format="json",
    )

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["url"]
    endpoint.refresh_from_db()
    assert (endpoint.url, endpoint.description) == (URL, "orders")


def test_patch_with_an_unknown_event_type_is_400_naming_events(
    api: APIClient, endpoint: WebhookEndpoint
) -> None:
    response = api.patch(f"/api/v1/webhook-endpoints/{endpoint.pk}", {"events": ["run.nope"]}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"events": ['"run.nope" is not a valid choice.']}
    endpoint.refresh_from_db()
    assert endpoint.events == ["run.finished", "negotiation.settled"]


def test_rotate_secret_answers_the_new_secret_once(api: APIClient, endpoint: WebhookEndpoint) -> None:
    old = endpoint.secret

    response = api.post(f"/api/v1/webhook-endpoints/{endpoint.pk}/rotate-secret")

    assert response.status_code == 200
    endpoint.refresh_from_db()
    assert response.json()["secret"] == endpoint.secret != old
    assert endpoint.secret.startswith("whsec_")
    assert "secret" not in api.get(f"/api/v1/webhook-endpoints/{endpoint.pk}").json()


def test_delete_removes_the_endpoint_and_its_deliveries(
    api: APIClient, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery_of(tenant, endpoint)

    response = api.delete(f"/api/v1/webhook-endpoints/{endpoint.pk}")

    assert response.status_code == 204
    assert not WebhookEndpoint.across_tenants.exists()
    assert not WebhookDelivery.across_tenants.exists()
    assert api.get(f"/api/v1/webhook-endpoints/{endpoint.pk}").status_code == 404


def test_put_is_not_offered(api: APIClient, endpoint: WebhookEndpoint) -> None:
    response = api.put(f"/api/v1/webhook-endpoints/{endpoint.pk}", {"url": URL, "events": []}, format="json")

    assert response.status_code == 405


def test_a_retried_create_with_its_idempotency_key_makes_one_endpoint(api: APIClient) -> None:
    body = {"url": URL, "events": ["run.finished"]}
    first = api.post("/api/v1/webhook-endpoints", body, format="json", HTTP_IDEMPOTENCY_KEY="hook-1")
    again = api.post("/api/v1/webhook-endpoints", body, format="json", HTTP_IDEMPOTENCY_KEY="hook-1")

    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json()["secret"].startswith("whsec_")
    # The replay says the endpoint was made, without showing its secret a second time.
    assert again.json() == {**first.json(), "secret": None}
    assert again.headers["Idempotent-Replayed"] == "true"
    assert WebhookEndpoint.across_tenants.count() == 1


# Deliveries.


def test_a_delivery_reads_with_its_body_and_attempts(
    api: APIClient, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint)

    listed = api.get("/api/v1/webhook-deliveries").json()["results"]
    detail = api.get(f"/api/v1/webhook-deliveries/{delivery.pk}").json()

    assert [d["id"] for d in listed] == [str(delivery.pk)]
    assert "payload" not in listed[0]
    assert {
        k: detail[k] for k in ("webhook_id", "endpoint", "type", "status", "attempts", "attempt_log")
    } == {
        "webhook_id": f"msg_{delivery.pk.hex}",
        "endpoint": str(endpoint.pk),
        "type": "run.finished",
        "status": "pending",
        "attempts": 0,
        "attempt_log": [],
    }
    assert detail["payload"]["type"] == "run.finished"
    assert detail["payload"]["data"] == {"run": "r-1"}
    assert (detail["last_status_code"], detail["last_error"], detail["delivered_at"]) == (None, "", None)


def test_deliveries_filter_by_endpoint_status_and_type(
    api: APIClient, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    other = endpoints.webhook_endpoint_create(tenant=tenant, url=URL, events=["run.finished"])
    finished = delivery_of(tenant, endpoint)
    settled = delivery_of(tenant, endpoint, "negotiation.settled")
    to_other = WebhookDelivery.across_tenants.get(endpoint=other)
    WebhookDelivery.across_tenants.filter(pk=settled.pk).update(status=WebhookDelivery.Status.FAILED)

    def ids(query: str) -> list[str]:
        response = api.get(f"/api/v1/webhook-deliveries?{query}")
        assert response.status_code == 200
        return [d["id"] for d in response.json()["results"]]

    assert ids(f"endpoint={endpoint.pk}") == [str(settled.pk), str(finished.pk)]
    assert ids(f"endpoint={other.pk}") == [str(to_other.pk)]
    assert ids("status=failed") == [str(settled.pk)]
    assert sorted(ids("type=run.finished")) == sorted([str(to_other.pk), str(finished.pk)])
    assert ids(f"type=run.finished&endpoint={endpoint.pk}&status=pending") == [str(finished.pk)]


@pytest.mark.parametrize(
    ("query", "field"), [("status=lost", "status"), ("type=run.nope", "type"), ("endpoint=42", "endpoint")]
)
def test_a_bad_filter_is_400_naming_it(api: APIClient, query: str, field: str) -> None:
    response = api.get(f"/api/v1/webhook-deliveries?{query}")

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]


def test_another_tenants_endpoint_as_a_filter_is_400_not_its_deliveries(
    api: APIClient, other_tenant: Tenant
) -> None:
    theirs = endpoints.webhook_endpoint_create(tenant=other_tenant, url=URL, events=["run.finished"])
    delivery_of(other_tenant, theirs)

    response = api.get(f"/api/v1/webhook-deliveries?endpoint={theirs.pk}")

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["endpoint"]


def test_resend_makes_the_delivery_pending_again_and_sends_it_after_commit(
    api: APIClient,
    tenant: Tenant,
    endpoint: WebhookEndpoint,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    delivery = delivery_of(tenant, endpoint)
    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(
        status=WebhookDelivery.Status.FAILED, attempts=7
    )

    with django_capture_on_commit_callbacks() as scheduled:
        response = api.post(f"/api/v1/webhook-deliveries/{delivery.pk}/resend")

    assert response.status_code == 200
    assert len(scheduled) == 1
    body = response.json()
    assert (body["status"], body["attempts"], body["webhook_id"]) == ("pending", 7, delivery.webhook_id)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.generation) == ("pending", 1)


def test_resend_to_an_inactive_endpoint_is_409(
    api: APIClient, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint)
    endpoints.webhook_endpoint_update(endpoint=endpoint, active=False)

    response = api.post(f"/api/v1/webhook-deliveries/{delivery.pk}/resend")

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "conflict",
        "message": "The endpoint of this delivery is inactive; activate it first.",
    }


# Tenants and scopes.


def test_another_tenants_endpoint_and_delivery_are_404_and_nothing_changes(
    other_api: APIClient, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint)
    before = (endpoint.url, endpoint.secret, endpoint.active)
    at = f"/api/v1/webhook-endpoints/{endpoint.pk}"

    responses = [
        other_api.get(at),
        other_api.patch(at, {"active": False, "url": "http://127.0.0.1:9/theirs"}, format="json"),
        other_api.post(f"{at}/rotate-secret"),
        other_api.delete(at),
        other_api.get(f"/api/v1/webhook-deliveries/{delivery.pk}"),
        other_api.post(f"/api/v1/webhook-deliveries/{delivery.pk}/resend"),
    ]

    assert [r.status_code for r in responses] == [404] * 6
    assert all(r.json()["error"]["code"] == "not_found" for r in responses)
    assert other_api.get("/api/v1/webhook-endpoints").json()["results"] == []
    assert other_api.get("/api/v1/webhook-deliveries").json()["results"] == []
    endpoint.refresh_from_db()
    assert (endpoint.url, endpoint.secret, endpoint.active) == before
    delivery.refresh_from_db()
    assert (delivery.generation, delivery.status) == (0, "pending")


@pytest.mark.parametrize(
    ("scopes", "reads", "writes"),
    [
        (("read",), 200, 403),
        (("read", "write"), 200, 403),
        (("admin",), 403, None),
        (("read", "admin"), 200, None),
    ],
)
def test_reads_need_read_and_every_write_admin(
    tenant: Tenant,
    endpoint: WebhookEndpoint,
    key_for: Callable[..., str],
    client_for: Callable[[str], APIClient],
    scopes: tuple[str, ...],
    reads: int,
    writes: int | None,
) -> None:
    client = client_for(key_for(tenant, scopes=scopes))
    delivery = delivery_of(tenant, endpoint)
    at = f"/api/v1/webhook-endpoints/{endpoint.pk}"

    read = [
        client.get("/api/v1/webhook-endpoints"),
        client.get(at),
        client.get("/api/v1/webhook-deliveries"),
        client.get(f"/api/v1/webhook-deliveries/{delivery.pk}"),
    ]
    written = [
        create(client),
        client.patch(at, {"description": "changed"}, format="json"),
        client.post(f"{at}/rotate-secret"),
        client.post(f"/api/v1/webhook-deliveries/{delivery.pk}/resend"),
    ]

    assert [r.status_code for r in read] == [reads] * 4
    if writes is None:  # allowed: each did its work
        assert [r.status_code for r in written] == [201, 200, 200, 200]
    else:
        assert [r.status_code for r in written] == [writes] * 4
        assert (
            written[0].json()["error"]["message"]
            == "This API key lacks the 'admin' scope this operation needs."
        )
        endpoint.refresh_from_db()
        assert (endpoint.description, WebhookEndpoint.across_tenants.count()) == ("orders", 1)


def test_the_schema_says_the_secret_is_null_on_a_replay(api: APIClient) -> None:
    schema = api.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    secret = schema["components"]["schemas"]["WebhookEndpointWithSecret"]["properties"]["secret"]
    assert (secret["type"], secret["nullable"]) == ("string", True)
