"""Who may open which dashboard page: every page under ``/t/<tenant>/``, for every role.

One row of :data:`PAGES` per page and method: the roles it serves and what a
served request answers. A member in any other role gets 403, a non-member 404,
and neither changes anything; a served POST changes something (it did its work,
not just redirect with an error) unless its row posts invalid input on purpose
(``changes=False``: the form's own tests cover saving). Adding a dashboard page
means adding its row: :func:`test_every_dashboard_page_has_a_row` fails until
it has one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from a2a_gateway.auth import inbound_key_create
from a2a_gateway.models import GroundingDocument, InboundKey
from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from exchange.models import ExchangeProfile, PreparedExchange
from negotiations.models import Negotiation
from parley import services, webhooks
from parley.models import ApiKey, Event, Invitation, Membership, Tenant, WebhookDelivery, WebhookEndpoint
from tests.agents.pages import waiting_question
from tests.exchange.issuer import ISSUER, Issuer
from tests.parley.tenancy import member

OWNER = "owner"
OPERATOR = "operator"
PRINCIPAL = "principal"  # the party of the tenant's agent
VIEWER = "viewer"
STRANGER = "stranger"  # a member of another tenant only
ROLES = (OWNER, OPERATOR, PRINCIPAL, VIEWER, STRANGER)

EVERY_MEMBER = frozenset({OWNER, OPERATOR, PRINCIPAL, VIEWER})
OPERATORS = frozenset({OWNER, OPERATOR})
THE_PARTY = OPERATORS | {PRINCIPAL}
OWNERS = frozenset({OWNER})
READERS = OPERATORS | {VIEWER}  # the webhook pages: everyone but a party reads them
JWKS = Issuer().jwks  # the keys of every world's Agent Exchange profile
ORIGIN = "http://testserver"


@dataclass(frozen=True)
class World:
    """One tenant's things a page can be about."""

    tenant: Tenant
    agent: Agent
    run: Run
    question: Question
    approval: Question
    negotiation: Negotiation
    parked: Negotiation  # an inbound one waiting on the party
    spare: Membership  # a viewer nobody depends on: one to change or remove
    placeholder: Membership  # a placeholder principal, to hand over to its person
    invitation: Invitation  # an open one
    key: ApiKey
    tool: Tool
    endpoint: ModelEndpoint
    document: GroundingDocument
    inbound_key: InboundKey
    webhook: WebhookEndpoint
    delivery: WebhookDelivery


@dataclass(frozen=True)
class Page:
    """``name`` requested with ``method``: served (``ok``) for the ``allowed`` roles.

    ``pk`` picks the object of the URL from a :class:`World`; ``data`` the POST body;
    ``changes`` whether a served POST changes something.
    """

    name: str
    method: str
    allowed: frozenset[str]
    pk: Callable[[World], Any] | None = None
    data: Callable[[World], dict[str, Any]] = field(default=lambda w: {})
    ok: int = 200
    changes: bool = True

    def url(self, world: World, tenant: Tenant | None = None) -> str:
        kwargs: dict[str, Any] = {"tenant": (tenant or world.tenant).slug}
        if self.pk is not None:
            kwargs["pk"] = self.pk(world)
        return reverse(self.name, kwargs=kwargs)

    def request(self, client: Client, url: str, world: World) -> Any:
        if self.method == "get":
            return client.get(url)
        return client.post(url, self.data(world))


PAGES = [
    # agents
    Page("agents:inbox", "get", EVERY_MEMBER),
    Page("agents:start", "get", THE_PARTY),
    Page("agents:start", "post", THE_PARTY, changes=False),
    Page("agents:run-list", "get", EVERY_MEMBER),
    Page("agents:run", "get", EVERY_MEMBER, pk=lambda w: w.run.pk),
    Page("agents:agent", "get", EVERY_MEMBER, pk=lambda w: w.agent.pk),
    Page("agents:system-message", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page(
        "agents:question-answer",
        "post",
        THE_PARTY,
        pk=lambda w: w.question.pk,
        data=lambda w: {"answer": "Up to 1,100 a day."},
        ok=302,
    ),
    Page(
        "agents:approval-decide",
        "post",
        THE_PARTY,
        pk=lambda w: w.approval.pk,
        data=lambda w: {"decision": "reject", "reason": "Not that room."},
        ok=302,
    ),
    Page("agents:run-cancel", "post", THE_PARTY, pk=lambda w: w.run.pk, ok=302),
    Page(
        "agents:run-start",
        "post",
        THE_PARTY,
        pk=lambda w: w.agent.pk,
        data=lambda w: {"statement": "Find office space.", "task": "Shortlist three."},
        ok=302,
    ),
    # agents: configuration (empty POSTs: refused by the form, nothing saved)
    Page("agents:agent-list", "get", EVERY_MEMBER),
    Page("agents:agent-create", "get", OPERATORS),
    Page("agents:agent-create", "post", OPERATORS, changes=False),
    Page("agents:agent-edit", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page("agents:agent-edit", "post", OPERATORS, pk=lambda w: w.agent.pk, changes=False),
    Page("agents:tool-list", "get", OPERATORS),
    Page("agents:tool-create", "get", OPERATORS),
    Page("agents:tool-create", "post", OPERATORS, changes=False),
    Page("agents:tool-edit", "get", OPERATORS, pk=lambda w: w.tool.pk),
    Page("agents:tool-edit", "post", OPERATORS, pk=lambda w: w.tool.pk, changes=False),
    Page("agents:model-list", "get", OPERATORS),
    Page("agents:model-create", "get", OPERATORS),
    Page("agents:model-create", "post", OPERATORS, changes=False),
    Page("agents:model-edit", "get", OPERATORS, pk=lambda w: w.endpoint.pk),
    Page("agents:model-edit", "post", OPERATORS, pk=lambda w: w.endpoint.pk, changes=False),
    # negotiations
    Page("negotiations:list", "get", EVERY_MEMBER),
    Page("negotiations:detail", "get", EVERY_MEMBER, pk=lambda w: w.negotiation.pk),
    Page("negotiations:prompt", "get", OPERATORS, pk=lambda w: w.negotiation.pk),
    Page(
        "negotiations:answer",
        "post",
        THE_PARTY,
        pk=lambda w: w.parked.pk,
        data=lambda w: {"answer": "At least 1,000 a day."},
        ok=302,
    ),
    # the public face: intake owners see theirs too (tests/a2a_gateway/test_intake.py); none here is one
    Page("a2a_gateway:intake", "get", OPERATORS),
    Page("a2a_gateway:card", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page("a2a_gateway:documents", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page(
        "a2a_gateway:documents",
        "post",
        OPERATORS,
        pk=lambda w: w.agent.pk,
        data=lambda w: {"title": "Rates", "text": "From 900 EUR a day."},
        ok=302,
    ),
    Page("a2a_gateway:document-edit", "get", OPERATORS, pk=lambda w: w.document.pk),
    Page(
        "a2a_gateway:document-edit",
        "post",
        OPERATORS,
        pk=lambda w: w.document.pk,
        data=lambda w: {"title": "About", "text": "Changed."},
        ok=302,
    ),
    Page("a2a_gateway:document-delete", "post", OPERATORS, pk=lambda w: w.document.pk, ok=302),
    Page("a2a_gateway:keys", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page("a2a_gateway:keys", "post", OPERATORS, pk=lambda w: w.agent.pk, data=lambda w: {"name": "Globex"}),
    Page("a2a_gateway:key-revoke", "post", OPERATORS, pk=lambda w: w.inbound_key.pk, ok=302),
    Page("a2a_gateway:exchange", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page(
        "a2a_gateway:exchange",
        "post",
        OPERATORS,
        pk=lambda w: w.agent.pk,
        data=lambda w: {"mode": "required", "issuer": ISSUER, "scope": "bookings", "jwks": json.dumps(JWKS)},
        ok=302,
    ),
    Page("a2a_gateway:exchange-off", "post", OPERATORS, pk=lambda w: w.agent.pk, ok=302),
    # the tenant
    Page("tenant:members", "get", OPERATORS),
    Page(
        "tenant:invitation-create",
        "post",
        OWNERS,
        data=lambda w: {"invite-email": "nia@example.com", "invite-role": "viewer"},
    ),
    Page("tenant:invitation-revoke", "post", OWNERS, pk=lambda w: w.invitation.pk, ok=302),
    Page(
        "tenant:member-role",
        "post",
        OWNERS,
        pk=lambda w: w.spare.pk,
        data=lambda w: {"role": "operator"},
        ok=302,
    ),
    Page("tenant:member-remove", "get", OWNERS, pk=lambda w: w.spare.pk),
    Page("tenant:member-remove", "post", OWNERS, pk=lambda w: w.spare.pk, ok=302),
    Page("tenant:member-hand-over", "get", OWNERS, pk=lambda w: w.placeholder.pk),
    Page(
        "tenant:member-hand-over",
        "post",
        OWNERS,
        pk=lambda w: w.placeholder.pk,
        data=lambda w: {"email": f"{w.tenant.slug}-person@example.com"},
    ),
    Page("tenant:api-keys", "get", OWNERS),
    Page("tenant:api-keys", "post", OWNERS, data=lambda w: {"name": "ci", "scopes": ["read"]}),
    Page("tenant:api-key-revoke", "get", OWNERS, pk=lambda w: w.key.pk),
    Page("tenant:api-key-revoke", "post", OWNERS, pk=lambda w: w.key.pk, ok=302),
    Page("tenant:webhooks", "get", READERS),
    Page(
        "tenant:webhooks",
        "post",
        OPERATORS,
        data=lambda w: {"url": "http://127.0.0.1:9/new", "events": ["run.finished"]},
    ),
    Page(
        "tenant:webhook-active",
        "post",
        OPERATORS,
        pk=lambda w: w.webhook.pk,
        data=lambda w: {"active": "false"},
        ok=302,
    ),
    Page("tenant:webhook-rotate", "get", OPERATORS, pk=lambda w: w.webhook.pk),
    Page("tenant:webhook-rotate", "post", OPERATORS, pk=lambda w: w.webhook.pk),
    Page("tenant:webhook-delete", "get", OPERATORS, pk=lambda w: w.webhook.pk),
    Page("tenant:webhook-delete", "post", OPERATORS, pk=lambda w: w.webhook.pk, ok=302),
    Page("tenant:webhook-deliveries", "get", READERS),
    Page("tenant:webhook-delivery", "get", READERS, pk=lambda w: w.delivery.pk),
    Page("tenant:webhook-resend", "post", OPERATORS, pk=lambda w: w.delivery.pk, ok=302),
]


def page_id(page: Page) -> str:
    return f"{page.method.upper()} {page.name}"


def build_world(tenant: Tenant, *, party: AbstractUser, owner: AbstractUser, prefix: str) -> World:
    """An agent of ``party`` with a run waiting on a question, one waiting on an approval, a
    negotiation, a grounding document, an inbound key and an Agent Exchange profile; a spare member,
    a placeholder member, an open invitation, an API key, a tool, a model endpoint, and a webhook
    endpoint with a delivery."""
    agent = Agent.objects.create(
        tenant=tenant, slug=f"{prefix}-agent", name=f"{prefix} agent", principal=party, terms="amount"
    )
    question = waiting_question(
        agent, Intent.objects.create(tenant=tenant, agent=agent, statement="Hire a CFO.")
    )
    approval = waiting_question(
        agent, Intent.objects.create(tenant=tenant, agent=agent, statement="Book a room."), text="May it?"
    )
    Question.objects.filter(pk=approval.pk).update(
        kind=Question.Kind.APPROVAL, tool_name="book_room", arguments={"room": "A"}
    )
    negotiation = Negotiation.objects.create(
        tenant=tenant, agent=agent, intent=question.run.intent, direction=Negotiation.Direction.OUTBOUND
    )
    parked = Negotiation.objects.create(
        tenant=tenant,
        agent=agent,
        direction=Negotiation.Direction.INBOUND,
        task_id=f"{prefix}-task",
        status=Negotiation.Status.WAITING,
        parked_question="Your floor?",
    )
    spare = member(tenant, f"{prefix}-spare", Membership.Role.VIEWER)
    key, _ = services.api_key_create(tenant=tenant, name=f"{prefix} key", scopes=["read"], user=owner)  # type: ignore[arg-type]
    webhook = webhooks.webhook_endpoint_create(
        tenant=tenant, url=f"http://127.0.0.1:9/{prefix}", events=["run.finished"]
    )
    delivery = WebhookDelivery.objects.create(
        tenant=tenant, endpoint=webhook, event_type="run.finished", window_opened_at=timezone.now()
    )
    ExchangeProfile.objects.create(tenant=tenant, agent=agent, issuer=ISSUER, jwks=JWKS)
    return World(
        tenant=tenant,
        agent=agent,
        run=question.run,
        question=question,
        approval=approval,
        negotiation=negotiation,
        parked=parked,
        spare=Membership.objects.get(user=spare, tenant=tenant),
        placeholder=Membership.objects.get(
            user=services.placeholder_create(tenant=tenant, username=f"{prefix}.stand-in"), tenant=tenant
        ),
        invitation=services.invitation_create(
            tenant=tenant,
            email=f"{prefix}-newcomer@example.com",
            role="viewer",
            user=owner,
            origin=ORIGIN,  # type: ignore[arg-type]
        ).invitation,
        key=key,
        tool=Tool.objects.create(tenant=tenant, name="lookup", description="", kind=Tool.Kind.BUILTIN),
        endpoint=ModelEndpoint.objects.create(
            tenant=tenant, name="house", base_url="https://models.example/v1", upstream_model="house-1"
        ),
        document=GroundingDocument.objects.create(tenant=tenant, agent=agent, title="About", text="We hire."),
        inbound_key=inbound_key_create(agent=agent, name="Partner")[0],
        webhook=webhook,
        delivery=delivery,
    )


@pytest.fixture
def people(tenant: Tenant, other_tenant: Tenant) -> dict[str, AbstractUser]:
    """A user per role of ``acme``; the stranger is an owner of ``globex``."""
    return {
        OWNER: member(tenant, "ona", Membership.Role.OWNER),
        OPERATOR: member(tenant, "olga", Membership.Role.OPERATOR),
        PRINCIPAL: member(tenant, "tomas", Membership.Role.PRINCIPAL),
        VIEWER: member(tenant, "vera", Membership.Role.VIEWER),
        STRANGER: member(other_tenant, "gus", Membership.Role.OWNER),
    }


@pytest.fixture
def world(tenant: Tenant, people: dict[str, AbstractUser]) -> World:
    return build_world(tenant, party=people[PRINCIPAL], owner=people[OWNER], prefix="acme")


@pytest.fixture
def their_world(other_tenant: Tenant, people: dict[str, AbstractUser]) -> World:
    party = member(other_tenant, "idris", Membership.Role.PRINCIPAL)
    return build_world(other_tenant, party=party, owner=people[STRANGER], prefix="globex")


def stored() -> dict[str, list[dict[str, Any]]]:
    """Every row a dashboard page could change."""
    models = (
        *(get_user_model(), Membership, Invitation, ApiKey, Event),
        *(Agent, Intent, Run, Question, Message, Tool, ModelEndpoint),
        *(Negotiation, GroundingDocument, InboundKey, WebhookEndpoint, WebhookDelivery),
        *(ExchangeProfile, PreparedExchange),
    )
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in models}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_each_role_gets_what_its_row_says(
    client: Client, people: dict[str, AbstractUser], world: World, page: Page, role: str
) -> None:
    client.force_login(people[role])
    before = stored()

    response = page.request(client, page.url(world), world)

    expected = 404 if role == STRANGER else page.ok if role in page.allowed else 403
    assert response.status_code == expected
    if page.method == "post" and expected == page.ok and page.changes:
        assert stored() != before
    else:
        assert stored() == before


@pytest.mark.parametrize("page", [p for p in PAGES if p.pk is not None], ids=page_id)
def test_another_tenants_object_is_404_even_to_an_owner(
    client: Client, people: dict[str, AbstractUser], world: World, their_world: World, page: Page
) -> None:
    client.force_login(people[OWNER])
    before = stored()

    response = page.request(client, page.url(their_world, tenant=world.tenant), their_world)

    assert response.status_code == 404
    assert stored() == before


def dashboard_page_names() -> set[str]:
    """The names of every URL under ``t/<slug:tenant>/``, with their namespace."""
    names = set()
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver) and str(entry.pattern) == "t/<slug:tenant>/":
            names |= {f"{entry.namespace}:{p.name}" for p in entry.url_patterns if isinstance(p, URLPattern)}
    return names


def test_every_dashboard_page_has_a_row() -> None:
    assert dashboard_page_names() == {p.name for p in PAGES}
