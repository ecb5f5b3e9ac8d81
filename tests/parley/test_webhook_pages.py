"""The dashboard's webhook pages: endpoints added (secret shown once), refused at their fields,
activated, rotated and deleted; deliveries listed, filtered, read and re-sent; roles; another
tenant's ids a 404 that changes nothing.

Endpoints are made with the service, deliveries the way the platform makes them: a live event
published for the tenant (:func:`parley.live.publish_on_commit`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from parley import live
from parley.models import Membership, Tenant, WebhookDelivery, WebhookEndpoint
from parley.webhooks import endpoints
from tests.parley.tenancy import member

URL = "http://127.0.0.1:9/hooks"


def url(name: str, tenant: Tenant | str = "acme", **kwargs: Any) -> str:
    return reverse(f"tenant:{name}", kwargs={"tenant": getattr(tenant, "slug", tenant), **kwargs})


def hook(
    tenant: Tenant, address: str = URL, events: Any = ("run.finished",), **kwargs: Any
) -> WebhookEndpoint:
    return endpoints.webhook_endpoint_create(tenant=tenant, url=address, events=events, **kwargs)


def delivery_of(
    tenant: Tenant, endpoint: WebhookEndpoint, kind: str = "run.finished", payload: Any = None
) -> WebhookDelivery:
    """A delivery to ``endpoint``, made by publishing ``kind`` for ``tenant`` (it must subscribe)."""
    live.publish_on_commit(event=kind, tenant_id=tenant.pk, party_id=None, payload=payload or {"run": "r-1"})
    return WebhookDelivery.across_tenants.filter(endpoint=endpoint).latest("created_at")


def rows() -> dict[str, list[dict[str, Any]]]:
    """Every endpoint and delivery as stored."""
    return {
        "endpoints": list(WebhookEndpoint.across_tenants.order_by("pk").values()),
        "deliveries": list(WebhookDelivery.across_tenants.order_by("pk").values()),
    }


def shown_secret(page: str) -> str:
    return page.split('id="new-secret" class="secret" type="text" readonly value="')[1].split('"')[0]


@pytest.fixture
def endpoint(tenant: Tenant) -> WebhookEndpoint:
    return hook(tenant, events=["run.finished", "negotiation.settled"], description="orders")


@pytest.fixture
def as_owner(client: Client, owner: AbstractUser) -> Client:
    client.force_login(owner)
    return client


# Endpoints.


def test_the_page_lists_the_endpoints_without_their_secrets(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    gone = hook(tenant, "http://127.0.0.1:9/gone")
    reason = "Answered 410 Gone: the receiver wants no more webhooks."
    WebhookEndpoint.across_tenants.filter(pk=gone.pk).update(active=False, disabled_reason=reason)

    page = as_owner.get(url("webhooks")).content.decode()

    assert "<h1>Webhooks</h1>" in page
    assert page.index(f'<tr id="endpoint-{gone.pk}">') < page.index(f'<tr id="endpoint-{endpoint.pk}">')
    row = page.split(f'<tr id="endpoint-{endpoint.pk}">')[1].split("</tr>")[0]
    assert f"<code>{URL}</code>" in row
    assert '<p class="meta">orders</p>' in row
    assert "<li><code>run.finished</code></li><li><code>negotiation.settled</code></li>" in row
    assert '<span class="badge badge-succeeded">active</span>' in row
    assert f'<time datetime="{endpoint.created_at.isoformat()}' in row
    assert '<input type="hidden" name="active" value="false">' in row
    assert url("webhook-rotate", pk=endpoint.pk) in row
    assert url("webhook-delete", pk=endpoint.pk) in row
    assert f"{url('webhook-deliveries')}?endpoint={endpoint.pk}" in row
    gone_row = page.split(f'<tr id="endpoint-{gone.pk}">')[1].split("</tr>")[0]
    assert '<span class="badge badge-failed">inactive</span>' in gone_row
    assert reason in gone_row
    assert '<input type="hidden" name="active" value="true">' in gone_row
    assert endpoint.secret not in page
    assert gone.secret not in page
    assert 'id="new-secret"' not in page
    assert "Add an endpoint" in page
    for event in ("run.needs_input", "run.finished", "question.answered", "intake.received"):
        assert f'value="{event}"' in page
    assert f'href="{url("webhooks")}" aria-current="page">Webhooks</a>' in page


@pytest.mark.parametrize("role", ["owner", "operator"])
def test_adding_stores_the_endpoint_and_shows_its_secret_once(
    client: Client, tenant: Tenant, role: str
) -> None:
    client.force_login(member(tenant, "sam", role))

    response = client.post(
        url("webhooks"),
        {"url": f" {URL} ", "events": ["run.needs_input", "negotiation.settled"], "description": " CRM "},
    )

    assert response.status_code == 200
    stored = WebhookEndpoint.across_tenants.get()
    assert (stored.tenant_id, stored.url, stored.events, stored.description, stored.active) == (
        tenant.pk,
        URL,
        ["run.needs_input", "negotiation.settled"],
        "CRM",
        True,
    )
    page = response.content.decode()
    assert shown_secret(page) == stored.secret
    assert stored.secret.startswith("whsec_")
    assert page.count(stored.secret) == 1
    assert "it will not be shown again" in page
    assert f'<tr id="endpoint-{stored.pk}">' in page
    assert 'name="url" value' not in page  # a fresh form under the secret
    assert "no-store" in response["Cache-Control"]
    # Nowhere to be found again: not on the page, not in the session or the messages cookie.
    assert stored.secret not in client.get(url("webhooks")).content.decode()
    assert stored.secret not in str(client.session.items())
    assert all(stored.secret not in morsel.value for morsel in client.cookies.values())


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        ({"url": URL}, {"events": ["Choose at least one event type."]}),
        (
            {"url": URL, "events": ["run.finished", "run.exploded"]},
            {"events": ["Unknown event type: run.exploded."]},
        ),
        ({"events": ["run.finished"]}, {"url": ["Give the URL that receives the webhooks."]}),
        ({"url": "not a url", "events": ["run.finished"]}, {"url": ["Enter a valid URL."]}),
        (
            {"url": "https://hooks.invalid/x", "events": ["run.finished"]},
            {"url": ["Webhooks are not sent to this URL: the host 'hooks.invalid' does not resolve."]},
        ),
        (
            {"url": URL, "events": ["run.finished"], "description": "x" * 501},
            {"description": ["Ensure this value has at most 500 characters (it has 501)."]},
        ),
    ],
)
def test_refused_input_is_shown_at_its_field_and_nothing_is_stored(
    as_owner: Client, data: dict[str, Any], errors: dict[str, list[str]]
) -> None:
    response = as_owner.post(url("webhooks"), data)

    assert response.status_code == 200
    assert response.context["form"].errors == errors
    page = response.content.decode()
    assert "No endpoint was added: correct the fields marked below." in page
    [field] = errors
    assert f'id="id_{field}_error"' in page
    assert 'id="new-secret"' not in page
    assert not WebhookEndpoint.across_tenants.exists()


@pytest.mark.parametrize(
    ("address", "message"),
    [
        (
            "https://127.0.0.1:8443/hooks",
            "Webhooks are not sent to this URL: the host '127.0.0.1' resolves to a private address; "
            "Parley does not call private addresses.",
        ),
        ("http://8.8.8.8/hooks", "Webhooks are not sent to this URL: it must use https."),
    ],
)
def test_a_url_the_address_policy_refuses_is_shown_at_the_url_field(
    settings: Any, as_owner: Client, address: str, message: str
) -> None:
    settings.WEBHOOKS_ALLOW_PRIVATE, settings.WEBHOOKS_ALLOW_HTTP = False, False

    response = as_owner.post(url("webhooks"), {"url": address, "events": ["run.finished"]})

    assert response.context["form"].errors == {"url": [message]}
    assert not WebhookEndpoint.across_tenants.exists()


def test_deactivating_and_activating_again_clears_the_reason(
    as_owner: Client, endpoint: WebhookEndpoint
) -> None:
    off = as_owner.post(url("webhook-active", pk=endpoint.pk), {"active": "false"}, follow=True)

    assert off.redirect_chain == [(url("webhooks"), 302)]
    assert f"{URL} is inactive: it is sent nothing until activated." in off.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.active is False
    WebhookEndpoint.across_tenants.filter(pk=endpoint.pk).update(disabled_reason="Answered 410 Gone.")

    on = as_owner.post(url("webhook-active", pk=endpoint.pk), {"active": "true"}, follow=True)

    assert f"{URL} is active: it is sent new deliveries." in on.content.decode()
    endpoint.refresh_from_db()
    assert (endpoint.active, endpoint.disabled_reason) == (True, "")


@pytest.mark.parametrize("data", [{}, {"active": "maybe"}])
def test_a_bad_active_value_is_a_message_and_changes_nothing(
    as_owner: Client, endpoint: WebhookEndpoint, data: dict[str, str]
) -> None:
    before = rows()

    response = as_owner.post(url("webhook-active", pk=endpoint.pk), data, follow=True)

    assert response.redirect_chain == [(url("webhooks"), 302)]
    assert '<li class="error">' in response.content.decode()
    assert rows() == before


def test_rotating_asks_first_then_shows_the_new_secret_once(
    as_owner: Client, endpoint: WebhookEndpoint
) -> None:
    old = endpoint.secret

    confirm = as_owner.get(url("webhook-rotate", pk=endpoint.pk))

    assert f"<h1>Rotate the secret of <code>{URL}</code>?</h1>" in confirm.content.decode()
    assert old not in confirm.content.decode()
    assert WebhookEndpoint.across_tenants.get().secret == old

    response = as_owner.post(url("webhook-rotate", pk=endpoint.pk))

    assert response.status_code == 200
    new = WebhookEndpoint.across_tenants.get().secret
    assert new != old
    assert new.startswith("whsec_")
    page = response.content.decode()
    assert shown_secret(page) == new
    assert page.count(new) == 1
    assert old not in page
    assert "no-store" in response["Cache-Control"]
    assert new not in as_owner.get(url("webhooks")).content.decode()
    assert new not in as_owner.get(url("webhook-rotate", pk=endpoint.pk)).content.decode()


def test_deleting_asks_first_then_deletes_the_endpoint_and_its_deliveries(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery_of(tenant, endpoint)
    delivery_of(tenant, endpoint, "negotiation.settled")
    kept = hook(tenant, "http://127.0.0.1:9/kept", events=["intake.received"])
    kept_delivery = delivery_of(tenant, kept, "intake.received")

    confirm = as_owner.get(url("webhook-delete", pk=endpoint.pk)).content.decode()

    assert f"<h1>Delete the endpoint <code>{URL}</code>?</h1>" in confirm
    assert "its 2 deliveries are deleted with it" in confirm
    assert WebhookEndpoint.across_tenants.count() == 2

    response = as_owner.post(url("webhook-delete", pk=endpoint.pk), follow=True)

    assert response.redirect_chain == [(url("webhooks"), 302)]
    assert f"Deleted the endpoint {URL} and its deliveries." in response.content.decode()
    assert list(WebhookEndpoint.across_tenants.values_list("pk", flat=True)) == [kept.pk]
    assert list(WebhookDelivery.across_tenants.values_list("pk", flat=True)) == [kept_delivery.pk]


# Deliveries.


def test_deliveries_are_listed_newest_first_with_how_they_went(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    first = delivery_of(tenant, endpoint)
    second = delivery_of(tenant, endpoint, "negotiation.settled")
    next_at = timezone.now() + timedelta(minutes=3)
    WebhookDelivery.across_tenants.filter(pk=first.pk).update(
        status=WebhookDelivery.Status.PENDING,
        attempts=2,
        last_status_code=503,
        last_error="HTTP 503.",
        next_attempt_at=next_at,
    )
    WebhookDelivery.across_tenants.filter(pk=second.pk).update(
        status=WebhookDelivery.Status.SUCCEEDED, attempts=1, last_status_code=200, next_attempt_at=None
    )

    page = as_owner.get(url("webhook-deliveries")).content.decode()

    assert page.index(f'<tr id="delivery-{second.pk}">') < page.index(f'<tr id="delivery-{first.pk}">')
    row = page.split(f'<tr id="delivery-{first.pk}">')[1].split("</tr>")[0]
    assert f'href="{url("webhook-delivery", pk=first.pk)}"><code>run.finished</code></a>' in row
    assert f"<td><code>{URL}</code></td>" in row
    assert '<span class="badge badge-pending">pending</span>' in row
    assert "<td>2</td>" in row
    assert 'HTTP 503<p class="meta">HTTP 503.</p>' in row
    assert f'<time datetime="{next_at.isoformat()}' in row
    assert url("webhook-resend", pk=first.pk) in row
    done = page.split(f'<tr id="delivery-{second.pk}">')[1].split("</tr>")[0]
    assert '<span class="badge badge-succeeded">succeeded</span>' in done
    assert "HTTP 200" in done
    assert '{"run": "r-1"}' not in page  # bodies are on each delivery's page


def test_deliveries_filter_by_status_and_endpoint(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    other = hook(tenant, "http://127.0.0.1:9/other")
    finished = delivery_of(tenant, endpoint)
    to_other = WebhookDelivery.across_tenants.get(endpoint=other)
    settled = delivery_of(tenant, endpoint, "negotiation.settled")
    WebhookDelivery.across_tenants.filter(pk=settled.pk).update(status=WebhookDelivery.Status.FAILED)

    def listed(query: str) -> list[Any]:
        response = as_owner.get(f"{url('webhook-deliveries')}?{query}")
        assert response.status_code == 200
        return [d.pk for d in response.context["deliveries"]]

    everything = listed("")
    assert everything[0] == settled.pk
    assert set(everything) == {settled.pk, to_other.pk, finished.pk}
    assert listed("status=failed") == [settled.pk]
    assert listed(f"endpoint={endpoint.pk}") == [settled.pk, finished.pk]
    assert listed(f"endpoint={other.pk}&status=pending") == [to_other.pk]
    assert listed(f"endpoint={other.pk}&status=failed") == []


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("status=lost", "status", "Choose a status from the list."),
        ("endpoint=42", "endpoint", "Choose one of this tenant's endpoints."),
    ],
)
def test_a_bad_filter_is_shown_at_its_field_and_lists_nothing(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint, query: str, field: str, message: str
) -> None:
    delivery_of(tenant, endpoint)

    response = as_owner.get(f"{url('webhook-deliveries')}?{query}")

    assert response.status_code == 200
    assert response.context["filters"].errors == {field: [message]}
    assert list(response.context["deliveries"]) == []
    assert "These filters cannot be applied" in response.content.decode()


def test_another_tenants_endpoint_as_a_filter_is_an_error_not_its_deliveries(
    as_owner: Client, other_tenant: Tenant
) -> None:
    theirs = hook(other_tenant)
    delivery_of(other_tenant, theirs)

    response = as_owner.get(f"{url('webhook-deliveries')}?endpoint={theirs.pk}")

    assert response.context["filters"].errors == {"endpoint": ["Choose one of this tenant's endpoints."]}
    assert list(response.context["deliveries"]) == []
    assert theirs.url not in response.content.decode()


def test_the_list_shows_fifty_a_page_and_the_pager_keeps_the_filters(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    now = timezone.now()
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            tenant=tenant,
            endpoint=endpoint,
            event_type="run.finished",
            payload={},
            status=WebhookDelivery.Status.FAILED,
            window_opened_at=now,
        )
        for _ in range(51)
    )

    first = as_owner.get(f"{url('webhook-deliveries')}?status=failed")
    second = as_owner.get(f"{url('webhook-deliveries')}?status=failed&page=2")

    assert len(first.context["deliveries"]) == 50
    assert len(second.context["deliveries"]) == 1
    assert 'href="?status=failed&amp;page=2" rel="next">Older</a>' in first.content.decode()
    assert 'name="back" value="status=failed&amp;page=2"' in second.content.decode()


def test_a_delivery_shows_its_body_escaped_and_its_attempts(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint, payload={"run": "r-1", "note": "<script>alert(1)</script>"})
    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(
        attempts=2,
        window_attempts=2,
        last_status_code=500,
        last_error="HTTP 500.",
        last_response="<b>oops</b>",
        attempt_log=[
            {
                "attempt": 1,
                "at": "2026-01-01T00:00:00Z",
                "status_code": None,
                "error": "Timed out after 5 s.",
                "retry_in": 30.0,
            },
            {
                "attempt": 2,
                "at": "2026-01-01T00:00:30Z",
                "status_code": 500,
                "error": "HTTP 500.",
                "retry_in": 60.0,
            },
        ],
    )

    response = as_owner.get(url("webhook-delivery", pk=delivery.pk))

    assert response.status_code == 200
    page = response.content.decode()
    assert "<h1>Delivery of <code>run.finished</code></h1>" in page
    assert f"<code>{delivery.webhook_id}</code>" in page
    assert "<script>alert(1)</script>" not in page
    assert "&quot;note&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;," in page
    assert "  &quot;type&quot;: &quot;run.finished&quot;\n}</code></pre>" in page
    assert "<pre>&lt;b&gt;oops&lt;/b&gt;</pre>" in page
    attempts = page.split('<h2 id="attempts-heading">')[1]
    assert attempts.index('<th scope="row">2</th>') < attempts.index('<th scope="row">1</th>')
    assert '<time datetime="2026-01-01T00:00:30+00:00">' in attempts
    assert "<td>HTTP 500</td>" in attempts
    assert "<td>Timed out after 5 s.</td>" in attempts
    assert "<td>60 s</td>" in attempts
    assert url("webhook-resend", pk=delivery.pk) in page


# Re-sending.


def test_resending_makes_the_delivery_pending_and_sends_it_after_commit(
    as_owner: Client,
    tenant: Tenant,
    endpoint: WebhookEndpoint,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    delivery = delivery_of(tenant, endpoint)
    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(
        status=WebhookDelivery.Status.FAILED, attempts=7
    )

    with django_capture_on_commit_callbacks() as scheduled:
        response = as_owner.post(url("webhook-resend", pk=delivery.pk))

    assert response.status_code == 302
    assert response["Location"] == url("webhook-delivery", pk=delivery.pk)
    assert len(scheduled) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.generation, delivery.attempts, delivery.window_attempts) == (
        "pending",
        1,
        7,
        0,
    )
    page = as_owner.get(response["Location"]).content.decode()
    assert f"Re-sending the run.finished delivery ({delivery.webhook_id})." in page
    assert '<span class="badge badge-pending">pending</span>' in page


def test_resending_from_the_list_goes_back_to_it_with_its_filters_only(
    as_owner: Client, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint)

    response = as_owner.post(
        url("webhook-resend", pk=delivery.pk),
        {"back": f"status=pending&endpoint={endpoint.pk}&page=2&next=https://evil.example/"},
    )
    plain = as_owner.post(url("webhook-resend", pk=delivery.pk), {"back": ""})

    assert response["Location"] == f"{url('webhook-deliveries')}?status=pending&endpoint={endpoint.pk}&page=2"
    assert plain["Location"] == url("webhook-deliveries")


def test_a_refused_resend_is_a_message_and_changes_nothing(
    as_owner: Client,
    tenant: Tenant,
    endpoint: WebhookEndpoint,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    delivery = delivery_of(tenant, endpoint)
    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(
        claimed_until=timezone.now() + timedelta(minutes=1)
    )
    busy = rows()

    with django_capture_on_commit_callbacks() as scheduled:
        under_way = as_owner.post(url("webhook-resend", pk=delivery.pk), follow=True)

    assert scheduled == []
    assert rows() == busy
    assert (
        "Not re-sent: An attempt of this delivery is under way; resend it once that has finished."
        in under_way.content.decode()
    )

    WebhookDelivery.across_tenants.filter(pk=delivery.pk).update(claimed_until=None)
    endpoints.webhook_endpoint_update(endpoint=endpoint, active=False)
    inactive = rows()

    refused = as_owner.post(url("webhook-resend", pk=delivery.pk), follow=True)

    assert rows() == inactive
    assert (
        "Not re-sent: The endpoint of this delivery is inactive; activate it first."
        in refused.content.decode()
    )


# Tenants and roles.


def test_another_tenants_endpoint_and_delivery_are_404_and_nothing_changes(
    as_owner: Client, other_tenant: Tenant
) -> None:
    theirs = hook(other_tenant)
    delivery = delivery_of(other_tenant, theirs)
    before = rows()

    responses = [
        as_owner.post(url("webhook-active", pk=theirs.pk), {"active": "false"}),
        as_owner.get(url("webhook-rotate", pk=theirs.pk)),
        as_owner.post(url("webhook-rotate", pk=theirs.pk)),
        as_owner.get(url("webhook-delete", pk=theirs.pk)),
        as_owner.post(url("webhook-delete", pk=theirs.pk)),
        as_owner.get(url("webhook-delivery", pk=delivery.pk)),
        as_owner.post(url("webhook-resend", pk=delivery.pk)),
        # Their tenant's pages, by its slug: the owner is no member there.
        as_owner.get(url("webhooks", other_tenant)),
        as_owner.post(url("webhooks", other_tenant), {"url": URL, "events": ["run.finished"]}),
        as_owner.get(url("webhook-deliveries", other_tenant)),
    ]

    assert [r.status_code for r in responses] == [404] * len(responses)
    assert rows() == before
    listing = as_owner.get(url("webhooks")).content.decode()
    assert theirs.url not in listing
    assert list(as_owner.get(url("webhook-deliveries")).context["deliveries"]) == []


def test_a_viewer_reads_the_pages_without_their_forms_and_cannot_post(
    client: Client, viewer: AbstractUser, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint)
    client.force_login(viewer)
    before = rows()

    listing = client.get(url("webhooks"))
    deliveries = client.get(url("webhook-deliveries"))
    detail = client.get(url("webhook-delivery", pk=delivery.pk))

    assert [r.status_code for r in (listing, deliveries, detail)] == [200, 200, 200]
    assert f'<tr id="endpoint-{endpoint.pk}">' in listing.content.decode()
    assert f'<tr id="delivery-{delivery.pk}">' in deliveries.content.decode()
    for page in (listing, deliveries, detail):
        assert 'method="post" action="/t/acme/webhooks' not in page.content.decode()
    assert "Add an endpoint" not in listing.content.decode()
    posts = [
        client.post(url("webhooks"), {"url": URL, "events": ["run.finished"]}),
        client.post(url("webhook-active", pk=endpoint.pk), {"active": "false"}),
        client.post(url("webhook-rotate", pk=endpoint.pk)),
        client.post(url("webhook-delete", pk=endpoint.pk)),
        client.post(url("webhook-resend", pk=delivery.pk)),
    ]
    confirms = [
        client.get(url("webhook-rotate", pk=endpoint.pk)),
        client.get(url("webhook-delete", pk=endpoint.pk)),
    ]
    assert [r.status_code for r in posts + confirms] == [403] * 7
    assert rows() == before


def test_a_principal_gets_403_everywhere(
    client: Client, principal: AbstractUser, tenant: Tenant, endpoint: WebhookEndpoint
) -> None:
    delivery = delivery_of(tenant, endpoint)
    client.force_login(principal)
    before = rows()

    responses = [
        client.get(url("webhooks")),
        client.post(url("webhooks"), {"url": URL, "events": ["run.finished"]}),
        client.get(url("webhook-deliveries")),
        client.get(url("webhook-delivery", pk=delivery.pk)),
        client.post(url("webhook-resend", pk=delivery.pk)),
        client.post(url("webhook-active", pk=endpoint.pk), {"active": "false"}),
    ]

    assert [r.status_code for r in responses] == [403] * len(responses)
    assert rows() == before


@pytest.mark.parametrize(
    ("role", "linked"),
    [
        (Membership.Role.OWNER, True),
        (Membership.Role.OPERATOR, True),
        (Membership.Role.VIEWER, True),
        (Membership.Role.PRINCIPAL, False),
    ],
)
def test_the_nav_links_the_webhooks_for_those_who_may_read_them(
    client: Client, tenant: Tenant, role: str, linked: bool
) -> None:
    client.force_login(member(tenant, "sam", role))

    page = client.get(reverse("agents:inbox", kwargs={"tenant": "acme"})).content.decode()

    assert (f'<a href="{url("webhooks")}">Webhooks</a>' in page) is linked
