"""The operator's pages for an agent's public face: its card preview, grounding documents and inbound keys.

The card preview is compared with what the real gateway serves: the gateway
app in this process (:class:`InProcessGateway`), and the live stack's web
process for a card on the agent's own host name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import create_signature_verifier
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import NON_FIELD_ERRORS
from django.test import Client
from django.urls import reverse
from jwt import PyJWK

from a2a_gateway import auth
from a2a_gateway.models import InboundKey
from a2a_gateway.signing import signing_key_create
from agents.models import Agent
from parley import edge, keys
from parley.models import Membership, Tenant
from representative.models import GroundingDocument
from representative.selectors import face_on
from tests.a2a_gateway.conftest import proved_host_name
from tests.a2a_gateway.servers import InProcessGateway
from tests.agents.test_config_pages import page_form
from tests.conftest import LiveStack, make_user, wait_until

HOST = "tomas.example.com"


# The grounding documents' pages are the representative face's; the others the gateway's.
FACE_PAGES = {"documents", "document-edit", "document-delete"}


def page(name: str, pk: Any, tenant: str = "acme") -> str:
    """The page ``name`` about ``pk`` (an agent's, a document's or a key's) in ``tenant``'s URLs."""
    app = "representative" if name in FACE_PAGES else "a2a_gateway"
    return reverse(f"{app}:{name}", kwargs={"tenant": tenant, "pk": pk})


def as_member(client: Client, tenant: Tenant, role: str) -> Client:
    user = make_user(f"{role}-1")
    Membership.objects.create(user=user, tenant=tenant, role=role)
    client.force_login(user)
    return client


def caller_of(agent: Agent, key: str) -> auth.Caller:
    """Who the gateway's own check says presents ``key`` to ``agent``'s endpoint: the agent and
    its keys read as the edge reads them for a POST, then authenticated."""
    scope = {
        "type": "http",
        "method": "POST",
        "headers": [(b"x-api-key", key.encode())],
        "client": ("127.0.0.1", 50000),
    }

    async def check() -> auth.Caller:
        found, live_keys = await auth.agent_at(agent.tenant.slug, agent.slug, scope)
        assert found == agent
        return await auth.authenticate(found, scope, live_keys)

    return async_to_sync(check)()


@pytest.fixture
def ops(client: Client, operator: AbstractUser) -> Client:
    client.force_login(operator)
    return client


@pytest.fixture
def document(agent: Agent) -> GroundingDocument:
    return GroundingDocument.objects.create(
        tenant=agent.tenant, agent=agent, title="Rates", text="Tomas pays up to 1,100 EUR a day."
    )


@pytest.fixture
def key(agent: Agent) -> InboundKey:
    return auth.inbound_key_create(agent=agent, name="Idris")[0]


@pytest.fixture
def foreign_document(seller: Agent) -> GroundingDocument:
    return GroundingDocument.objects.create(
        tenant=seller.tenant, agent=seller, title="Floor", text="Private."
    )


@pytest.fixture
def foreign_key(seller: Agent) -> InboundKey:
    return auth.inbound_key_create(agent=seller, name="Someone")[0]


def state(*rows: GroundingDocument | InboundKey) -> list[dict[str, Any]]:
    """Everything stored of each row, re-read."""
    fresh = [type(row).across_tenants.get(pk=row.pk) for row in rows]
    return [{f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields} for row in fresh]


# --- Who may see what --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Membership.Role.OPERATOR, Membership.Role.OWNER])
def test_every_page_renders_for_owners_and_operators(
    client: Client, tenant: Tenant, agent: Agent, document: GroundingDocument, role: str
) -> None:
    as_member(client, tenant, role)

    for url in (
        page("card", agent.pk),
        page("documents", agent.pk),
        page("document-edit", document.pk),
        page("keys", agent.pk),
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert f'<a href="{reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})}">' in (
            response.content.decode()
        )


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Membership.Role.PRINCIPAL, Membership.Role.VIEWER])
def test_principals_and_viewers_are_refused_and_nothing_changes(
    client: Client, tenant: Tenant, agent: Agent, document: GroundingDocument, key: InboundKey, role: str
) -> None:
    as_member(client, tenant, role)
    before = state(document, key)

    for url in (page("card", agent.pk), page("documents", agent.pk), page("keys", agent.pk)):
        assert client.get(url).status_code == 403, url
    for url, data in (
        (page("documents", agent.pk), {"title": "New", "text": "Text."}),
        (page("document-edit", document.pk), {"title": "Changed", "text": "Changed."}),
        (page("document-delete", document.pk), {}),
        (page("keys", agent.pk), {"name": "Mallory"}),
        (page("key-revoke", key.pk), {}),
    ):
        assert client.post(url, data).status_code == 403, url

    assert state(document, key) == before
    assert (GroundingDocument.across_tenants.count(), InboundKey.across_tenants.count()) == (1, 1)


@pytest.mark.django_db
def test_another_tenants_agent_document_and_key_are_not_found_and_unchanged(
    ops: Client,
    agent: Agent,
    seller: Agent,
    foreign_document: GroundingDocument,
    foreign_key: InboundKey,
) -> None:
    before = state(foreign_document, foreign_key)

    # Their rows through our tenant's URLs, and through theirs, where the operator is no member.
    for name in ("card", "documents", "keys"):
        assert ops.get(page(name, seller.pk)).status_code == 404, name
        assert ops.get(page(name, seller.pk, "globex")).status_code == 404, name
    assert ops.get(page("document-edit", foreign_document.pk)).status_code == 404
    for url, data in (
        (page("documents", seller.pk), {"title": "Planted", "text": "Planted."}),
        (page("keys", seller.pk), {"name": "Mallory"}),
        (page("document-edit", foreign_document.pk), {"title": "X", "text": "X"}),
        (page("document-delete", foreign_document.pk), {}),
        (page("document-delete", foreign_document.pk, "globex"), {}),
        (page("key-revoke", foreign_key.pk), {}),
        (page("key-revoke", foreign_key.pk, "globex"), {}),
    ):
        assert ops.post(url, data).status_code == 404, url

    assert state(foreign_document, foreign_key) == before
    assert (GroundingDocument.across_tenants.count(), InboundKey.across_tenants.count()) == (1, 1)


# --- Grounding documents -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_documents_are_added_edited_and_deleted(ops: Client, agent: Agent) -> None:
    assert not face_on(agent)

    added = ops.post(page("documents", agent.pk), {"title": "Rates", "text": "Up to 1,100 EUR a day."})

    assert added.status_code == 302
    assert added["Location"] == page("documents", agent.pk)
    document = GroundingDocument.across_tenants.get(agent=agent)
    assert (document.tenant_id, document.title, document.text) == (
        agent.tenant_id,
        "Rates",
        "Up to 1,100 EUR a day.",
    )
    listed = ops.get(page("documents", agent.pk)).content.decode()
    assert "Added the document “Rates”." in listed
    assert "Up to 1,100 EUR a day." in listed
    # The agent now answers visitors, and its card says so.
    assert face_on(agent)
    card = json.loads(ops.get(page("card", agent.pk)).context["card_json"])
    assert [s["id"] for s in card["skills"]] == ["negotiate", "ask"]

    edit = ops.get(page("document-edit", document.pk))
    assert edit.context["form"]["title"].value() == "Rates"
    edited = ops.post(page("document-edit", document.pk), {"title": "Day rates", "text": "Up to 1,200."})
    assert edited.status_code == 302
    assert edited["Location"] == page("documents", agent.pk)
    document.refresh_from_db()
    assert (document.title, document.text) == ("Day rates", "Up to 1,200.")

    deleted = ops.post(page("document-delete", document.pk))
    assert deleted.status_code == 302
    assert not GroundingDocument.across_tenants.filter(agent=agent).exists()
    assert "Deleted the document “Day rates”." in ops.get(page("documents", agent.pk)).content.decode()


@pytest.mark.django_db
def test_a_document_without_a_title_or_text_is_refused_at_its_fields(
    ops: Client, agent: Agent, document: GroundingDocument
) -> None:
    before = state(document)

    added = ops.post(page("documents", agent.pk), {"title": "", "text": ""})
    edited = ops.post(page("document-edit", document.pk), {"title": "Rates", "text": ""})

    assert added.status_code == 200
    assert added.context["form"].errors == {
        "title": ["Title: give the document one."],
        "text": ["Text: the document is empty."],
    }
    assert 'href="#id_title"' in added.content.decode()
    assert edited.context["form"].errors == {"text": ["Text: the document is empty."]}
    assert state(document) == before
    assert GroundingDocument.across_tenants.count() == 1


# --- Inbound keys ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_key_is_shown_once_stored_hashed_and_authenticates(ops: Client, agent: Agent) -> None:
    agent.inbound_auth = Agent.InboundAuth.API_KEY
    agent.save()

    response = ops.post(page("keys", agent.pk), {"name": "Idris Haddad"})

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    shown = response.context["shown"]
    key = InboundKey.across_tenants.get(agent=agent)
    prefix, _, secret = shown.partition(".")
    assert (key.name, key.prefix, key.tenant_id) == ("Idris Haddad", prefix, agent.tenant_id)
    assert key.secret_hash == keys.secret_hash(secret) != secret
    assert f'value="{shown}"' in response.content.decode()
    assert caller_of(agent, shown) == auth.Caller(name=f"key:{prefix}", key_id=key.pk)

    later = ops.get(page("keys", agent.pk)).content.decode()
    assert secret not in later
    assert f"<code>{prefix}</code>" in later
    assert "Idris Haddad" in later
    key.refresh_from_db()
    assert key.last_used_at is not None  # the check above used it


@pytest.mark.django_db
def test_a_revoked_key_no_longer_authenticates(ops: Client, agent: Agent) -> None:
    agent.inbound_auth = Agent.InboundAuth.API_KEY
    agent.save()
    shown = ops.post(page("keys", agent.pk), {"name": "Idris"}).context["shown"]
    key = InboundKey.across_tenants.get(agent=agent)
    assert caller_of(agent, shown).is_authenticated

    response = ops.post(page("key-revoke", key.pk))

    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    with pytest.raises(edge.Unauthenticated, match=r"^The API key is not valid for this agent\.$"):
        caller_of(agent, shown)
    listed = ops.get(page("keys", agent.pk)).content.decode()
    assert f"Revoked the key {key.prefix} of Idris: it no longer works." in listed
    assert "revoked <time" in listed


@pytest.mark.django_db
def test_a_key_for_nobody_is_refused(ops: Client, agent: Agent) -> None:
    response = ops.post(page("keys", agent.pk), {"name": "  "})

    assert response.status_code == 200
    assert response.context["form"].errors == {"name": ["Held by: say who gets the key."]}
    assert "shown" not in response.context
    assert not InboundKey.across_tenants.exists()


# --- The card's overrides, on the agent's edit page ------------------------------------------------


def edit_url(agent: Agent) -> str:
    return reverse("agents:agent-edit", kwargs={"tenant": agent.tenant.slug, "pk": agent.pk})


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["card_fields", "card_skills"])
def test_null_card_overrides_are_refused_at_their_field_not_reported_as_a_name_race(
    ops: Client, agent: Agent, field: str
) -> None:
    """JSON null is neither an object nor a list; saved, the NOT NULL column would refuse it."""
    data = page_form(ops, edit_url(agent))
    data[field] = ["null"]

    response = ops.post(edit_url(agent), data)

    assert response.status_code == 200
    errors = response.context["form"].errors
    assert errors[field] == ["Give a JSON value, not null."]
    assert NON_FIELD_ERRORS not in errors
    agent.refresh_from_db()
    assert (agent.card_fields, agent.card_skills) == ({}, [])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"documentationUrl": "javascript:alert(document.cookie)"},
            "documentationUrl: give an http or https URL, not 'javascript:alert(document.cookie)'.",
        ),
        (
            {"iconUrl": "data:image/svg+xml,<svg/>"},
            "iconUrl: give an http or https URL, not 'data:image/svg+xml,<svg/>'.",
        ),
        ({"iconUrl": "JavaScript:void(0)"}, "iconUrl: give an http or https URL, not 'JavaScript:void(0)'."),
        ({"iconUrl": "https:///no-host"}, "iconUrl: give an http or https URL, not 'https:///no-host'."),
        (
            {"provider": {"organization": "Acme", "url": "ftp://acme.example"}},
            "provider.url: give an http or https URL, not 'ftp://acme.example'.",
        ),
        (
            {"capabilities": {"extensions": [{"uri": "javascript:alert(1)"}]}},
            "capabilities.extensions[0].uri: give an http or https URL, not 'javascript:alert(1)'.",
        ),
    ],
)
def test_a_card_link_that_is_not_a_web_url_is_refused(
    ops: Client, agent: Agent, override: dict[str, Any], message: str
) -> None:
    """Counterparties' tools show and follow the card's links: a script link would run in them."""
    agent.party_id = ""  # no party extension for the extensions override to replace
    agent.save()
    data = page_form(ops, edit_url(agent))
    data["card_fields"] = [json.dumps(override)]

    response = ops.post(edit_url(agent), data)

    assert response.status_code == 200
    assert response.context["form"].errors["card_fields"] == [message]
    agent.refresh_from_db()
    assert agent.card_fields == {}


@pytest.mark.django_db
def test_web_links_on_the_card_are_accepted(ops: Client, agent: Agent) -> None:
    agent.party_id = ""
    agent.save()
    override = {
        "documentationUrl": "http://acme.example/docs",
        "iconUrl": "https://acme.example/icon.png",
        "provider": {"organization": "Acme", "url": "https://acme.example"},
        "capabilities": {"extensions": [{"uri": "https://ext.example/v1"}]},
    }
    data = page_form(ops, edit_url(agent))
    data["card_fields"] = [json.dumps(override)]

    assert ops.post(edit_url(agent), data).status_code == 302

    agent.refresh_from_db()
    assert agent.card_fields == override


# --- The card, as the gateway serves it -----------------------------------------------------------


@pytest.fixture
def gateway(settings: Any) -> Iterator[InProcessGateway]:
    """The gateway app served from this process; the cards name its origin."""
    with InProcessGateway() as served:
        settings.PUBLIC_BASE_URL = served.origin
        yield served


def previewed(client: Client, agent: Agent) -> tuple[str, dict[str, Any]]:
    """The preview page's card URL and its card, as the page shows them."""
    response = client.get(page("card", agent.pk))
    assert response.status_code == 200
    html = response.content.decode()
    text, url = response.context["card_json"], response.context["card_url"]
    assert f'<a href="{url}" id="card-url">{url}</a>' in html
    assert json.dumps(json.loads(text), indent=2).replace('"', "&quot;").replace("'", "&#x27;") in html
    return url, json.loads(text)


@pytest.fixture
def configured(agent: Agent) -> Agent:
    """Tomas's agent with more on its card than the defaults: a key scheme and an operator override."""
    agent.inbound_auth = Agent.InboundAuth.API_KEY
    agent.card_fields = {"documentationUrl": "https://acme.example/tomas"}
    agent.description = "Hires for Acme — fractional CFOs."
    agent.save()
    return agent


@pytest.mark.django_db(transaction=True)
def test_the_card_preview_is_the_card_the_gateway_serves(
    ops: Client, configured: Agent, gateway: InProcessGateway
) -> None:
    url, card = previewed(ops, configured)

    served = httpx.get(url, timeout=30)

    assert url == f"{gateway.origin}/a2a/acme/tomas/.well-known/agent-card.json"
    assert served.status_code == 200
    assert json.dumps(card).encode() == served.content  # the same bytes, but for the indentation
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"
    assert card["documentationUrl"] == "https://acme.example/tomas"


@pytest.mark.django_db(transaction=True)
def test_a_signed_card_preview_signs_what_the_gateway_signs_and_verifies(
    ops: Client, configured: Agent, gateway: InProcessGateway
) -> None:
    signing_key_create(tenant=configured.tenant)
    url, card = previewed(ops, configured)

    served = httpx.get(url, timeout=30).json()

    # ECDSA signatures are randomised: everything they sign is the same.
    assert {k: v for k, v in card.items() if k != "signatures"} == {
        k: v for k, v in served.items() if k != "signatures"
    }
    assert len(card["signatures"]) == len(served["signatures"]) == 1
    assert card["signatures"][0]["protected"] == served["signatures"][0]["protected"]

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert jku == f"{gateway.origin}/a2a/acme/tomas/.well-known/jwks.json"
        [key] = [k for k in httpx.get(jku, timeout=10).json()["keys"] if k["kid"] == kid]
        return PyJWK(key)

    create_signature_verifier(key_provider, ["ES256"])(parse_agent_card(card))
    assert "Signed" in ops.get(page("card", configured.pk)).content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_card_on_the_agents_own_host_name_is_previewed_as_served(
    ops: Client, live_stack: LiveStack, agent: Agent
) -> None:
    proved_host_name(agent, HOST)

    def served() -> httpx.Response | None:
        response = httpx.get(
            f"{live_stack.url}/.well-known/agent-card.json", headers={"Host": HOST}, timeout=30
        )
        return response if response.status_code == 200 else None

    response = wait_until(served, what="the web process to serve the new host name")
    preview = ops.get(page("card", agent.pk))

    assert preview.context["host_card_url"] == f"http://{HOST}/.well-known/agent-card.json"
    host_card = json.loads(preview.context["host_card_json"])
    assert json.dumps(host_card).encode() == response.content
    assert host_card["url"] == f"http://{HOST}/"
    main_card = json.loads(preview.context["card_json"])
    assert main_card["url"] == f"{live_stack.url}/a2a/acme/tomas"
    assert json.dumps(main_card).encode() == httpx.get(preview.context["card_url"], timeout=30).content
