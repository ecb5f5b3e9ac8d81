"""The operator's page for an agent's Agent Exchange profile: turn it on, change it, turn it off, and
the requests prepared for it — never the requests themselves, which hold tokens."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents import addresses
from agents.models import Agent, Intent, Run
from exchange import wire
from exchange.models import ExchangeProfile, PreparedExchange
from parley.models import Membership, Tenant
from tests.a2a_gateway.test_config_pages import as_member, page
from tests.exchange.issuer import ISSUER, Issuer, request_for

PRIVATE_JWK = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(Issuer().key))


@pytest.fixture
def ops(client: Client, operator: AbstractUser) -> Client:
    client.force_login(operator)
    return client


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


def on(agent: Agent, issuer: Issuer, **values: Any) -> ExchangeProfile:
    """``agent`` taking Agent Exchange requests signed by ``issuer``."""
    return ExchangeProfile.objects.create(
        tenant=agent.tenant, agent=agent, issuer=ISSUER, jwks=issuer.jwks, **values
    )


def posted(issuer: Issuer, **fields: str) -> dict[str, str]:
    """The form as an operator fills it in for ``issuer``'s keys; ``fields`` override."""
    return {
        "mode": "required",
        "issuer": ISSUER,
        "audience": "",
        "scope": "agent-exchange",
        "jwks": json.dumps(issuer.jwks),
        **fields,
    }


def stored(agent: Agent) -> dict[str, Any] | None:
    """Everything stored of ``agent``'s profile, re-read; None when it has none."""
    return ExchangeProfile.across_tenants.filter(agent=agent).values().first()


def prepared(agent: Agent, issuer: Issuer, *, ago: int = 0, **fields: Any) -> PreparedExchange:
    """A request prepared for ``agent`` ``ago`` minutes ago, as the preparation endpoint stores it."""
    request = request_for(addresses.agent_url(agent), issuer.token(addresses.agent_url(agent)))
    row = PreparedExchange.objects.create(
        tenant=agent.tenant,
        agent=agent,
        caller="key:abc123",
        exchange_id=request["exchangeId"],
        reference=wire.reference_of(request),
        request=request,
        expires_at=timezone.now() + timedelta(minutes=10),
        **fields,
    )
    PreparedExchange.across_tenants.filter(pk=row.pk).update(
        created_at=timezone.now() - timedelta(minutes=ago)
    )
    return row


# --- The page ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_agent_without_a_profile_shows_it_off_where_callers_prepare_and_the_defaults(
    ops: Client, agent: Agent
) -> None:
    response = ops.get(page("exchange", agent.pk))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Agent Exchange is off: the card does not list the extension" in html
    assert f"<code>{addresses.agent_url(agent)}/agent-exchange/preparation</code>" in html
    assert "<code>urn:parley:extension:agent-exchange:v1</code>" in html
    assert page("exchange-off", agent.pk) not in html
    form = response.context["form"]
    assert (form["mode"].value(), form["issuer"].value(), form["scope"].value(), form["jwks"].value()) == (
        "optional",
        None,
        "agent-exchange",
        None,
    )
    assert '<label for="id_jwks">JSON Web Key Set:</label>' in html
    assert "No requests prepared yet." in html


@pytest.mark.django_db
def test_the_agent_page_and_the_agent_nav_link_it_for_operators_only(
    client: Client, tenant: Tenant, agent: Agent
) -> None:
    link = f'<a href="{page("exchange", agent.pk)}">Agent Exchange</a>'
    agent_page = reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})

    as_member(client, tenant, Membership.Role.OPERATOR)
    assert link in client.get(agent_page).content.decode()
    assert link in client.get(page("keys", agent.pk)).content.decode()
    as_member(client, tenant, Membership.Role.PRINCIPAL)
    assert link not in client.get(agent_page).content.decode()


@pytest.mark.django_db
def test_a_valid_profile_is_saved_and_the_card_lists_the_extension(
    ops: Client, agent: Agent, issuer: Issuer
) -> None:
    response = ops.post(page("exchange", agent.pk), posted(issuer, audience="https://tomas.example/a2a"))

    assert response.status_code == 302
    assert response["Location"] == page("exchange", agent.pk)
    profile = ExchangeProfile.across_tenants.get(agent=agent)
    assert (
        profile.tenant_id,
        profile.mode,
        profile.issuer,
        profile.audience,
        profile.scope,
        profile.jwks,
    ) == (
        agent.tenant_id,
        "required",
        ISSUER,
        "https://tomas.example/a2a",
        "agent-exchange",
        issuer.jwks,
    )
    shown = ops.get(page("exchange", agent.pk))
    html = shown.content.decode()
    assert (
        "Saved the Agent Exchange profile of Tomas&#x27;s agent: it takes Agent Exchange requests (required)."
        in (html)
    )
    assert "Agent Exchange is on (required): the card lists the extension and the agent takes" in html
    assert page("exchange-off", agent.pk) in html
    form = shown.context["form"]
    assert (form["mode"].value(), form["issuer"].value(), form["audience"].value()) == (
        "required",
        ISSUER,
        "https://tomas.example/a2a",
    )
    assert json.loads(form["jwks"].value()) == issuer.jwks
    card = json.loads(ops.get(page("card", agent.pk)).context["card_json"])
    [extension] = [e for e in card["capabilities"]["extensions"] if e["uri"] == wire.EXTENSION_URI]
    assert extension["required"] is True


@pytest.mark.django_db
def test_a_saved_profile_is_changed_in_place(ops: Client, agent: Agent, issuer: Issuer) -> None:
    profile = on(agent, issuer, mode=ExchangeProfile.Mode.REQUIRED)
    other = Issuer(kid="party-key-2")

    response = ops.post(page("exchange", agent.pk), posted(other, mode="optional", scope="bookings"))

    assert response.status_code == 302
    profile.refresh_from_db()
    assert (profile.mode, profile.scope, profile.jwks) == ("optional", "bookings", other.jwks)
    assert ExchangeProfile.across_tenants.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("jwks", "message"),
    [
        (
            "{not json",
            "JSON Web Key Set: not valid JSON (Expecting property name enclosed in double quotes, "
            "line 1 column 2).",
        ),
        ('{"keys": [NaN]}', "JSON Web Key Set: not valid JSON (NaN is not a JSON number)."),
        ("", "JSON Web Key Set: paste the key set."),
        ('{"keys": []}', 'A JSON Web Key Set is an object with a non-empty "keys" list.'),
        (
            json.dumps({"keys": [PRIVATE_JWK]}),
            "keys[0] holds private key material; give the public key only.",
        ),
    ],
    ids=["not JSON", "NaN", "empty", "no keys", "a private key"],
)
def test_a_jwks_that_is_not_json_or_no_key_set_is_refused_at_its_field_and_nothing_is_saved(
    ops: Client, agent: Agent, issuer: Issuer, jwks: str, message: str
) -> None:
    first = ops.post(page("exchange", agent.pk), posted(issuer, jwks=jwks))

    assert first.status_code == 200
    assert first.context["form"].errors == {"jwks": [message]}
    html = first.content.decode()
    assert 'href="#id_jwks"' in html
    assert "Agent Exchange is off" in html
    assert not ExchangeProfile.across_tenants.exists()

    on(agent, issuer)
    before = stored(agent)

    again = ops.post(
        page("exchange", agent.pk), posted(Issuer(kid="party-key-2"), jwks=jwks, mode="required")
    )

    assert again.status_code == 200
    assert again.context["form"].errors == {"jwks": [message]}
    assert stored(agent) == before


@pytest.mark.django_db
def test_turning_it_off_deletes_the_profile(ops: Client, agent: Agent, issuer: Issuer) -> None:
    on(agent, issuer)

    assert ops.get(page("exchange-off", agent.pk)).status_code == 405
    assert stored(agent) is not None

    response = ops.post(page("exchange-off", agent.pk))

    assert response.status_code == 302
    assert response["Location"] == page("exchange", agent.pk)
    assert stored(agent) is None
    html = ops.get(page("exchange", agent.pk)).content.decode()
    assert "Agent Exchange is off for Tomas&#x27;s agent: its card no longer lists the extension." in html
    assert "Agent Exchange is off: the card does not list the extension" in html
    card = json.loads(ops.get(page("card", agent.pk)).context["card_json"])
    assert wire.EXTENSION_URI not in [e["uri"] for e in card["capabilities"].get("extensions", [])]


# --- The requests prepared ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_table_lists_prepared_requests_and_never_their_tokens_or_protected_values(
    ops: Client, agent: Agent, intent: Intent, issuer: Issuer
) -> None:
    on(agent, issuer)
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent)
    waiting = prepared(agent, issuer, ago=1)
    done = prepared(agent, issuer, ago=2)
    PreparedExchange.across_tenants.filter(pk=done.pk).update(
        executed_at=timezone.now(), run=run, request=None
    )
    lapsed = prepared(agent, issuer, ago=3)
    PreparedExchange.across_tenants.filter(pk=lapsed.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )

    response = ops.get(page("exchange", agent.pk))

    html = response.content.decode()
    assert [row.exchange_id for row in response.context["prepared"]] == [
        waiting.exchange_id,
        done.exchange_id,
        lapsed.exchange_id,
    ]
    assert '<th scope="col">Exchange id</th>' in html
    assert f'<th scope="row"><code>{waiting.exchange_id}</code></th>' in html
    assert "<td><code>key:abc123</code></td>" in html
    assert html.count("<td>waiting</td>") == 1
    assert html.count("<td>expired, never run</td>") == 1
    run_link = reverse("agents:run", kwargs={"tenant": "acme", "pk": run.pk})
    assert html.count(f'<a href="{run_link}">') == 1
    for row in (waiting, lapsed):
        assert row.request is not None
        assert row.request["delegation"]["accessToken"] not in html
        assert row.reference not in html
    assert "hunter2-secret" not in html
    assert "tomas@example.com" not in html


@pytest.mark.django_db
def test_the_table_shows_the_newest_fifty(ops: Client, agent: Agent, issuer: Issuer) -> None:
    rows = [prepared(agent, issuer, ago=minutes) for minutes in range(51)]

    response = ops.get(page("exchange", agent.pk))

    assert [row.exchange_id for row in response.context["prepared"]] == [r.exchange_id for r in rows[:50]]
    assert rows[50].exchange_id not in response.content.decode()


# --- Who may ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_another_tenants_agent_is_not_found_and_unchanged(
    ops: Client, agent: Agent, seller: Agent, issuer: Issuer
) -> None:
    on(seller, issuer)
    before = stored(seller)

    for tenant in ("acme", "globex"):
        assert ops.get(page("exchange", seller.pk, tenant)).status_code == 404
        assert ops.post(page("exchange", seller.pk, tenant), posted(Issuer())).status_code == 404
        assert ops.post(page("exchange-off", seller.pk, tenant)).status_code == 404

    assert stored(seller) == before
    assert ExchangeProfile.across_tenants.count() == 1


@pytest.mark.django_db
def test_a_principal_is_refused_and_nothing_changes(
    client: Client, principal: AbstractUser, agent: Agent, issuer: Issuer
) -> None:
    client.force_login(principal)
    on(agent, issuer)
    before = stored(agent)

    assert client.get(page("exchange", agent.pk)).status_code == 403
    assert client.post(page("exchange", agent.pk), posted(Issuer(), mode="required")).status_code == 403
    assert client.post(page("exchange-off", agent.pk)).status_code == 403

    assert stored(agent) == before
