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
from django.template.defaultfilters import filesizeformat
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django.utils.html import escape

from a2a_gateway.auth import inbound_key_create
from a2a_gateway.models import InboundKey
from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from exchange.models import ExchangeProfile, PreparedExchange
from negotiations.models import Negotiation, Settlement
from parley import services
from parley.models import ApiKey, Event, Invitation, Membership, Tenant, WebhookDelivery, WebhookEndpoint
from parley.webhooks import endpoints
from representative.models import GroundingDocument
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
    # The world's agent claims no host name: verifying it is refused, and nothing is written.
    Page("agents:agent-host-name-verify", "post", OPERATORS, pk=lambda w: w.agent.pk, ok=302, changes=False),
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
    Page("negotiations:receipt", "get", EVERY_MEMBER, pk=lambda w: w.negotiation.pk),
    Page(
        "negotiations:answer",
        "post",
        THE_PARTY,
        pk=lambda w: w.parked.pk,
        data=lambda w: {"answer": "At least 1,000 a day."},
        ok=302,
    ),
    # the public face: intake owners see theirs too (tests/representative/test_intake.py); none here is one
    Page("representative:intake", "get", OPERATORS),
    Page("a2a_gateway:card", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page("representative:documents", "get", OPERATORS, pk=lambda w: w.agent.pk),
    Page(
        "representative:documents",
        "post",
        OPERATORS,
        pk=lambda w: w.agent.pk,
        data=lambda w: {"title": "Rates", "text": "From 900 EUR a day."},
        ok=302,
    ),
    Page("representative:document-edit", "get", OPERATORS, pk=lambda w: w.document.pk),
    Page(
        "representative:document-edit",
        "post",
        OPERATORS,
        pk=lambda w: w.document.pk,
        data=lambda w: {"title": "About", "text": "Changed."},
        ok=302,
    ),
    Page("representative:document-delete", "post", OPERATORS, pk=lambda w: w.document.pk, ok=302),
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
    Question.across_tenants.filter(pk=approval.pk).update(
        kind=Question.Kind.APPROVAL, tool_name="book_room", arguments={"room": "A"}
    )
    negotiation = Negotiation.objects.create(
        tenant=tenant, agent=agent, intent=question.run.intent, direction=Negotiation.Direction.OUTBOUND
    )
    # Signed (unsigned by either side here), so that it has a receipt to download.
    Settlement.objects.create(
        tenant=tenant,
        negotiation=negotiation,
        outcome=Settlement.Outcome.AGREED,
        basis=Settlement.Basis.REFERENCE,
        signed_settlement={"taskId": f"{prefix}-signed"},
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
    webhook = endpoints.webhook_endpoint_create(
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
    return {m.__name__: list(m._default_manager.order_by("pk").values()) for m in models}


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


# --- A form too large to read ------------------------------------------------------------------------

# Past DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB): Django cannot read the body, and answered a bare 400.
TOO_LARGE = {"text": "x" * 3_000_000}
# The forms that say it at the form instead (parley.pages.TooLargeFormMixin): the operator's
# configuration forms (tested in tests/agents/test_config_pages.py) and the grounding documents'.
AT_THE_FORM = frozenset(
    {
        *(f"agents:{kind}-{verb}" for kind in ("agent", "tool", "model") for verb in ("create", "edit")),
        "representative:documents",
        "representative:document-edit",
    }
)


def too_large_said(response: Any) -> str:
    """The message a too-large POST was answered with, for the size it sent."""
    sent = filesizeformat(int(response.wsgi_request.META["CONTENT_LENGTH"]))
    return (
        f"Not done: this form sent {sent}, more than the 2.5\xa0MB a form may send, so nothing in it "
        "could be read, and nothing was changed. Shorten the longest text and send it again."
    )


def served_by(page: Page) -> str:
    return next(role for role in (OWNER, OPERATOR, PRINCIPAL) if role in page.allowed)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if p.method == "post" and p.name not in AT_THE_FORM], ids=page_id
)
def test_every_dashboard_form_too_large_to_read_is_answered_with_a_page_and_a_message(
    client: Client, people: dict[str, AbstractUser], world: World, page: Page
) -> None:
    """Not Django's bare "Bad Request (400)": the page the form is on, when the view has one, else a
    page saying so with a way back; the message either way; nothing changed. (The operator's
    configuration forms show it at the form: tests/agents/test_config_pages.py.)"""
    client.force_login(people[served_by(page)])
    before = stored()
    back = f"{ORIGIN}{reverse('agents:inbox', kwargs={'tenant': 'acme'})}"

    response = client.post(page.url(world), TOO_LARGE, HTTP_REFERER=back)

    assert response.status_code == 413
    html = response.content.decode()
    assert f'<li class="error">{escape(too_large_said(response))}</li>' in html
    if response.templates[0].name == "413.html":
        assert f'<a href="{back}">Back to the page the form was on</a>' in html
    assert stored() == before


@pytest.mark.parametrize(
    ("name", "page_template"),
    [
        ("tenant:invitation-create", "413.html"),
        ("tenant:webhooks", "parley/webhooks.html"),
        ("tenant:api-keys", "parley/api_keys.html"),
        ("agents:start", "agents/start.html"),
        ("agents:question-answer", "413.html"),
        ("negotiations:answer", "413.html"),
    ],
)
def test_each_kind_of_form_is_answered_with_its_own_page(
    client: Client, people: dict[str, AbstractUser], world: World, name: str, page_template: str
) -> None:
    [page] = [p for p in PAGES if p.name == name and p.method == "post"]
    client.force_login(people[served_by(page)])

    response = client.post(page.url(world), TOO_LARGE)

    assert response.status_code == 413
    assert response.templates[0].name == page_template
    if page_template == "413.html":  # no Referer: back home, which leads to the inbox
        assert '<a href="/">Back to the page the form was on</a>' in response.content.decode()


@pytest.mark.parametrize("name", ["representative:documents", "representative:document-edit"])
def test_a_grounding_document_too_large_to_read_is_refused_at_its_form(
    client: Client, people: dict[str, AbstractUser], world: World, name: str
) -> None:
    """Its page as a GET shows it, the message at the form (the document's text is what grows), and
    the form carries the limit for static/parley/forms.js to refuse it before sending."""
    [page] = [p for p in PAGES if p.name == name and p.method == "post"]
    client.force_login(people[OPERATOR])
    before = stored()

    response = client.post(page.url(world), TOO_LARGE)

    assert response.status_code == 413
    sent = filesizeformat(int(response.wsgi_request.META["CONTENT_LENGTH"]))
    assert response.context["too_large"] == (
        f"Not saved: this form sent {sent}, more than the 2.5\xa0MB a form may send, so nothing in "
        "it could be read: the form below is as it was before your changes. Shorten the longest text "
        "and save again."
    )
    html = response.content.decode()
    assert '<div class="form-error" role="alert" id="too-large">' in html
    assert 'data-max-bytes="2621440"' in html
    assert 'src="/static/parley/forms.js"' in html
    assert stored() == before


def test_asked_by_htmx_the_answer_is_the_message_alone(
    client: Client, people: dict[str, AbstractUser], world: World
) -> None:
    """static/parley/live.js shows it where the page's messages go; the form keeps what was typed."""
    client.force_login(people[PRINCIPAL])
    before = stored()
    url = reverse("agents:question-answer", kwargs={"tenant": "acme", "pk": world.question.pk})

    response = client.post(url, TOO_LARGE, HTTP_HX_REQUEST="true")

    assert response.status_code == 413
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    sent = filesizeformat(int(response.wsgi_request.META["CONTENT_LENGTH"]))
    assert response.content.decode() == (
        f"Not done: this form sent {sent}, more than the 2.5\xa0MB a form may send, so nothing in it "
        "could be read. Shorten the longest text and send it again."
    )
    assert stored() == before


def test_a_too_large_form_is_still_only_for_the_roles_its_page_serves(
    client: Client, people: dict[str, AbstractUser], world: World
) -> None:
    """The page answered is the page's GET, with its roles: an operator gets the API keys page's 403,
    a stranger the tenant's 404."""
    url = reverse("tenant:api-keys", kwargs={"tenant": "acme"})
    client.force_login(people[OPERATOR])
    assert client.post(url, TOO_LARGE).status_code == 403
    client.force_login(people[STRANGER])
    assert client.post(url, TOO_LARGE).status_code == 404


@pytest.mark.parametrize(
    ("name", "logged_in"), [("tenant-create", True), ("organisations", True), ("login", False)]
)
def test_the_pages_outside_a_tenant_answer_the_same(
    client: Client, people: dict[str, AbstractUser], name: str, logged_in: bool
) -> None:
    """The host API, whose views are CSRF-exempt, answers its own (tests/api/test_requests.py)."""
    if logged_in:
        client.force_login(people[OWNER])
    before = stored()

    response = client.post(reverse(name), TOO_LARGE)

    assert response.status_code == 413
    assert f'<li class="error">{escape(too_large_said(response))}</li>' in response.content.decode()
    assert stored() == before
