"""Agent Exchange through the host API: an agent's profile, and the requests it sends.

What a request holds (the delegation token, protected values, the instruction) goes in once and
never comes back out; every wrong field is named; another tenant's agent is a 404 on every route,
and nothing changes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent
from exchange import outbound, wire
from exchange.models import ExchangeProfile, OutboundExchange
from parley.models import Tenant
from tests.conftest import PRIVATE
from tests.exchange.issuer import ISSUER, Issuer, request_for

pytestmark = pytest.mark.django_db

URL = "https://recipient.example/a2a/globex/helpdesk"
SHOWN = [
    "id",
    "url",
    "exchange_id",
    "reference",
    "prepared_by_host",
    "status",
    "receipt",
    "error",
    "created_at",
    "finished_at",
]


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def request_(issuer: Issuer) -> dict[str, Any]:
    return request_for(URL, issuer.token(URL))


def profile_path(agent: Agent) -> str:
    return f"/api/v1/agents/{agent.pk}/exchange-profile"


def exchanges_path(agent: Agent) -> str:
    return f"/api/v1/agents/{agent.pk}/exchanges"


def fields_of(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    body = response.json()["error"]
    assert body["code"] == "invalid"
    fields: dict[str, list[str]] = body["fields"]
    return fields


# --- The profile ------------------------------------------------------------------------------------


def test_a_profile_is_set_read_and_advertised_on_the_card(
    api: APIClient, agent: Agent, issuer: Issuer
) -> None:
    assert api.get(profile_path(agent)).status_code == 404

    put = api.put(
        profile_path(agent), {"mode": "required", "issuer": ISSUER, "jwks": issuer.jwks}, format="json"
    )

    assert put.status_code == 200, put.content
    shown = put.json()
    assert {k: shown[k] for k in ("agent", "mode", "issuer", "audience", "scope", "jwks")} == {
        "agent": str(agent.pk),
        "mode": "required",
        "issuer": ISSUER,
        "audience": "",
        "scope": "agent-exchange",
        "jwks": issuer.jwks,
    }
    assert api.get(profile_path(agent)).json() == shown
    card = api.get(f"/api/v1/agents/{agent.pk}/card").json()["card"]
    [extension] = [e for e in card["capabilities"]["extensions"] if e["uri"] == wire.EXTENSION_URI]
    assert extension["required"] is True
    assert extension["params"]["preparation"]["mediaType"] == wire.PREPARATION_MEDIA_TYPE


def test_a_put_replaces_the_whole_profile(api: APIClient, agent: Agent, issuer: Issuer) -> None:
    first = {
        "mode": "required",
        "issuer": ISSUER,
        "audience": "https://a.example",
        "scope": "x",
        "jwks": issuer.jwks,
    }
    api.put(profile_path(agent), first, format="json")

    put = api.put(
        profile_path(agent), {"issuer": "https://other.example", "jwks": issuer.jwks}, format="json"
    )

    assert put.status_code == 200, put.content
    profile = ExchangeProfile.across_tenants.get(agent=agent)
    assert (profile.mode, profile.issuer, profile.audience, profile.scope) == (
        "optional",
        "https://other.example",
        "",
        "agent-exchange",
    )


def private_jwks(issuer: Issuer) -> dict[str, Any]:
    import jwt

    private = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(issuer.key))
    return {"keys": [{**private, "kid": "k"}]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"jwks": "__good__"}, "issuer"),
        ({"issuer": ISSUER}, "jwks"),
        ({"issuer": ISSUER, "jwks": "__private__"}, "jwks"),
        ({"issuer": ISSUER, "jwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}}, "jwks"),
        ({"issuer": ISSUER, "jwks": {"keys": []}}, "jwks"),
        ({"issuer": ISSUER, "jwks": {"keys": [5]}}, "jwks"),
        ({"issuer": ISSUER, "jwks": {"keys": [None]}}, "jwks"),
        ({"issuer": ISSUER, "jwks": "__good__", "mode": "sometimes"}, "mode"),
        ({"issuer": "", "jwks": "__good__"}, "issuer"),
    ],
)
def test_a_profile_that_cannot_work_is_refused_at_its_field(
    api: APIClient, agent: Agent, issuer: Issuer, body: dict[str, Any], field: str
) -> None:
    keys = {"__good__": issuer.jwks, "__private__": private_jwks(issuer)}
    given = {k: keys.get(v, v) if isinstance(v, str) else v for k, v in body.items()}

    fields = fields_of(api.put(profile_path(agent), given, format="json"))

    assert list(fields) == [field]
    assert not ExchangeProfile.across_tenants.exists()


def test_a_profile_is_deleted(api: APIClient, agent: Agent, issuer: Issuer) -> None:
    api.put(profile_path(agent), {"issuer": ISSUER, "jwks": issuer.jwks}, format="json")

    assert api.delete(profile_path(agent)).status_code == 204

    assert not ExchangeProfile.across_tenants.exists()
    missing = api.get(profile_path(agent))
    assert missing.status_code == 404
    assert "no Agent Exchange profile" in missing.json()["error"]["message"]


@pytest.mark.parametrize("scopes", [("read",), ("read", "write")])
def test_changing_a_profile_needs_the_admin_scope(
    tenant: Tenant,
    agent: Agent,
    issuer: Issuer,
    key_for: Callable[..., str],
    client_for: Callable[[str], APIClient],
    scopes: tuple[str, ...],
) -> None:
    client = client_for(key_for(tenant, scopes=scopes))

    put = client.put(profile_path(agent), {"issuer": ISSUER, "jwks": issuer.jwks}, format="json")

    assert put.status_code == 403
    assert "'admin'" in put.json()["error"]["message"]
    assert not ExchangeProfile.across_tenants.exists()


# --- Sending ----------------------------------------------------------------------------------------


def test_a_request_is_taken_and_never_shown_again(
    api: APIClient, agent: Agent, request_: dict[str, Any]
) -> None:
    posted = api.post(exchanges_path(agent), {"url": URL, "request": request_}, format="json")

    assert posted.status_code == 202, posted.content
    shown = posted.json()
    assert list(shown) == SHOWN
    assert (shown["url"], shown["exchange_id"], shown["status"]) == (URL, request_["exchangeId"], "queued")
    assert shown["reference"] == wire.reference_of(request_)
    assert (shown["prepared_by_host"], shown["receipt"], shown["error"], shown["finished_at"]) == (
        False,
        None,
        "",
        None,
    )
    row = OutboundExchange.across_tenants.get()
    assert row.request == request_  # kept for the worker, until it is sent
    listed = api.get(exchanges_path(agent))
    one = api.get(f"{exchanges_path(agent)}/{row.pk}")
    assert listed.json()["results"] == [shown]
    assert one.json() == shown
    for response in (posted, listed, one):
        text = response.content.decode()
        for secret in (request_["delegation"]["accessToken"], "hunter2-secret", request_["instruction"]):
            assert secret not in text


def test_prepared_by_host_is_recorded(api: APIClient, agent: Agent, request_: dict[str, Any]) -> None:
    posted = api.post(
        exchanges_path(agent), {"url": URL, "request": request_, "prepared_by_host": True}, format="json"
    )

    assert posted.status_code == 202, posted.content
    assert posted.json()["prepared_by_host"] is True
    assert OutboundExchange.across_tenants.get().prepared_by_host is True


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"url": "ftp://recipient.example/a"}, "url", "Enter a valid URL."),
        ({"url": "recipient.example"}, "url", "Enter a valid URL."),
        ({"url": None}, "url", "This field may not be null."),
        ({"request": None}, "request", "This field may not be null."),
        ({"request": {"exchangeId": "x"}}, "request", "request: 'recipient' is a required property"),
        ({"request": "__no_token__"}, "request", "request.delegation: 'accessToken' is a required property"),
        ({"request": "__extra__"}, "request", "'extra' was unexpected"),
        ({"prepared_by_host": "perhaps"}, "prepared_by_host", "Must be a valid boolean."),
    ],
)
def test_what_is_not_valid_is_refused_naming_the_field(
    api: APIClient, agent: Agent, request_: dict[str, Any], body: dict[str, Any], field: str, says: str
) -> None:
    crafted = {"__no_token__": {**request_, "delegation": {}}, "__extra__": {**request_, "extra": 1}}
    given = {"url": URL, "request": request_, **body}
    if isinstance(given["request"], str):
        given["request"] = crafted[given["request"]]

    fields = fields_of(api.post(exchanges_path(agent), given, format="json"))

    assert list(fields) == [field]
    assert any(says in message for message in fields[field]), fields
    assert not OutboundExchange.across_tenants.exists()


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://127.0.0.1:47123/a2a/globex/helpdesk", "127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://localhost:47123/a2a/globex/helpdesk", "localhost"),
    ],
)
def test_a_recipient_on_a_private_address_is_refused_at_url_and_nothing_is_queued(
    settings: Any, api: APIClient, agent: Agent, issuer: Issuer, url: str, host: str
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False  # as in production

    fields = fields_of(
        api.post(
            exchanges_path(agent), {"url": url, "request": request_for(url, issuer.token(url))}, format="json"
        )
    )

    assert fields == {"url": [f"The host '{host}' {PRIVATE}."]}
    assert not OutboundExchange.across_tenants.exists()


def test_an_exchange_id_sent_before_is_refused_at_request(
    api: APIClient, agent: Agent, request_: dict[str, Any]
) -> None:
    api.post(exchanges_path(agent), {"url": URL, "request": request_}, format="json")

    fields = fields_of(api.post(exchanges_path(agent), {"url": URL, "request": request_}, format="json"))

    assert list(fields) == ["request"]
    assert fields["request"][0].startswith("request.exchangeId: this agent already sent an exchange")
    assert OutboundExchange.across_tenants.count() == 1


def test_a_retry_with_the_same_idempotency_key_sends_nothing_more(
    api: APIClient, agent: Agent, request_: dict[str, Any]
) -> None:
    key = {"HTTP_IDEMPOTENCY_KEY": str(uuid.uuid4())}
    first = api.post(exchanges_path(agent), {"url": URL, "request": request_}, format="json", **key)

    again = api.post(exchanges_path(agent), {"url": URL, "request": request_}, format="json", **key)

    assert again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert OutboundExchange.across_tenants.count() == 1


def test_sending_needs_the_write_scope(
    tenant: Tenant,
    agent: Agent,
    request_: dict[str, Any],
    key_for: Callable[..., str],
    client_for: Callable[[str], APIClient],
) -> None:
    reader = client_for(key_for(tenant, scopes=("read",)))

    posted = reader.post(exchanges_path(agent), {"url": URL, "request": request_}, format="json")

    assert posted.status_code == 403
    assert not OutboundExchange.across_tenants.exists()


def test_lists_are_per_agent_newest_first_and_filtered(
    api: APIClient, agent: Agent, seller: Agent, tenant: Tenant, issuer: Issuer
) -> None:
    colleague = Agent.objects.create(tenant=tenant, slug="ana", name="Ana's agent")
    sent = [
        outbound.exchange_send_start(agent=agent, url=URL, request=request_for(URL, issuer.token(URL)))
        for _ in range(3)
    ]
    outbound.exchange_send_start(agent=colleague, url=URL, request=request_for(URL, issuer.token(URL)))
    OutboundExchange.across_tenants.filter(pk=sent[0].pk).update(status=OutboundExchange.Status.FAILED)

    listed = api.get(exchanges_path(agent), {"page_size": 2})
    failed = api.get(exchanges_path(agent), {"status": "failed"})
    by_id = api.get(exchanges_path(agent), {"exchange_id": sent[1].exchange_id})

    assert [row["id"] for row in listed.json()["results"]] == [sent[2].pk, sent[1].pk]
    assert listed.json()["next"]
    assert [row["id"] for row in failed.json()["results"]] == [sent[0].pk]
    assert [row["id"] for row in by_id.json()["results"]] == [sent[1].pk]
    # An exchange is found only under the agent that sent it.
    assert api.get(f"{exchanges_path(colleague)}/{sent[0].pk}").status_code == 404


# --- Isolation --------------------------------------------------------------------------------------


def state() -> list[Any]:
    return [
        sorted(ExchangeProfile.across_tenants.values_list("pk", "agent_id", "issuer", "updated_at")),
        sorted(OutboundExchange.across_tenants.values_list("pk", "agent_id", "status", "updated_at")),
    ]


def test_another_tenants_agent_is_404_on_every_route_and_nothing_changes(
    api: APIClient, other_api: APIClient, agent: Agent, issuer: Issuer, request_: dict[str, Any]
) -> None:
    api.put(profile_path(agent), {"issuer": ISSUER, "jwks": issuer.jwks}, format="json")
    exchange = outbound.exchange_send_start(agent=agent, url=URL, request=request_)
    before = state()
    other = request_for(URL, issuer.token(URL))
    calls = [
        ("GET", profile_path(agent), None),
        ("PUT", profile_path(agent), {"issuer": "https://intruder.example", "jwks": issuer.jwks}),
        ("DELETE", profile_path(agent), None),
        ("GET", exchanges_path(agent), None),
        ("POST", exchanges_path(agent), {"url": URL, "request": other}),
        ("GET", f"{exchanges_path(agent)}/{exchange.pk}", None),
    ]

    for method, path, body in calls:
        response = other_api.generic(
            method, path, data=json.dumps(body) if body else "", content_type="application/json"
        )

        assert response.status_code == 404, (method, path, response.content)
        assert response.json() == {"error": {"code": "not_found", "message": "Not found."}}
    assert state() == before


def test_another_tenants_exchange_is_404_under_ones_own_agent(
    other_api: APIClient, agent: Agent, seller: Agent, request_: dict[str, Any]
) -> None:
    exchange = outbound.exchange_send_start(agent=agent, url=URL, request=request_)

    response = other_api.get(f"{exchanges_path(seller)}/{exchange.pk}")

    assert response.status_code == 404
    assert other_api.get(exchanges_path(seller)).json()["results"] == []
