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
from typing import Any, get_args
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import IntegrityError, transaction
from django.template.defaultfilters import filesizeformat
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agents.config_forms import GUARD_OPS
from agents.configuration import is_unique_violation
from agents.models import SYSTEM_PROMPT_MAX_LENGTH, Agent, ModelEndpoint, Tool
from negotiations.negotiator import GuardOp
from parley.models import Membership, Tenant
from parley.services import api_key_create
from tests.agents.pages import member

SCHEMA = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
# Nested far deeper than json.loads can recurse: it raises RecursionError, not JSONDecodeError.
DEEP_OBJECT = '{"a": ' * 50_000 + "1" + "}" * 50_000


class PageForm(HTMLParser):
    """The fields of a page's ``<form class="config">`` as a browser submits them: text inputs and
    textareas as shown (a textarea's first newline dropped), checked boxes only, each select's
    selected option (else its first); nothing inside a ``<template>`` (the row JavaScript adds)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._in_form = False
        self._in_template = False
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
        self._in_template = self._in_template or tag == "template"
        if not self._in_form or self._in_template:
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
        elif tag == "template":
            self._in_template = False
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
    fresh = type(row).across_tenants.get(pk=row.pk)
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
    assert Agent.across_tenants.count() == 1
    assert Tool.across_tenants.count() == 1
    assert ModelEndpoint.across_tenants.count() == 1


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


@pytest.mark.parametrize(("role", "operates"), [("operator", True), ("owner", True), ("viewer", False)])
def test_every_member_but_a_principal_sees_every_agent_and_only_operators_the_links_to_change_them(
    client: Client, tenant: Tenant, agent: Agent, seller: Agent, role: str, operates: bool
) -> None:
    client.force_login(member(tenant, "sam", role))

    response = client.get(url("agent-list"))

    html = response.content.decode()
    assert response.status_code == 200
    assert f'href="{url("agent", pk=agent.pk)}">Tomas&#x27;s agent</a>' in html
    assert "<td>tomas</td>" in html
    assert seller.name not in html
    assert (f'href="{url("agent-create")}">New agent</a>' in html) is operates
    assert (f'href="{url("agent-edit", pk=agent.pk)}"' in html) is operates
    assert f'<a href="{url("agent-list")}" aria-current="page">Agents</a>' in html


def test_a_principal_sees_their_own_agents_only(client: Client, tenant: Tenant, agent: Agent) -> None:
    """Another party's agent (its name, its party's username) is not listed: its page is a 404 to
    them (agents.selectors.visible_agents)."""
    sam = member(tenant, "sam", Membership.Role.PRINCIPAL)
    own = Agent.objects.create(tenant=tenant, slug="sam", name="Sam's agent", principal=sam)
    client.force_login(sam)

    response = client.get(url("agent-list"))

    html = response.content.decode()
    assert [a.pk for a in response.context["agents"]] == [own.pk]
    assert f'href="{url("agent", pk=own.pk)}">Sam&#x27;s agent</a>' in html
    assert "Tomas" not in html
    assert "<td>tomas</td>" not in html
    assert client.get(url("agent", pk=own.pk)).status_code == 200
    assert client.get(url("agent", pk=agent.pk)).status_code == 404


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
        "Grounding documents": reverse("representative:documents", kwargs={"tenant": "acme", "pk": agent.pk}),
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
            "strategy": ["linear"],
            "max_turns": ["7"],
            "turn_timeout": ["90"],
            "evaluation_url": ["https://hooks.example/evaluate"],
            # Term guards, in a blank row
            "term_guards-0-term": ["amount"],
            "term_guards-0-op": [">="],
            "term_guards-0-value": ["900"],
            "term_guards-0-currency": ["EUR"],
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
            # Guardrails, in a blank row
            "guardrails-0-name": ["no-email"],
            "guardrails-0-stage": ["output"],
            "guardrails-0-action": ["redact"],
            "guardrails-0-match": ["email"],
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

    vera = Agent.across_tenants.get(tenant=tenant, slug="vera")
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
    assert [edit[f"term_guards-0-{f}"] for f in ("term", "op", "value", "currency", "aspiration")] == [
        ["amount"],
        [">="],
        ["900"],
        ["EUR"],
        [""],
    ]
    assert [edit[f"guardrails-0-{f}"] for f in ("name", "stage", "action", "match", "pattern")] == [
        ["no-email"],
        ["output"],
        ["redact"],
        ["email"],
        [""],
    ]
    assert (edit["term_guards-TOTAL_FORMS"], edit["guardrails-TOTAL_FORMS"]) == (["3"], ["3"])
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
            "term_guards-0-term": ["amount"],
            "term_guards-0-value": ["1100"],
            "term_guards-0-currency": ["EUR"],
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
    ("card_skills", "[", "Card skills: not valid JSON (Expecting value, line 1 column 2)."),
    ("card_fields", "{'a': 1}", "Card fields: not valid JSON (Expecting property name"),
    ("cors_origins", "[https://app.example.com]", "CORS origins: not valid JSON (Expecting value"),
    (
        "card_skills",
        '[{"id": "x",\n  "name": "X" "description": "y"}]',
        "Card skills: not valid JSON (Expecting ',' delimiter, line 2 column 15).",
    ),
    # JSON Python reads but Postgres's jsonb cannot store, or too deep to read back (parley.strict_json).
    (
        "card_skills",
        '[{"id": "x", "tags": [NaN]}]',
        "Card skills: not valid JSON (NaN is not a JSON number).",
    ),
    ("cors_origins", "[Infinity]", "CORS origins: not valid JSON (Infinity is not a JSON number)."),
    ("card_fields", '{"x": 1e400}', "Card fields: not valid JSON (the number 1e400 is too large)."),
    (
        "card_fields",
        '{"capabilities": {"extensions": [{"uri": "https://e.example/x", "params": {"a": NaN}}]}}',
        "Card fields: not valid JSON (NaN is not a JSON number).",
    ),
    ("card_skills", DEEP_OBJECT, "Card skills: not valid JSON (nested deeper than 100 levels)."),
    ("card_fields", DEEP_OBJECT, "Card fields: not valid JSON (nested deeper than 100 levels)."),
    (
        "cors_origins",
        '["https://x.example\\u0000"]',
        "CORS origins: not valid JSON (a string holds a NUL character",
    ),
]

REFUSED = [
    *BAD_JSON,
    ("cors_origins", '["ftp://files.example"]', "'ftp://files.example' is not an origin"),
    ("card_fields", '{"signatures": []}', "Signatures are made by the platform, not set."),
    ("card_skills", '[{"id": "x", "bogus": 1}]', "Not a valid AgentSkill"),
    ("host_name", "Vera.Example.com", "Write the host name in lower case."),
    ("model", "gpt-unknown", "Model: gpt-unknown is not one of the choices."),
    ("max_steps", "-1", "Ensure this value is greater than or equal to 0."),
    # Caps that leave the agent nothing to do, and a turn timeout of no time (asyncio.wait_for(0)).
    ("max_steps", "0", "Ensure this value is greater than or equal to 1."),
    ("max_turns", "0", "Ensure this value is greater than or equal to 1."),
    ("rate_limit", "0", "Ensure this value is greater than or equal to 1."),
    ("max_concurrency", "0", "Ensure this value is greater than or equal to 1."),
    ("turn_timeout", "0", "Ensure this value is greater than or equal to 0.1."),
    ("turn_timeout", "-5", "Ensure this value is greater than or equal to 0.1."),
    ("turn_timeout", "1e308", "Ensure this value is less than or equal to 3600.0."),
    # A description in the format that would be misread is refused; prose declares nothing, and passes.
    (
        "terms",
        "amount (numbr, EUR per day)",
        "The term amount: 'numbr' stands where its type goes and is no type; the types are number, "
        "integer, string, text, boolean, date. Did you mean number?",
    ),
    (
        "terms",
        "amount (number, EUR), ((",
        "'((' does not read as a term: write each term as a name, or a name and its details in "
        'parentheses — "amount (number, EUR per day), currency" — separated by commas.',
    ),
    (
        "terms",
        "amount (number), amount (string)",
        "The term amount is declared twice; declare each term once.",
    ),
    # The hook is POSTed to: http or https only (parley.outbound.url_validator).
    ("evaluation_url", "ftp://files.example/hook", "Enter an http:// or https:// URL."),
    (
        "system_prompt",
        "x" * (SYSTEM_PROMPT_MAX_LENGTH + 1),
        f"A system prompt has at most {SYSTEM_PROMPT_MAX_LENGTH} characters; this one has "
        f"{SYSTEM_PROMPT_MAX_LENGTH + 1}.",
    ),
]


@pytest.mark.parametrize(("field", "value", "message"), REFUSED)
def test_invalid_configuration_is_refused_at_its_field_and_nothing_is_saved(
    ops: Client, agent: Agent, field: str, value: str, message: str
) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data[field] = [value]
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    errors = errors_of(response, field)
    assert errors, response.context["form"].errors
    assert errors[0].startswith(message), errors
    html = response.content.decode()
    assert "Not saved: correct the fields marked below." in html
    assert f'href="#{response.context["form"][field].id_for_label}"' in html
    assert 'aria-invalid="true"' in html
    assert snapshot(agent) == before


# A guard and a guardrail as the page's rows post them; the tests change one cell.
GUARD_ROW = {"term": "amount", "op": "<=", "value": "1200", "currency": "EUR", "aspiration": ""}
GUARDRAIL_ROW = {"name": "no-email", "stage": "output", "action": "redact", "match": "email", "pattern": ""}

ROW_REFUSED = [
    # (setting, the cells changed in its first row, the cell the error is at, the error there)
    ("term_guards", {"value": "soon"}, "value", "Value: needs a number or a date for '<='"),
    ("term_guards", {"op": "<"}, "op", "Operator: has op '<'; use one of <=, >=, ==, in"),
    ("term_guards", {"term": ""}, "term", "Term: names no term"),
    ("term_guards", {"op": "in", "value": ""}, "value", "Value: give the limit."),
    (
        "term_guards",
        {"op": "in", "value": '["EUR", "USD"'},
        "value",
        "Value: not valid JSON (Expecting ',' delimiter, line 1 column 14).",
    ),
    (
        "term_guards",
        {"aspiration": "high"},
        "aspiration",
        "Opening value: has an aspiration that is not a number",
    ),
    (
        "term_guards",
        {"currency": "euros!!"},
        "currency",
        "Currency: has currency 'euros!!'; a currency is its ISO 4217 code, three capital letters: "
        "EUR, USD, GBP",
    ),
    (
        "term_guards",
        {"term": "banana"},
        "term",
        "Term: names term 'banana', which the terms description does not declare (amount, currency)",
    ),
    ("guardrails", {"stage": "inbound"}, "stage", 'Stage: "inbound" is not one of "input", "output".'),
    ("guardrails", {"stage": ""}, "stage", 'Stage: required, one of "input", "output".'),
    ("guardrails", {"name": ""}, "name", "Name: required, and not blank."),
    (
        "guardrails",
        {"match": "regex", "pattern": "(ORD-"},
        "pattern",
        "Pattern: does not compile (missing ), unterminated subpattern at position 0).",
    ),
    ("guardrails", {"match": "regex"}, "pattern", "Pattern: required for a regex guardrail."),
    ("guardrails", {"pattern": "ORD-"}, "pattern", 'Pattern: only a "regex" guardrail has one.'),
    ("guardrails", {"match": "regex", "pattern": "x*"}, "pattern", "Pattern: matches empty text."),
    (
        "allowed_actions",
        {"state": "completed"},
        "state",
        "End state: only an action that ends the negotiation",
    ),
    ("allowed_actions", {"terminal": "on"}, "state", "End state: a terminal action ends the task"),
    ("allowed_actions", {"name": ""}, "name", "Name: every action needs one."),
]
PREFIX = {"term_guards": "term_guards", "guardrails": "guardrails", "allowed_actions": "actions"}
SETTING_LABEL = {
    "term_guards": "Term guards",
    "guardrails": "Guardrails",
    "allowed_actions": "Allowed actions",
}
GROUP = {"term_guards": "term-guards", "guardrails": "guardrails", "allowed_actions": "actions"}


def with_row(data: dict[str, list[str]], prefix: str, index: int, cells: dict[str, str]) -> None:
    for name, value in cells.items():
        data[f"{prefix}-{index}-{name}"] = [value]


@pytest.mark.parametrize(("setting", "cells", "at", "message"), ROW_REFUSED)
def test_a_row_that_cannot_work_is_refused_at_its_row_and_cell_and_nothing_is_saved(
    ops: Client, agent: Agent, setting: str, cells: dict[str, str], at: str, message: str
) -> None:
    """A guard, guardrail or action is refused at its row and cell, in the words of the check that
    refuses it (the words the API answers); the setting points at its rows."""
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    prefix = PREFIX[setting]
    base = {"term_guards": GUARD_ROW, "guardrails": GUARDRAIL_ROW, "allowed_actions": {}}[setting]
    with_row(data, prefix, 0, {**base, **cells})
    before = snapshot(agent)

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    form = response.context["form"]
    rows = form.rows[setting]
    assert [e for e in rows.forms[0].errors.get(at, []) if e.startswith(message)], rows.forms[0].errors
    assert errors_of(response, setting) == [
        f"{SETTING_LABEL[setting]}: correct the {rows.noun.lower()}s marked below."
    ]
    html = response.content.decode()
    assert f'<a href="#group-{GROUP[setting]}">{SETTING_LABEL[setting]}</a>' in html
    assert f'id="id_{prefix}-0-{at}_error"' in html
    assert snapshot(agent) == before


def test_a_rows_error_is_shown_at_its_row_when_rows_above_it_are_deleted_or_blank(
    ops: Client, agent: Agent
) -> None:
    agent.terms = GUARDED_TERMS
    agent.term_guards = [
        {"term": "amount", "op": "<=", "value": 1200},
        {"term": "days", "op": "<=", "value": 5},
    ]
    agent.save()
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data["term_guards-0-DELETE"] = ["on"]
    with_row(data, "term_guards", 1, {"value": "5 days"})
    with_row(data, "guardrails", 0, GUARDRAIL_ROW)
    with_row(data, "guardrails", 1, {**GUARDRAIL_ROW, "name": "no-email"})  # a second row, same name

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    form = response.context["form"]
    guards, guardrails = form.rows["term_guards"].forms, form.rows["guardrails"].forms
    assert (guards[0].errors, guards[1].errors) == (
        {},
        {"value": ["Value: needs a number or a date for '<='"]},
    )
    assert (guardrails[0].errors, guardrails[1].errors) == ({}, {"name": ['Name: "no-email" is used twice.']})
    assert agent.term_guards == Agent.across_tenants.get(pk=agent.pk).term_guards


def test_the_actions_need_distinct_names_and_at_least_one_action(ops: Client, agent: Agent) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    before = snapshot(agent)

    data["actions-1-name"] = ["propose"]
    response = ops.post(url("agent-edit", pk=agent.pk), data)
    assert response.context["form"].rows["allowed_actions"].non_form_errors() == [
        "Allowed actions: propose named more than once."
    ]

    data["actions-1-name"] = ["counter"]
    for row in range(4):
        data[f"actions-{row}-DELETE"] = ["on"]
    response = ops.post(url("agent-edit", pk=agent.pk), data)
    assert response.context["form"].rows["allowed_actions"].non_form_errors() == [
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
    assert Agent.across_tenants.filter(tenant=tenant).count() == 1


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
    assert not Agent.across_tenants.filter(slug="vera").exists()


# --- The page and the API refuse in the same words ---------------------------------------------------


@pytest.fixture
def api(tenant: Tenant, owner: AbstractUser) -> APIClient:
    client = APIClient()
    raw = api_key_create(tenant=tenant, name="backend", scopes=("read", "admin"), user=owner)[1]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def api_refusal(response: Any, field: str) -> list[str]:
    assert response.status_code == 400, response.content
    messages: list[str] = response.json()["error"]["fields"][field]
    return messages


SAME_WORDS = [
    ("terms", "amount (wibble, EUR)"),
    ("card_skills", {"not": "a list"}),
    ("card_skills", [{"id": "x", "bogus": 1}]),
    ("card_fields", ["not", "an", "object"]),
    ("card_fields", {"signatures": []}),
    ("cors_origins", {"not": "a list"}),
    ("cors_origins", ["ftp://files.example"]),
    ("evaluation_url", "ftp://files.example/hook"),
    ("system_prompt", "x" * (SYSTEM_PROMPT_MAX_LENGTH + 1)),
]


@pytest.mark.parametrize(("field", "value"), SAME_WORDS)
def test_a_setting_is_refused_on_the_page_in_the_words_of_the_api(
    ops: Client, api: APIClient, agent: Agent, field: str, value: Any
) -> None:
    """What the model's checks say of a setting, the page shows at its field word for word (not the
    form field's stock "Enter a valid JSON." or "Enter a valid URL.")."""
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data[field] = [value if isinstance(value, str) else json.dumps(value)]

    page = errors_of(ops.post(url("agent-edit", pk=agent.pk), data), field)
    answered = api_refusal(api.patch(f"/api/v1/agents/{agent.pk}", {field: value}, format="json"), field)

    assert page == answered
    assert not any(m.startswith("Enter a valid") and m.endswith(("JSON.", "URL.")) for m in page)


@pytest.mark.parametrize(
    ("setting", "entry", "cells", "at"),
    [
        (
            "term_guards",
            {"term": "amount", "op": "<=", "value": "soon"},
            {**GUARD_ROW, "value": "soon"},
            "value",
        ),
        (
            "term_guards",
            {"term": "amount", "op": "<=", "value": 1200, "currency": "euros!!"},
            {**GUARD_ROW, "currency": "euros!!"},
            "currency",
        ),
        (
            "term_guards",
            {"term": "banana", "op": "<=", "value": 1200},
            {**GUARD_ROW, "term": "banana"},
            "term",
        ),
        (
            "guardrails",
            {"name": "no-id", "stage": "output", "action": "block", "match": "regex", "pattern": "(ORD-"},
            {"name": "no-id", "stage": "output", "action": "block", "match": "regex", "pattern": "(ORD-"},
            "pattern",
        ),
    ],
)
def test_a_row_is_refused_in_the_words_of_the_api(
    ops: Client,
    api: APIClient,
    agent: Agent,
    setting: str,
    entry: dict[str, Any],
    cells: dict[str, str],
    at: str,
) -> None:
    """The row says what the API says of the same entry, less the entry's name (the row is its place)."""
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    with_row(data, PREFIX[setting], 0, cells)

    form = ops.post(url("agent-edit", pk=agent.pk), data).context["form"]
    answered = api_refusal(
        api.patch(f"/api/v1/agents/{agent.pk}", {setting: [entry]}, format="json"), setting
    )

    [shown] = form.rows[setting].forms[0].errors[at]
    label, problem = shown.split(": ", 1)
    assert label == form.rows[setting].forms[0].fields[at].label
    assert [m.endswith(f" {problem}") or m.endswith(f": {problem}") for m in answered] == [True]


def test_a_tools_parameters_are_refused_on_the_page_in_the_words_of_the_api(
    ops: Client, api: APIClient, lookup: Tool
) -> None:
    data = page_form(ops, url("tool-edit", pk=lookup.pk))
    data["parameters"] = ["[1, 2]"]

    page = errors_of(ops.post(url("tool-edit", pk=lookup.pk), data), "parameters")
    answered = api_refusal(
        api.patch(f"/api/v1/tools/{lookup.pk}", {"parameters": [1, 2]}, format="json"), "parameters"
    )

    assert page == answered == ["A JSON Schema for arguments must be a JSON object."]


# --- URLs the platform calls: public addresses only (parley.outbound) --------------------------------

# Where a tenant stores a URL the platform calls: (the page that edits it, the API's collection,
# the field, a body that creates a row through the API but for that URL).
CALLED_URLS = [
    ("agent-edit", "agents", "evaluation_url", {"slug": "vera", "name": "Vera's agent"}),
    (
        "tool-edit",
        "tools",
        "url",
        {"name": "probe", "kind": "host", "description": "Probe.", "secret": "a-signing-secret"},
    ),
    ("model-edit", "model-endpoints", "base_url", {"name": "probe", "upstream_model": "m-1"}),
]
# (URL, its host): loopback, link-local (the cloud metadata service), a name that resolves to loopback.
PRIVATE_TARGETS = [
    ("http://127.0.0.1:47123/prod-internal", "127.0.0.1"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
    ("http://localhost:47123/prod-internal", "localhost"),
]


@pytest.mark.parametrize(("page", "collection", "field", "body"), CALLED_URLS)
@pytest.mark.parametrize(("target", "host"), PRIVATE_TARGETS)
def test_a_url_on_a_private_address_is_refused_on_the_page_and_by_the_api_and_nothing_is_saved(
    settings: Any,
    ops: Client,
    api: APIClient,
    agent: Agent,
    lookup: Tool,
    house: ModelEndpoint,
    page: str,
    collection: str,
    field: str,
    body: dict[str, str],
    target: str,
    host: str,
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False  # as in production
    row = {"agent-edit": agent, "tool-edit": lookup, "model-edit": house}[page]
    refusal = f"The host '{host}' resolves to a private address; Parley does not call private addresses."
    data = page_form(ops, url(page, pk=row.pk))
    data[field] = [target]
    before = snapshot(row)

    shown = errors_of(ops.post(url(page, pk=row.pk), data), field)
    changed = api.patch(f"/api/v1/{collection}/{row.pk}", {field: target}, format="json")
    created = api.post(f"/api/v1/{collection}", {**body, field: target}, format="json")

    assert shown == api_refusal(changed, field) == api_refusal(created, field) == [refusal]
    assert snapshot(row) == before
    assert type(row).across_tenants.count() == 1


@pytest.mark.parametrize(
    ("allow_http", "target", "refusal"),
    [
        (True, "ftp://files.example/lookup", "Enter an http:// or https:// URL."),
        (True, "ftps://files.example/lookup", "Enter an http:// or https:// URL."),
        (False, "http://host.example/lookup", "A host operation's URL must be https://, not plain http."),
    ],
)
def test_a_host_operations_url_is_refused_on_the_page_and_by_the_api_unless_it_may_be_called(
    settings: Any, ops: Client, api: APIClient, lookup: Tool, allow_http: bool, target: str, refusal: str
) -> None:
    settings.PARLEY_HOST_OPERATIONS_ALLOW_HTTP = allow_http
    data = page_form(ops, url("tool-edit", pk=lookup.pk))
    data["url"] = [target]
    before = snapshot(lookup)

    shown = errors_of(ops.post(url("tool-edit", pk=lookup.pk), data), "url")
    answered = api_refusal(api.patch(f"/api/v1/tools/{lookup.pk}", {"url": target}, format="json"), "url")

    assert shown == answered == [refusal]
    assert snapshot(lookup) == before


# --- Term guards and guardrails, row by row ---------------------------------------------------------


def test_the_term_guard_editor_offers_exactly_the_operators_the_negotiator_reads() -> None:
    assert [op for op, _ in GUARD_OPS] == list(get_args(GuardOp))


STORED_GUARDS = [
    {"term": "amount", "op": "<=", "value": 1200, "currency": "EUR", "aspiration": 900},
    {"term": "rate", "op": ">=", "value": 12.5},
    {"term": "start", "op": ">=", "value": "2030-01-01"},
    {"term": "start", "op": "<=", "value": "next friday"},
    {"term": "code", "op": "==", "value": "1200"},
    {"term": "remote", "op": "==", "value": True},
    {"term": "currency", "op": "in", "value": ["EUR", "USD"]},
    {"term": "seats", "op": "in", "value": [1, "2", "a, b"]},
]
# A description declaring every term STORED_GUARDS limit (a guard must limit a declared term).
GUARDED_TERMS = (
    "amount (number, EUR per day), currency, rate (number), start (date), code, remote (boolean), seats, days"
)
# How each stored guard's value is shown in its row, to be read back as it is.
SHOWN_VALUES = ["1200", "12.5", "2030-01-01", "next friday", '"1200"', "true", "EUR, USD", '[1, "2", "a, b"]']


def test_stored_term_guards_show_in_their_rows_and_save_back_unchanged(ops: Client, agent: Agent) -> None:
    agent.terms = GUARDED_TERMS
    agent.term_guards = STORED_GUARDS
    agent.save()

    data = page_form(ops, url("agent-edit", pk=agent.pk))

    assert [data[f"term_guards-{i}-value"][0] for i in range(len(STORED_GUARDS))] == SHOWN_VALUES
    assert (data["term_guards-0-aspiration"], data["term_guards-0-currency"]) == (["900"], ["EUR"])
    assert data["term_guards-TOTAL_FORMS"] == [str(len(STORED_GUARDS) + 2)]
    assert ops.post(url("agent-edit", pk=agent.pk), data).status_code == 302
    agent.refresh_from_db()
    assert agent.term_guards == STORED_GUARDS


def test_term_guards_and_guardrails_are_added_changed_and_removed_row_by_row(
    ops: Client, agent: Agent
) -> None:
    agent.terms = GUARDED_TERMS
    agent.term_guards = [
        {"term": "amount", "op": "<=", "value": 1200},
        {"term": "days", "op": "<=", "value": 5},
    ]
    agent.guardrails = [
        {"name": "no-email", "stage": "output", "action": "redact", "match": "email"},
        {"name": "no-phone", "stage": "output", "action": "redact", "match": "phone"},
    ]
    agent.save()
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    # The first guard changes, the second is cleared (a blank row adds nothing), two are added.
    with_row(data, "term_guards", 0, {"value": "1100", "currency": "EUR"})
    with_row(data, "term_guards", 1, {"term": "", "value": ""})
    with_row(data, "term_guards", 2, {"term": "currency", "op": "in", "value": "EUR, USD"})
    with_row(data, "term_guards", 3, {"term": "code", "op": "==", "value": '"007"'})
    # The first guardrail is deleted, one is added after the second.
    data["guardrails-0-DELETE"] = ["on"]
    with_row(data, "guardrails", 2, {"name": "no-ids", "stage": "input", "action": "block", "match": "regex"})
    data["guardrails-2-pattern"] = [r"ORD-\d+"]

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert response.status_code == 302, response.context and response.context["form"].errors
    agent.refresh_from_db()
    assert agent.term_guards == [
        {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"},
        {"term": "currency", "op": "in", "value": ["EUR", "USD"]},
        {"term": "code", "op": "==", "value": "007"},
    ]
    assert agent.guardrails == [
        {"name": "no-phone", "stage": "output", "action": "redact", "match": "phone"},
        {"name": "no-ids", "stage": "input", "action": "block", "match": "regex", "pattern": r"ORD-\d+"},
    ]


@pytest.mark.parametrize("remove", ["delete", "clear"])
def test_the_last_term_guard_and_guardrail_are_removed(ops: Client, agent: Agent, remove: str) -> None:
    """Removing the only row leaves the setting empty ([] is what the rows say, though the setting's
    own field is never posted: Django keeps a model default for an omitted field whose value is empty)."""
    agent.term_guards = [{"term": "amount", "op": "<=", "value": 1200}]
    agent.guardrails = [{"name": "no-email", "stage": "output", "action": "redact", "match": "email"}]
    agent.save()
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    if remove == "delete":
        data["term_guards-0-DELETE"] = data["guardrails-0-DELETE"] = ["on"]
    else:
        with_row(data, "term_guards", 0, {"term": "", "value": ""})
        with_row(data, "guardrails", 0, {"name": "", "stage": "", "action": "", "match": ""})

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert response.status_code == 302, response.context and response.context["form"].errors
    agent.refresh_from_db()
    assert (agent.term_guards, agent.guardrails) == ([], [])
    assert (
        ops.get(url("agent-edit", pk=agent.pk)).context["form"].rows["term_guards"].initial_form_count() == 0
    )


def test_a_currency_typed_in_small_letters_is_taken_in_capitals(ops: Client, agent: Agent) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    with_row(data, "term_guards", 0, {**GUARD_ROW, "currency": "eur"})

    assert ops.post(url("agent-edit", pk=agent.pk), data).status_code == 302
    agent.refresh_from_db()
    assert agent.term_guards == [{"term": "amount", "op": "<=", "value": 1200, "currency": "EUR"}]


def test_prose_terms_take_guards_on_any_term(ops: Client, agent: Agent) -> None:
    """A description that declares no terms (prose) leaves a guard's term to the operator."""
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data["terms"] = ["The day rate in euros, and how many days a month."]
    with_row(data, "term_guards", 0, {**GUARD_ROW, "term": "days", "currency": ""})

    response = ops.post(url("agent-edit", pk=agent.pk), data)

    assert response.status_code == 302, response.context and response.context["form"].errors
    agent.refresh_from_db()
    assert agent.term_guards == [{"term": "days", "op": "<=", "value": 1200}]


def test_the_rows_editors_are_labelled_groups_that_work_without_javascript(ops: Client, agent: Agent) -> None:
    """Each row is a fieldset named by its legend, each cell labelled; blank rows are there to fill in,
    and the "Add" button, which needs JavaScript, is hidden until the script shows it."""
    html = ops.get(url("agent-edit", pk=agent.pk)).content.decode()

    for prefix, noun in (("term_guards", "term guard"), ("guardrails", "guardrail"), ("actions", "action")):
        assert f'<ol class="rows" id="{prefix}-rows">' in html
        assert (
            f'<button type="button" class="secondary add-row" data-rows="{prefix}" data-max="50" hidden>'
            in html
        )
        assert f"Add a {noun}</button>" in html
        assert f'<template id="{prefix}-new">' in html
    assert "<legend>Term guard 1 (new)</legend>" in html
    assert "<legend>Guardrail 2 (new)</legend>" in html
    assert '<label for="id_term_guards-0-value">Value:</label>' in html
    assert '<label for="id_guardrails-1-pattern">Pattern:</label>' in html
    assert 'src="/static/parley/forms.js"' in html


# --- A form too large to read ------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["multipart", "urlencoded"])
def test_a_form_too_large_to_read_gets_the_form_back_with_a_message_not_a_bare_400(
    ops: Client, agent: Agent, encoding: str
) -> None:
    data = page_form(ops, url("agent-edit", pk=agent.pk))
    data["system_prompt"] = ["x" * 3_000_000]
    before = snapshot(agent)

    if encoding == "multipart":
        response = ops.post(url("agent-edit", pk=agent.pk), data)
    else:
        body = urlencode(data, doseq=True)
        response = ops.post(
            url("agent-edit", pk=agent.pk), body, content_type="application/x-www-form-urlencoded"
        )

    assert response.status_code == 413
    sent = int(response.wsgi_request.META["CONTENT_LENGTH"])
    html = response.content.decode()
    assert response.context["too_large"] == (
        f"Not saved: this form sent {filesizeformat(sent)}, more than the 2.5\xa0MB a form may send, so "
        "nothing in it could be read: the form below is as it was before your changes. Shorten the "
        "longest text (a system prompt has at most 100000 characters) and save again."
    )
    assert '<div class="form-error" role="alert" id="too-large">' in html
    assert response.context["form"]["system_prompt"].value() == "You act for Tomas."
    assert "<h1>Edit" in html
    assert snapshot(agent) == before


def test_a_form_too_large_to_read_is_still_only_for_operators_of_the_tenant(
    client: Client, tenant: Tenant, agent: Agent, seller: Agent
) -> None:
    client.force_login(member(tenant, "sam", Membership.Role.PRINCIPAL))
    big = {"name": "x", "system_prompt": "x" * 3_000_000}
    assert client.post(url("agent-edit", pk=agent.pk), big).status_code == 403
    client.force_login(member(tenant, "oli", Membership.Role.OPERATOR))
    assert client.post(url("agent-edit", pk=seller.pk), big).status_code == 404
    assert client.post(url("tool-create"), big).status_code == 413


# --- The agent's sub-navigation ----------------------------------------------------------------------


@pytest.mark.parametrize("page", ["system-message", "agent-edit"])
def test_the_system_message_preview_and_the_editor_have_the_agents_sub_navigation(
    ops: Client, agent: Agent, page: str
) -> None:
    html = ops.get(url(page, pk=agent.pk)).content.decode()

    links = {
        "Edit": url("agent-edit", pk=agent.pk),
        "System message": url("system-message", pk=agent.pk),
        "Card preview": reverse("a2a_gateway:card", kwargs={"tenant": "acme", "pk": agent.pk}),
        "Grounding documents": reverse("representative:documents", kwargs={"tenant": "acme", "pk": agent.pk}),
        "Inbound keys": reverse("a2a_gateway:keys", kwargs={"tenant": "acme", "pk": agent.pk}),
        "Agent Exchange": reverse("a2a_gateway:exchange", kwargs={"tenant": "acme", "pk": agent.pk}),
    }
    for text, href in links.items():
        current = ' aria-current="page"' if href == url(page, pk=agent.pk) else ""
        assert f'<a href="{href}"{current}>{text}</a>' in html, text
    assert f'Agent <a href="{url("agent", pk=agent.pk)}">Tomas&#x27;s agent</a>' in html


# --- Tools -------------------------------------------------------------------------------------------


BUILTIN_NAME_TAKEN = (
    "'ask_user' is the name of a built-in tool (answer, ask_user, negotiate): choose another name, "
    'or the kind "Built in" to offer the built-in.'
)


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
    tool = Tool.across_tenants.get(tenant=tenant, name="lookup")
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
        # The model's own words, as the API answers them (not the form field's "Enter a valid JSON.").
        ({"parameters": '{"type": 5}'}, "parameters", "Not a valid JSON Schema: schema.type:"),
        ({"parameters": "[1, 2]"}, "parameters", "A JSON Schema for arguments must be a JSON object."),
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
        ({"name": "ask_user"}, "name", BUILTIN_NAME_TAKEN),
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
    assert not Tool.across_tenants.filter(tenant=tenant).exists()


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
    assert Tool.across_tenants.get(tenant=tenant, name="delegate").target_agent == agent
    assert Tool.across_tenants.filter(tenant=tenant).count() == 2


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
    endpoint = ModelEndpoint.across_tenants.get(tenant=tenant, name="house")
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
    assert ModelEndpoint.across_tenants.filter(tenant=tenant).count() == 1


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
    assert not ModelEndpoint.across_tenants.filter(tenant=tenant).exists()


def test_a_currency_is_taken_in_capitals(ops: Client, tenant: Tenant) -> None:
    assert ops.post(url("model-create"), endpoint_data(currency=" eur ")).status_code == 302

    assert ModelEndpoint.across_tenants.get(tenant=tenant, name="house").currency == "EUR"


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
    fields = ["card_skills", "card_fields", "cors_origins"]
    shown = {
        name: re.search(rf'<textarea name="{name}"[^>]*>\s*(.*?)</textarea>', html, re.S) for name in fields
    }
    assert all(match is not None for match in shown.values()), shown
    assert {name: match.group(1).strip() for name, match in shown.items() if match} == {
        "card_skills": "[]",
        "card_fields": "{}",
        "cors_origins": "[]",
    }
