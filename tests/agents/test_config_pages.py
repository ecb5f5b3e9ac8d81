"""The operator's configuration pages: agents, tools and model endpoints.

Forms are read from the rendered page and posted back as a browser would
(:class:`PageForm`), so what a page shows is what it saves. Roles: owners and
operators configure; a principal or a viewer gets a 403; another tenant's row
is a 404; a refused save names the field and changes nothing.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from agents.config_views import is_unique_violation
from agents.models import Agent, ModelEndpoint, Tool
from parley.models import Membership, Tenant
from tests.agents.pages import member

SCHEMA = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
# Nested far deeper than json.loads can recurse: it raises RecursionError, not JSONDecodeError.
DEEP_OBJECT = '{"a": ' * 50_000 + "1" + "}" * 50_000


class PageForm(HTMLParser):
    """The fields of a page's ``<form class="config">`` as a browser submits them: text inputs and
    textareas as shown (a textarea's first newline dropped), checked boxes only, each select's
    selected option (else its first)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._in_form = False
        self._select: str | None = None
        self._options: list[tuple[str, bool]] = []
        self._textarea: str | None = None
        self._text: list[str] = []
        self.feed(html)

    def _add(self, name: str, value: str) -> None:
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and "config" in (a.get("class") or "").split():
            self._in_form = True
        if not self._in_form:
            return
        name = a.get("name")
        if tag == "input" and name and "disabled" not in a:
            kind = a.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self._add(name, a.get("value") or "on")
            elif kind not in ("submit", "button"):
                self._add(name, a.get("value") or "")
        elif tag == "select" and name:
            self._select, self._options = name, []
        elif tag == "option" and self._select is not None:
            self._options.append((a.get("value") or "", "selected" in a))
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False
        elif tag == "select" and self._select is not None:
            chosen = [value for value, selected in self._options if selected] or [self._options[0][0]]
            self._add(self._select, chosen[0])
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            text = "".join(self._text)
            self._add(self._textarea, text[1:] if text.startswith("\n") else text)
            self._textarea = None


def page_form(client: Client, url: str) -> dict[str, list[str]]:
    response = client.get(url)
    assert response.status_code == 200
    return PageForm(response.content.decode()).data


def url(name: str, tenant: Tenant | str = "acme", **kwargs: Any) -> str:
    slug = tenant if isinstance(tenant, str) else tenant.slug
    return reverse(f"agents:{name}", kwargs={"tenant": slug, **kwargs})


def snapshot(row: Agent | Tool | ModelEndpoint) -> dict[str, Any]:
    """Everything stored of ``row`` (an agent's tools by id), to tell that nothing changed."""
    fresh = type(row).objects.get(pk=row.pk)
    stored = {f.attname: getattr(fresh, f.attname) for f in fresh._meta.concrete_fields}
    if isinstance(fresh, Agent):
        stored["tools"] = sorted(fresh.tools.values_list("pk", flat=True))
    return stored


def errors_of(response: Any, field: str) -> list[str]:
    assert response.status_code == 200, response.status_code
    return list(response.context["form"].errors.get(field, []))


@pytest.fixture
def ops(client: Client, operator: AbstractUser) -> Client:
    client.force_login(operator)
    return client


@pytest.fixture
def ask_tool(tenant: Tenant) -> Tool:
    return Tool.objects.create(
        tenant=tenant, name="ask_user", description="Ask the party.", kind=Tool.Kind.BUILTIN
    )


@pytest.fixture
def lookup(tenant: Tenant) -> Tool:
    return Tool.objects.create(
        tenant=tenant,
        name="lookup",
        description="Look an order up.",
        parameters=SCHEMA,
        kind=Tool.Kind.HOST,
        url="https://host.example/lookup",
        secret="s3cret-value-never-shown",
    )


@pytest.fixture
def house(tenant: Tenant) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        tenant=tenant,
        name="house",
        base_url="https://llm.example/v1",
        api_key="sk-house-key-never-shown",
        upstream_model="house-1",
        currency="EUR",
    )


@pytest.fixture
def backup(tenant: Tenant) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        tenant=tenant, name="backup", base_url="https://llm2.example/v1", upstream_model="b-1", currency="EUR"
    )


@pytest.fixture
def foreign_tool(other_tenant: Tenant) -> Tool:
    return Tool.objects.create(
        tenant=other_tenant, name="ask_user", description="Theirs.", kind=Tool.Kind.BUILTIN
    )


@pytest.fixture
def foreign_endpoint(other_tenant: Tenant) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        tenant=other_tenant, name="theirs", base_url="https://x.example/v1", upstream_model="x", api_key="k"
    )


@pytest.fixture
def stranger(other_tenant: Tenant) -> AbstractUser:
    """A member of another tenant only."""
    return member(other_tenant, "gus", Membership.Role.OPERATOR)


# --- Who may see what --------------------------------------------------------------------------------


def operator_pages(agent: Agent, tool: Tool, endpoint: ModelEndpoint) -> list[str]:
    return [
        url("agent-create"),
        url("agent-edit", pk=agent.pk),
        url("tool-list"),
        url("tool-create"),
        url("tool-edit", pk=tool.pk),
        url("model-list"),
        url("model-create"),
        url("model-edit", pk=endpoint.pk),
    ]


@pytest.mark.parametrize("role", [Membership.Role.OPERATOR, Membership.Role.OWNER])
def test_every_page_renders_for_owners_and_operators(
    client: Client, tenant: Tenant, agent: Agent, lookup: Tool, house: ModelEndpoint, role: str
) -> None:
    client.force_login(member(tenant, "sam", role))

    for page in [url("agent-list"), *operator_pages(agent, lookup, house)]:
        response = client.get(page)
        assert response.status_code == 200, page
        assert b"<h1>" in response.content


@pytest.mark.parametrize("role", [Membership.Role.PRINCIPAL, Membership.Role.VIEWER])
def test_principals_and_viewers_are_refused_and_nothing_changes(
    client: Client, tenant: Tenant, agent: Agent, lookup: Tool, house: ModelEndpoint, role: str
) -> None:
    client.force_login(member(tenant, "sam", role))
    before = [snapshot(agent), snapshot(lookup), snapshot(house)]

    for page in operator_pages(agent, lookup, house):
        assert client.get(page).status_code == 403, page
        assert client.post(page, {"name": "x", "slug": "x"}).status_code == 403, page

    assert [snapshot(agent), snapshot(lookup), snapshot(house)] == before
    assert Agent.objects.count() == 1
    assert Tool.objects.count() == 1
    assert ModelEndpoint.objects.count() == 1


def test_another_tenants_rows_are_not_found_and_unchanged(
    ops: Client, seller: Agent, foreign_tool: Tool, foreign_endpoint: ModelEndpoint
) -> None:
    before = [snapshot(seller), snapshot(foreign_tool), snapshot(foreign_endpoint)]
    pages = [
        url("agent-edit", pk=seller.pk),
        url("tool-edit", pk=foreign_tool.pk),
        url("model-edit", pk=foreign_endpoint.pk),
    ]

    for page in pages:
        assert ops.get(page).status_code == 404, page
        assert ops.post(page, {"name": "taken", "slug": "taken", "secret": "on"}).status_code == 404, page
    # Nor through the other tenant's own URLs: the operator is not its member.
    assert ops.get(url("agent-edit", tenant="globex", pk=seller.pk)).status_code == 404
    assert ops.get(url("agent-list", tenant="globex")).status_code == 404

    assert [snapshot(seller), snapshot(foreign_tool), snapshot(foreign_endpoint)] == before


@pytest.mark.parametrize(("role", "operates"), [("operator", True), ("principal", False), ("viewer", False)])
def test_every_member_sees_the_agents_and_only_operators_the_links_to_change_them(
    client: Client, tenant: Tenant, agent: Agent, seller: Agent, role: str, operates: bool
) -> None:
    client.force_login(member(tenant, "sam", role))

    response = client.get(url("agent-list"))

    html = response.content.decode()
    assert response.status_code == 200
    assert f'href="{url("agent", pk=agent.pk)}">Tomas&#x27;s agent</a>' in html
    assert seller.name not in html
    assert (f'href="{url("agent-create")}">New agent</a>' in html) is operates
    assert (f'href="{url("agent-edit", pk=agent.pk)}"' in html) is operates
    assert f'<a href="{url("agent-list")}" aria-current="page">Agents</a>' in html


@pytest.mark.parametrize(("role", "operates"), [("operator", True), ("owner", True), ("principal", False)])
def test_the_agent_page_links_the_operator_pages(
    client: Client, tenant: Tenant, agent: Agent, role: str, operates: bool
) -> None:
    client.force_login(member(tenant, "sam", role))

    html = client.get(url("agent", pk=agent.pk)).content.decode()

    links = {
        "Edit": url("agent-edit", pk=agent.pk),
        "Card preview": reverse("a2a_gateway:card", kwargs={"tenant": "acme", "pk": agent.pk}),
        "Preview its system message": url("system-message", pk=agent.pk),
        "Grounding documents": reverse("a2a_gateway:documents", kwargs={"tenant": "acme", "pk": agent.pk}),
        "Inbound keys": reverse("a2a_gateway:keys", kwargs={"tenant": "acme", "pk": agent.pk}),
        "Agent Exchange": reverse("a2a_gateway:exchange", kwargs={"tenant": "acme", "pk": agent.pk}),
    }
    for text, href in links.items():
        assert (f'<a href="{href}">{text}</a>' in html) is operates, text
    assert ('aria-label="Operator"' in html) is operates


# --- Creating and editing an agent ---------------------------------------------------------------


def test_an_agent_is_created_with_every_field_group_and_round_trips_through_its_edit_page(
    ops: Client,
    tenant: Tenant,
    principal: AbstractUser,
    ask_tool: Tool,
    lookup: Tool,
    house: ModelEndpoint,
    backup: ModelEndpoint,
) -> None:
    data = page_form(ops, url("agent-create"))
    assert data["actions-INITIAL_FORMS"] == ["4"]  # the default vocabulary, ready to edit
    data.update(
        {
            # Identity
            "name": ["Vera Studio"],
            "slug": ["vera"],
            "party_id": ["did:web:vera.example"],
            "description": ["A design studio in Lisbon."],
            "version": ["2.1.0"],
            "principal": [str(principal.pk)],
            "timezone": ["Europe/Lisbon"],
            "host_name": ["vera.example.com"],
            # Instructions
            "system_prompt": ["You act for Vera. Never go below 900 EUR a day."],
            # Negotiation
            "terms": ["amount (number, EUR per day), currency"],
            "term_guards": ['[{"term": "amount", "op": ">=", "value": 900, "currency": "EUR"}]'],
            "strategy": ["linear"],
            "max_turns": ["7"],
            "turn_timeout": ["90"],
            "evaluation_url": ["https://hooks.example/evaluate"],
            # Allowed actions: keep propose and accept, drop counter, rename reject, add refer
            "actions-1-DELETE": ["on"],
            "actions-3-name": ["decline"],
            "actions-3-description": ["say no"],
            "actions-4-name": ["refer"],
            "actions-4-description": ["point them elsewhere"],
            "actions-4-terminal": ["on"],
            "actions-4-state": ["rejected"],
            # Model
            "model": ["house"],
            "fallback_models_0": ["backup"],
            "fallback_models_1": ["offline"],
            # Runs
            "max_steps": ["12"],
            "history": ["window"],
            "history_window": ["5"],
            "on_busy": ["queue"],
            "guardrails": ['[{"name": "no-email", "stage": "output", "action": "redact", "match": "email"}]'],
            # Tools
            "tools": [str(ask_tool.pk), str(lookup.pk)],
            # Public endpoint
            "inbound_auth": ["api_key"],
            "max_concurrency": ["3"],
            "max_input_chars": ["4000"],
            "max_turns_per_context": ["20"],
            "max_contexts": ["100"],
            "rate_limit": ["30"],
            "cors_origins": ['["https://app.example.com"]'],
            "try_again_text": ["Busy: try again shortly."],
            # AgentCard
            "publish_tools": ["on"],
            "card_skills": [
                '[{"id": "negotiate", "name": "Negotiate", "description": "Bargains.", "tags": ["deals"]}]'
            ],
            "card_fields": ['{"documentationUrl": "https://vera.example/docs"}'],
            # Intake
            "intake_owner": [str(principal.pk)],
        }
    )

    response = ops.post(url("agent-create"), data)

    vera = Agent.objects.get(tenant=tenant, slug="vera")
    assert response.status_code == 302, response.context and response.context["form"].errors
    assert response["Location"] == url("agent", pk=vera.pk)
    assert {
        f: getattr(vera, f) for f in ("name", "party_id", "description", "version", "timezone", "host_name")
    } == {
        "name": "Vera Studio",
        "party_id": "did:web:vera.example",
        "description": "A design studio in Lisbon.",
        "version": "2.1.0",
        "timezone": "Europe/Lisbon",
        "host_name": "vera.example.com",
    }
    assert (vera.principal, vera.intake_owner) == (principal, principal)
    assert vera.system_prompt == "You act for Vera. Never go below 900 EUR a day."
    assert (vera.terms, vera.strategy, vera.max_turns, vera.turn_timeout, vera.evaluation_url) == (
        "amount (number, EUR per day), currency",
        "linear",
        7,
        90.0,
        "https://hooks.example/evaluate",
    )
    assert vera.term_guards == [{"term": "amount", "op": ">=", "value": 900, "currency": "EUR"}]
    assert vera.allowed_actions == [
        {"name": "propose", "description": "put an offer on the table", "terminal": False, "state": ""},
        {
            "name": "accept",
            "description": "accept an offer on the table",
            "terminal": True,
            "state": "completed",
        },
        {"name": "decline", "description": "say no", "terminal": True, "state": "rejected"},
        {"name": "refer", "description": "point them elsewhere", "terminal": True, "state": "rejected"},
    ]
    assert (vera.model, vera.fallback_models) == ("house", ["backup", "offline"])
    assert (vera.max_steps, vera.history, vera.history_window, vera.on_busy) == (12, "window", 5, "queue")
    assert vera.guardrails == [{"name": "no-email", "stage": "output", "action": "redact", "match": "email"}]
    assert sorted(vera.tools.values_list("name", flat=True)) == ["ask_user", "lookup"]
    assert (vera.inbound_auth, vera.max_concurrency, vera.max_input_chars) == ("api_key", 3, 4000)
    assert (vera.max_turns_per_context, vera.max_contexts, vera.rate_limit) == (20, 100, 30)
    assert (vera.cors_origins, vera.try_again_text) == (
        ["https://app.example.com"],
        "Busy: try again shortly.",
    )
    assert vera.publish_tools is True
    assert vera.card_skills == [
        {"id": "negotiate", "name": "Negotiate", "description": "Bargains.", "tags": ["deals"]}
    ]
    assert vera.card_fields == {"documentationUrl": "https://vera.example/docs"}

    # The edit page shows exactly what was saved: posted back untouched, it changes nothing.
    edit = page_form(ops, url("agent-edit", pk=vera.pk))
    assert json.loads(edit["term_guards"][0]) == vera.term_guards
    assert edit["term_guards"][0].startswith("[\n  {\n")  # pretty JSON
    assert (edit["fallback_models_0"], edit["fallback_models_1"]) == (["backup"], ["offline"])
    before = snapshot(vera)
    response = ops.post(url("agent-edit", pk=vera.pk), edit)
    assert response.status_code == 302
    after = snapshot(vera)
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }


def test_an_edit_changes_every_field_group(
    ops: Client, tenant: Tenant, agent: Agent, operator: AbstractUser, lookup: Tool, house: ModelEndpoint
) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data.update(
        {
            "name": ["Tomas Ferreira"],
            "principal": [str(operator.pk)],
            "system_prompt": ["You act for Tomas Ferreira."],
            "term_guards": ['[{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}]'],
            "actions-0-description": ["make an offer"],
            "model": ["house"],
            "fallback_models_0": ["offline"],
            "max_steps": ["4"],
            "tools": [str(lookup.pk)],
            "rate_limit": ["5"],
            "card_fields": ['{"iconUrl": "https://acme.example/icon.png"}'],
            "intake_owner": [str(operator.pk)],
        }
    )

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert response.status_code == 302
    agent.refresh_from_db()
    assert (agent.name, agent.principal, agent.intake_owner) == ("Tomas Ferreira", operator, operator)
    assert agent.system_prompt == "You act for Tomas Ferreira."
    assert agent.term_guards == [{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}]
    assert agent.allowed_actions[0] == {
        "name": "propose",
        "description": "make an offer",
        "terminal": False,
        "state": "",
    }
    assert (agent.model, agent.fallback_models, agent.max_steps, agent.rate_limit) == (
        "house",
        ["offline"],
        4,
        5,
    )
    assert list(agent.tools.all()) == [lookup]
    assert agent.card_fields == {"iconUrl": "https://acme.example/icon.png"}
    follow = ops.get(response["Location"])
    assert "Saved Tomas Ferreira." in follow.content.decode()


def test_the_system_message_preview_shows_a_saved_edit(ops: Client, agent: Agent) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data["system_prompt"] = ["You act for Tomas. Close before the 30th."]

    assert ops.post(url("agent-edit", pk=agent.pk), data).status_code == 302

    preview = ops.get(url("system-message", pk=agent.pk), {"statement": "Hire a CFO."})
    assert "You act for Tomas. Close before the 30th." in preview.context["message"]
    assert "You act for Tomas. Close before the 30th." in preview.content.decode()


BAD_JSON = [
    ("term_guards", '[{"term": "amount",', "Term guards: not valid JSON (Expecting property name"),
    ("guardrails", "{oops}", "Guardrails: not valid JSON (Expecting property name enclosed in double quotes"),
    ("card_skills", "[", "Card skills: not valid JSON (Expecting value, line 1 column 2)."),
    ("card_fields", "{'a': 1}", "Card fields: not valid JSON (Expecting property name"),
    ("cors_origins", "[https://app.example.com]", "CORS origins: not valid JSON (Expecting value"),
    # JSON Python reads but Postgres's jsonb cannot store, or too deep to read back (parley.strict_json).
    (
        "term_guards",
        '[{"term": "amount", "op": "<=", "value": NaN}]',
        "Term guards: not valid JSON (NaN is not a JSON number).",
    ),
    (
        "term_guards",
        '[{"term": "amount", "op": "<=", "value": Infinity}]',
        "Term guards: not valid JSON (Infinity is not a JSON number).",
    ),
    (
        "term_guards",
        '[{"term": "amount", "op": "<=", "value": 1e400}]',
        "Term guards: not valid JSON (the number 1e400 is too large).",
    ),
    (
        "card_fields",
        '{"capabilities": {"extensions": [{"uri": "https://e.example/x", "params": {"a": NaN}}]}}',
        "Card fields: not valid JSON (NaN is not a JSON number).",
    ),
    ("term_guards", DEEP_OBJECT, "Term guards: not valid JSON (nested deeper than 100 levels)."),
    ("card_fields", DEEP_OBJECT, "Card fields: not valid JSON (nested deeper than 100 levels)."),
    (
        "guardrails",
        '[{"name": "x\\u0000", "stage": "output", "action": "redact", "match": "email"}]',
        "Guardrails: not valid JSON (a string holds a NUL character",
    ),
]

REFUSED = [
    *BAD_JSON,
    (
        "guardrails",
        '[{"name": "x", "stage": "inbound", "action": "redact", "match": "email"}]',
        'guardrails[0].stage: "inbound" is not one of',
    ),
    ("cors_origins", '["ftp://files.example"]', "'ftp://files.example' is not an origin"),
    ("card_fields", '{"signatures": []}', "Signatures are made by the platform, not set."),
    ("card_skills", '[{"id": "x", "bogus": 1}]', "Not a valid AgentSkill"),
    ("host_name", "Vera.Example.com", "Write the host name in lower case."),
    ("model", "gpt-unknown", "Model: gpt-unknown is not one of the choices."),
    ("actions-2-state", "", "End state: a terminal action ends the task"),
    ("actions-0-state", "completed", "End state: only an action that ends the negotiation has one."),
    ("actions-1-name", "propose", "Allowed actions: correct the actions marked below."),
    ("max_steps", "-1", "Ensure this value is greater than or equal to 0."),
    # Caps that leave the agent nothing to do, and a turn timeout of no time (asyncio.wait_for(0)).
    ("max_steps", "0", "Ensure this value is greater than or equal to 1."),
    ("max_turns", "0", "Ensure this value is greater than or equal to 1."),
    ("rate_limit", "0", "Ensure this value is greater than or equal to 1."),
    ("max_concurrency", "0", "Ensure this value is greater than or equal to 1."),
    ("turn_timeout", "0", "Ensure this value is greater than or equal to 0.1."),
    ("turn_timeout", "-5", "Ensure this value is greater than or equal to 0.1."),
    ("turn_timeout", "1e308", "Ensure this value is less than or equal to 3600.0."),
]


@pytest.mark.parametrize(("field", "value", "message"), REFUSED)
def test_invalid_configuration_is_refused_at_its_field_and_nothing_is_saved(
    ops: Client, agent: Agent, field: str, value: str, message: str
) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data[field] = [value]
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    shown = field if not field.startswith("actions-") else "allowed_actions"
    errors = errors_of(response, shown)
    assert errors, response.context["form"].errors
    html = response.content.decode()
    if field.startswith("actions-"):
        row = response.context["form"].actions.forms[int(field.split("-")[1])]
        problems = [
            *errors,
            *row.errors.get("state", []),
            *response.context["form"].actions.non_form_errors(),
        ]
        assert any(p.startswith(message) for p in problems), problems
        assert 'href="#group-actions"' in html
    else:
        assert errors[0].startswith(message), errors
        assert "Not saved: correct the fields marked below." in html
        assert 'aria-invalid="true"' in html
    assert snapshot(agent) == before


def test_the_actions_need_distinct_names_and_at_least_one_action(ops: Client, agent: Agent) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    before = snapshot(agent)

    data["actions-1-name"] = ["propose"]
    response = ops.post(url("agent-edit", pk=agent.pk), data)
    assert response.context["form"].actions.non_form_errors() == [
        "Allowed actions: propose named more than once."
    ]

    data["actions-1-name"] = ["counter"]
    for row in range(4):
        data[f"actions-{row}-DELETE"] = ["on"]
    response = ops.post(url("agent-edit", pk=agent.pk), data)
    assert response.context["form"].actions.non_form_errors() == [
        "Allowed actions: the agent needs at least one action."
    ]
    assert snapshot(agent) == before


def test_the_model_and_its_fallbacks_are_refused_when_priced_in_two_currencies(
    ops: Client, tenant: Tenant, agent: Agent, house: ModelEndpoint
) -> None:
    ModelEndpoint.objects.create(
        tenant=tenant, name="dollars", base_url="https://us.example/v1", upstream_model="d", currency="USD"
    )
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data.update(model=["house"], fallback_models_0=["dollars"])
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert errors_of(response, "model") == [
        "the models house, dollars are priced in EUR and USD; use one currency"
    ]
    assert snapshot(agent) == before


def test_a_fallback_named_twice_is_refused(ops: Client, agent: Agent, house: ModelEndpoint) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data.update(fallback_models_0=["house"], fallback_models_1=["house"])
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert errors_of(response, "fallback_models") == ["Fallback models: name each one once."]
    html = response.content.decode()
    assert 'href="#id_fallback_models"' in html
    assert '<div class="ordered-choices" id="id_fallback_models">' in html
    assert snapshot(agent) == before


def test_a_slug_another_agent_of_the_tenant_has_is_refused(ops: Client, tenant: Tenant, agent: Agent) -> None:
    data = page_form(ops, url("agent-create"))
    data.update(name=["Another Tomas"], slug=["tomas"])

    response = ops.post(url("agent-create"), data)

    assert errors_of(response, "slug") == ["Slug: this tenant already has one named 'tomas'."]
    assert Agent.objects.filter(tenant=tenant).count() == 1


def test_forged_ids_of_another_tenants_tool_or_user_are_refused_at_their_fields(
    ops: Client, agent: Agent, foreign_tool: Tool, stranger: AbstractUser
) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data.update(tools=[str(foreign_tool.pk)], principal=[str(stranger.pk)], intake_owner=[str(stranger.pk)])
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    errors = response.context["form"].errors
    assert errors["tools"] == [f"Tools it offers: {foreign_tool.pk} is not a tool of this tenant."]
    assert errors["principal"] == ["Principal: choose a member of this tenant who can answer (not a viewer)."]
    assert errors["intake_owner"] == ["Intake owner: choose a member of this tenant."]
    assert snapshot(agent) == before
    assert agent.tools.count() == 0


def test_a_viewer_is_not_offered_as_principal_and_is_refused_if_posted(
    ops: Client, tenant: Tenant, agent: Agent
) -> None:
    """A viewer may never answer (agents.selectors.can_answer_as), so cannot be an agent's party;
    a viewer may still receive intake requests."""
    viewer = member(tenant, "vera", Membership.Role.VIEWER)
    form = ops.get(url("agent-edit", pk=agent.pk)).context["form"]
    assert viewer not in form.fields["principal"].queryset
    assert viewer in form.fields["intake_owner"].queryset
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data["principal"] = [str(viewer.pk)]
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert errors_of(response, "principal") == [
        "Principal: choose a member of this tenant who can answer (not a viewer)."
    ]
    assert snapshot(agent) == before


def test_a_principal_saved_before_becoming_a_viewer_is_shown_and_refused_on_saving(
    ops: Client, agent: Agent, principal: AbstractUser
) -> None:
    """Shown, the form says who the party is; saved, the model's check names the problem."""
    Membership.objects.filter(user=principal).update(role=Membership.Role.VIEWER)
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    assert data["principal"] == [str(principal.pk)]

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert errors_of(response, "principal") == [
        "A viewer cannot answer for an agent; choose a member who can."
    ]
    data["principal"] = [""]
    assert ops.post(url("agent-edit", pk=agent.pk), data).status_code == 302


def test_only_a_unique_constraint_is_taken_for_a_race_on_a_name(
    tenant: Tenant, agent: Agent, house: ModelEndpoint
) -> None:
    """A page reports "another change took this name" for a unique violation only (a name taken
    between the form's check and its save); any other constraint failing is a bug, not a race."""
    with pytest.raises(IntegrityError) as taken, transaction.atomic():
        ModelEndpoint.objects.create(
            tenant=tenant, name="house", base_url="https://x.example", upstream_model="x"
        )
    agent.card_fields = None
    with pytest.raises(IntegrityError) as null, transaction.atomic():
        agent.save()

    assert is_unique_violation(taken.value)
    assert not is_unique_violation(null.value)


def test_a_new_agent_with_a_forged_tool_is_not_created(
    ops: Client, tenant: Tenant, foreign_tool: Tool
) -> None:
    data = page_form(ops, url("agent-create"))
    data.update(name=["Vera"], slug=["vera"], tools=[str(foreign_tool.pk)])

    response = ops.post(url("agent-create"), data)

    assert errors_of(response, "tools")
    assert not Agent.objects.filter(slug="vera").exists()


def test_a_malformed_term_guard_is_refused_at_its_field(ops: Client, agent: Agent) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data["term_guards"] = ['[{"term": "amount", "op": "<", "value": 1100}]']
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert response.status_code == 200
    assert errors_of(response, "term_guards")
    assert snapshot(agent) == before


# --- Tools -------------------------------------------------------------------------------------------


def tool_data(**fields: str) -> dict[str, str]:
    return {
        "name": "lookup",
        "kind": "host",
        "description": "Look an order up.",
        "parameters": json.dumps(SCHEMA),
        "url": "https://host.example/lookup",
        "timeout": "5",
        **fields,
    }


def test_a_host_operation_is_created_and_its_new_secret_is_shown_once(ops: Client, tenant: Tenant) -> None:
    response = ops.post(url("tool-create"), tool_data(secret="on", suspends="", requires_approval="on"))

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    tool = Tool.objects.get(tenant=tenant, name="lookup")
    shown = response.context["secret"]
    assert len(shown) >= 40
    assert tool.secret == shown
    assert f'value="{shown}"' in response.content.decode()
    assert (tool.kind, tool.parameters, tool.url, tool.timeout) == (
        "host",
        SCHEMA,
        "https://host.example/lookup",
        5,
    )
    assert (tool.suspends, tool.requires_approval) == (False, True)
    for page in (url("tool-edit", pk=tool.pk), url("tool-list")):
        html = ops.get(page).content.decode()
        assert shown not in html
    assert "A secret is set." in ops.get(url("tool-edit", pk=tool.pk)).content.decode()

    # Saving without asking for a new secret keeps it; asking shows a new one, once.
    kept = ops.post(url("tool-edit", pk=tool.pk), tool_data(description="Find an order."))
    assert kept.status_code == 302
    tool.refresh_from_db()
    assert (tool.description, tool.secret) == ("Find an order.", shown)
    renewed = ops.post(url("tool-edit", pk=tool.pk), tool_data(secret="on"))
    tool.refresh_from_db()
    assert renewed.context["secret"] == tool.secret != shown


def test_a_tool_edit_page_reads_back_and_round_trips(ops: Client, lookup: Tool) -> None:
    data = page_form(ops, url("tool-edit", pk=lookup.pk))
    assert json.loads(data["parameters"][0]) == SCHEMA
    assert "secret" not in data
    before = snapshot(lookup)

    assert ops.post(url("tool-edit", pk=lookup.pk), data).status_code == 302

    after = snapshot(lookup)
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"parameters": '{"type": 5}'}, "parameters", "Parameters: Not a valid JSON Schema: schema.type:"),
        (
            {"parameters": "[1, 2]"},
            "parameters",
            "Parameters: A JSON Schema for arguments must be a JSON object.",
        ),
        ({"parameters": '{"type": '}, "parameters", "Parameters (JSON Schema): not valid JSON"),
        (
            {"parameters": '{"type": "object", "maximum": NaN}'},
            "parameters",
            "Parameters (JSON Schema): not valid JSON (NaN is not a JSON number).",
        ),
        (
            {"parameters": DEEP_OBJECT},
            "parameters",
            "Parameters (JSON Schema): not valid JSON (nested deeper than 100 levels).",
        ),
        # Waiting that long raises OverflowError; past a run step's time limit it never times out.
        ({"timeout": "1e308"}, "timeout", "Ensure this value is less than or equal to 240.0."),
        ({"timeout": "1e400"}, "timeout", "Enter a number."),
        ({"url": ""}, "url", "A host operation needs the URL it calls."),
        ({"secret": ""}, "secret", "A host operation needs a secret to sign its calls."),
        ({"kind": "builtin", "name": "fetch"}, "name", "Built-in tools are"),
        ({"name": "bad name!"}, "name", "A tool name is 1 to 64 letters"),
        ({"suspends": "on", "requires_approval": "on"}, "requires_approval", "A tool that asks the party"),
    ],
)
def test_a_tool_that_cannot_run_is_refused_at_its_field(
    ops: Client, tenant: Tenant, fields: dict[str, str], field: str, message: str
) -> None:
    response = ops.post(url("tool-create"), tool_data(**{"secret": "on", **fields}))

    errors = errors_of(response, field)
    assert errors, response.context["form"].errors
    assert errors[0].startswith(message), errors
    assert "secret" not in response.context or not response.context.get("secret")
    assert not Tool.objects.filter(tenant=tenant).exists()


def test_a_tool_refuses_another_tenants_agent_and_a_taken_name(
    ops: Client, tenant: Tenant, agent: Agent, seller: Agent, lookup: Tool
) -> None:
    forged = ops.post(
        url("tool-create"), tool_data(name="delegate", kind="agent", target_agent=str(seller.pk))
    )
    assert errors_of(forged, "target_agent") == ["Target agent: choose an agent of this tenant."]

    taken = ops.post(url("tool-create"), tool_data(secret="on"))
    assert errors_of(taken, "name") == ["Name: this tenant already has one named 'lookup'."]

    mine = ops.post(url("tool-create"), tool_data(name="delegate", kind="agent", target_agent=str(agent.pk)))
    assert mine.status_code == 302
    assert Tool.objects.get(tenant=tenant, name="delegate").target_agent == agent
    assert Tool.objects.filter(tenant=tenant).count() == 2


# --- Model endpoints ---------------------------------------------------------------------------------


def endpoint_data(**fields: str) -> dict[str, str]:
    return {
        "name": "house",
        "base_url": "https://llm.example/v1",
        "upstream_model": "house-1",
        "input_price": "2",
        "output_price": "8",
        "currency": "EUR",
        "timeout": "60",
        "attempts": "2",
        **fields,
    }


def test_a_model_endpoint_keeps_its_api_key_write_only(ops: Client, tenant: Tenant) -> None:
    created = ops.post(url("model-create"), endpoint_data(api_key="sk-live-123456"))

    assert created.status_code == 302
    endpoint = ModelEndpoint.objects.get(tenant=tenant, name="house")
    assert (endpoint.api_key, endpoint.input_price, endpoint.attempts) == ("sk-live-123456", Decimal(2), 2)
    page = ops.get(url("model-edit", pk=endpoint.pk)).content.decode()
    assert "sk-live-123456" not in page
    assert "An API key is set." in page
    assert "sk-live-123456" not in ops.get(url("model-list")).content.decode()

    # A blank key keeps the saved one; a new one replaces it; "remove" clears it.
    assert (
        ops.post(
            url("model-edit", pk=endpoint.pk), page_form(ops, url("model-edit", pk=endpoint.pk))
        ).status_code
        == 302
    )
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-live-123456"
    ops.post(url("model-edit", pk=endpoint.pk), endpoint_data(api_key="sk-live-999"))
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-live-999"
    ops.post(url("model-edit", pk=endpoint.pk), endpoint_data(clear_api_key="on"))
    endpoint.refresh_from_db()
    assert endpoint.api_key == ""


def test_a_model_endpoint_an_agent_uses_cannot_be_renamed(
    ops: Client, tenant: Tenant, agent: Agent, house: ModelEndpoint
) -> None:
    agent.fallback_models = ["house"]
    agent.save()
    before = snapshot(house)

    response = ops.post(url("model-edit", pk=house.pk), endpoint_data(name="cellar"))

    assert errors_of(response, "name") == [
        "Name: Tomas's agent uses the name 'house'; choose another model for them first."
    ]
    assert snapshot(house) == before
    taken = ops.post(url("model-create"), endpoint_data())
    assert errors_of(taken, "name") == ["Name: this tenant already has one named 'house'."]
    bad = ops.post(url("model-create"), endpoint_data(name="other", base_url="not a url", attempts="0"))
    assert errors_of(bad, "base_url") == ["Enter a valid URL."]
    assert errors_of(bad, "attempts") == ["Ensure this value is greater than or equal to 1."]
    assert ModelEndpoint.objects.filter(tenant=tenant).count() == 1


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        # Runs would cost less than nothing, lowering the month's spend against the tenant's budget.
        ({"input_price": "-5"}, "input_price", "Ensure this value is greater than or equal to 0."),
        ({"output_price": "-5"}, "output_price", "Ensure this value is greater than or equal to 0."),
        # model_for() answers "offline" with the built-in model: no agent could use this endpoint.
        ({"name": "offline"}, "name", "'offline' is the built-in model; choose another name."),
        (
            {"base_url": "https://me:secret@llm.example/v1"},
            "base_url",
            "Give the URL without user:password@; the API key is for credentials.",
        ),
        (
            {"currency": "EURO"},
            "currency",
            "Ensure this value has at most 3 characters (it has 4).",
        ),
        (
            {"currency": "E1"},
            "currency",
            "A currency is three capital letters, its ISO 4217 code: EUR, USD, GBP.",
        ),
        ({"timeout": "1e308"}, "timeout", "Ensure this value is less than or equal to 240.0."),
    ],
)
def test_a_model_endpoint_that_cannot_work_is_refused_at_its_field(
    ops: Client, tenant: Tenant, fields: dict[str, str], field: str, message: str
) -> None:
    response = ops.post(url("model-create"), endpoint_data(**fields))

    assert errors_of(response, field) == [message]
    assert not ModelEndpoint.objects.filter(tenant=tenant).exists()


def test_a_currency_is_taken_in_capitals(ops: Client, tenant: Tenant) -> None:
    assert ops.post(url("model-create"), endpoint_data(currency=" eur ")).status_code == 302

    assert ModelEndpoint.objects.get(tenant=tenant, name="house").currency == "EUR"


def test_the_currency_of_an_endpoint_an_agent_uses_with_another_cannot_change(
    ops: Client, agent: Agent, house: ModelEndpoint, backup: ModelEndpoint
) -> None:
    """The agent (model "house" in EUR, fallback "backup") could no longer run: model_for() would
    raise "priced in EUR and USD"."""
    agent.model, agent.fallback_models = "house", ["backup"]
    agent.save()
    data = page_form(ops, url("model-edit", pk=backup.pk))
    data["currency"] = ["USD"]
    before = snapshot(backup)

    response = ops.post(url("model-edit", pk=backup.pk), data)

    assert errors_of(response, "currency") == [
        "Tomas's agent also uses house in EUR; an agent's models are priced in one currency. "
        "Choose other models for them first."
    ]
    assert snapshot(backup) == before


def test_the_new_agent_form_saves_its_json_fields_as_they_are_shown(ops: Client) -> None:
    """Each JSON field of a new agent shows its empty value, never ``null``, which the form itself
    would refuse on saving."""
    html = ops.get(url("agent-create")).content.decode()
    fields = ["term_guards", "guardrails", "card_skills", "card_fields", "cors_origins"]
    shown = {
        name: re.search(rf'<textarea name="{name}"[^>]*>\s*(.*?)</textarea>', html, re.S) for name in fields
    }
    assert all(match is not None for match in shown.values()), shown
    assert {name: match.group(1).strip() for name, match in shown.items() if match} == {
        "term_guards": "[]",
        "guardrails": "[]",
        "card_skills": "[]",
        "card_fields": "{}",
        "cors_origins": "[]",
    }
