"""The tenant's configuration through the API: agents with every setting, intents, term guards,
tools, model endpoints, grounding documents, and the card and instructions previews.

Writes are judged as the operator's pages judge them: a refused write is a 400 naming the field
and changes nothing (the whole configuration is compared before and after). Secrets are
write-only; reads need ``read``, writes ``admin``; another tenant's rows are 404 (or, named in a
body or a filter, a 400 at that field) and stay as they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from a2a_gateway.signing import signing_key_create
from agents.instructions import system_message
from agents.models import SYSTEM_PROMPT_MAX_LENGTH, Agent, Intent, ModelEndpoint, Run, Tool
from agents.services import runs
from parley.models import Membership, Tenant
from representative.models import GroundingDocument
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
SECRET = "tool-secret-3f9a1c"
API_KEY = "sk-endpoint-key-77b2e4"


# --- Fixtures and helpers ----------------------------------------------------------------------------


@pytest.fixture
def house(tenant: Tenant) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        tenant=tenant,
        name="house",
        base_url="https://llm.example/v1",
        upstream_model="house-1",
        currency="EUR",
        api_key=API_KEY,
    )


@pytest.fixture
def lookup(tenant: Tenant) -> Tool:
    return Tool.objects.create(
        tenant=tenant,
        name="lookup",
        kind=Tool.Kind.HOST,
        description="Look an order up.",
        parameters=SCHEMA,
        url="https://host.example/lookup",
        secret=SECRET,
    )


@pytest.fixture
def document(agent: Agent) -> GroundingDocument:
    return GroundingDocument.objects.create(
        tenant=agent.tenant, agent=agent, title="Rates", text="Tomas pays up to 1,100 EUR a day."
    )


@pytest.fixture
def foreign_tool(other_tenant: Tenant) -> Tool:
    return Tool.objects.create(tenant=other_tenant, name="peek", kind=Tool.Kind.BUILTIN, description="x")


@pytest.fixture
def foreign_member(other_tenant: Tenant) -> AbstractUser:
    user = make_user("gus")
    Membership.objects.create(user=user, tenant=other_tenant, role=Membership.Role.OPERATOR)
    return user


def stored() -> dict[str, list[dict[str, Any]]]:
    """Every configuration row of every tenant, as stored: what a refused write must leave alone."""
    models = [Agent, Agent.tools.through, Intent, Tool, ModelEndpoint, GroundingDocument]
    return {m.__name__: list(m._default_manager.order_by("pk").values()) for m in models}


def invalid(response: Any) -> dict[str, list[str]]:
    """The ``fields`` of a 400 error body."""
    assert response.status_code == 400, response.content
    body = response.json()["error"]
    assert body["code"] == "invalid"
    fields: dict[str, list[str]] = body["fields"]
    return fields


def full_agent(tool: Tool) -> dict[str, Any]:
    """A new agent's configuration with every setting away from its default."""
    return {
        "slug": "vera",
        "name": "Vera's agent",
        "party_id": "did:web:vera.example",
        "description": "Sells consulting days.",
        "version": "2.1.0",
        "principal": "tomas",
        "timezone": "Europe/Berlin",
        "host_name": "vera.example.com",
        "system_prompt": "You act for Vera.",
        "terms": "amount (number, EUR per day)",
        "allowed_actions": [
            {"name": "offer", "description": "put an offer", "terminal": False, "state": ""},
            {"name": "deal", "description": "", "terminal": True, "state": "completed"},
            {"name": "walk", "description": "walk away", "terminal": True, "state": "rejected"},
        ],
        "term_guards": [{"term": "amount", "op": ">=", "value": 900, "currency": "EUR"}],
        "strategy": "linear",
        "max_turns": 7,
        "turn_timeout": 90.5,
        "evaluation_url": "https://host.example/evaluate",
        "model": "house",
        "fallback_models": ["offline"],
        "max_steps": 12,
        "history": "window",
        "history_window": 6,
        "on_busy": "queue",
        "guardrails": [{"name": "no-emails", "stage": "output", "action": "redact", "match": "email"}],
        "tools": [tool.pk],
        "inbound_auth": "api_key",
        "max_concurrency": 3,
        "max_input_chars": 4000,
        "max_turns_per_context": 20,
        "max_contexts": 50,
        "rate_limit": 30,
        "cors_origins": ["https://app.example.com"],
        "try_again_text": "Try later.",
        "publish_tools": True,
        "card_skills": [
            {"id": "hire", "name": "Hire", "description": "Hires consultants.", "tags": ["hiring"]}
        ],
        "card_fields": {"documentationUrl": "https://vera.example/docs"},
        "intake_owner": "olga",
    }


# --- Agents ------------------------------------------------------------------------------------------


def test_an_agent_with_every_setting_round_trips(
    api: APIClient,
    tenant: Tenant,
    principal: AbstractUser,
    operator: AbstractUser,
    house: ModelEndpoint,
    lookup: Tool,
) -> None:
    sent = full_agent(lookup)

    created = api.post("/api/v1/agents", sent, format="json")

    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in sent} == sent
    agent = Agent.across_tenants.get(pk=body["id"])
    assert body["url"] == f"{settings.PUBLIC_BASE_URL}/a2a/acme/vera"
    assert body["card_url"] == f"{body['url']}/.well-known/agent-card.json"
    assert (agent.tenant, agent.principal, agent.intake_owner) == (tenant, principal, operator)
    assert list(agent.tools.all()) == [lookup]
    assert agent.allowed_actions == sent["allowed_actions"]
    assert api.get(f"/api/v1/agents/{agent.pk}").json() == body

    changed = api.patch(
        f"/api/v1/agents/{agent.pk}",
        {"system_prompt": "You act for Vera. Be brief.", "tools": [], "principal": None, "host_name": ""},
        format="json",
    )

    assert changed.status_code == 200, changed.content
    assert changed.json() == {
        **body,
        "system_prompt": "You act for Vera. Be brief.",
        "tools": [],
        "principal": None,
        "host_name": None,
        "updated_at": changed.json()["updated_at"],
    }
    agent.refresh_from_db()
    assert (agent.system_prompt, agent.principal, agent.host_name) == (
        "You act for Vera. Be brief.",
        None,
        None,
    )
    assert list(agent.tools.all()) == []
    assert api.get(f"/api/v1/agents/{agent.pk}").json() == changed.json()

    deleted = api.delete(f"/api/v1/agents/{agent.pk}")

    assert deleted.status_code == 204
    assert not Agent.across_tenants.filter(pk=agent.pk).exists()
    assert Tool.across_tenants.filter(pk=lookup.pk).exists()
    assert api.get(f"/api/v1/agents/{agent.pk}").status_code == 404


def test_a_new_agent_needs_only_a_slug_and_a_name_and_takes_the_defaults(api: APIClient) -> None:
    response = api.post("/api/v1/agents", {"slug": "nova", "name": "Nova"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    defaults = Agent(slug="nova", name="Nova")
    assert body["model"] == "offline"
    assert body["allowed_actions"] == defaults.allowed_actions
    assert (body["max_steps"], body["timezone"], body["tools"], body["principal"]) == (10, "UTC", [], None)


def test_agents_are_filtered_by_slug_and_principal(
    api: APIClient, agent: Agent, operator: AbstractUser
) -> None:
    other = api.post(
        "/api/v1/agents", {"slug": "olgas", "name": "Olga's", "principal": "olga"}, format="json"
    )
    assert other.status_code == 201

    assert [a["id"] for a in api.get("/api/v1/agents", {"slug": "tomas"}).json()["results"]] == [
        str(agent.pk)
    ]
    assert [a["slug"] for a in api.get("/api/v1/agents", {"principal": "olga"}).json()["results"]] == [
        "olgas"
    ]
    assert invalid(api.get("/api/v1/agents", {"principal": "nobody"}))["principal"]


AGENT_REFUSED: list[tuple[str, Any, str]] = [
    ("slug", "Not a slug!", 'Enter a valid "slug"'),
    ("name", "", "This field may not be blank."),
    ("turn_timeout", 0, "Ensure this value is greater than or equal to 0.1."),
    ("turn_timeout", 1e308, "Ensure this value is less than or equal to 3600"),
    ("max_steps", 0, "Ensure this value is greater than or equal to 1."),
    ("rate_limit", 0, "Ensure this value is greater than or equal to 1."),
    ("max_steps", "many", "A valid integer is required."),
    ("strategy", "stubborn", '"stubborn" is not a valid choice.'),
    ("model", "gpt-unknown", "model 'gpt-unknown' is not available"),
    ("fallback_models", ["nope"], "No model endpoint of this tenant is named 'nope'."),
    ("fallback_models", ["offline", "offline"], "Name each fallback model once."),
    ("fallback_models", ["offline", ""], "2: This field may not be blank."),
    ("timezone", "Mars/Olympus", "'Mars/Olympus' is not a known time zone"),
    ("term_guards", [{"term": "amount", "op": "<", "value": 1}], "term guard 1 has op '<'"),
    ("term_guards", None, "This field may not be null."),
    (
        "term_guards",
        [{"term": "amount", "op": "<=", "value": 1, "currency": "euros!!"}],
        "term guard 1 has currency 'euros!!'; a currency is its ISO 4217 code, three capital letters: "
        "EUR, USD, GBP",
    ),
    (
        "term_guards",
        [{"term": "banana", "op": "<=", "value": 1}],
        "term guard 1 names term 'banana', which the terms description does not declare (amount, currency)",
    ),
    (
        "terms",
        "amount (number), amount (string)",
        "The term amount is declared twice; declare each term once.",
    ),
    (
        "terms",
        "amount (numbr, EUR per day)",
        "The term amount: 'numbr' stands where its type goes and is no type; the types are number, "
        "integer, string, text, boolean, date. Did you mean number?",
    ),
    ("allowed_actions", [], "The agent needs at least one action."),
    ("allowed_actions", [{"name": "propose"}], "Unusable actions"),
    (
        "allowed_actions",
        [{"name": "propose"}, {"name": "accept", "terminal": True}],
        "Action 2: End state: a terminal action ends the task",
    ),
    (
        "allowed_actions",
        [{"name": "propose", "state": "completed"}],
        "Action 1: End state: only an action that ends the negotiation has one.",
    ),
    (
        "allowed_actions",
        [
            {"name": "propose"},
            {"name": "propose"},
            {"name": "accept", "terminal": True, "state": "completed"},
            {"name": "reject", "terminal": True, "state": "rejected"},
        ],
        "Each action needs a name of its own.",
    ),
    ("allowed_actions", [{"name": "x" * 65}], "Action 1: Name: at most 64 characters."),
    (
        "allowed_actions",
        [{"name": "propose", "terminal": "maybe"}],
        "Action 1: terminal: Must be a valid boolean.",
    ),
    (
        "guardrails",
        [{"name": "x", "stage": "inbound", "action": "redact", "match": "email"}],
        'guardrails[0].stage: "inbound" is not one of',
    ),
    ("cors_origins", ["ftp://files.example"], "'ftp://files.example' is not an origin"),
    ("card_fields", {"signatures": []}, "Signatures are made by the platform, not set."),
    ("card_fields", ["not", "an", "object"], "Give the card fields as a JSON object."),
    ("card_skills", [{"id": "x", "bogus": 1}], "Not a valid AgentSkill"),
    ("host_name", "Vera.Example.com", "Write the host name in lower case."),
    ("evaluation_url", "not a url", "Enter a valid URL."),
    # The hook is POSTed to: http(s) only, by the model's validator the operator's page uses too.
    ("evaluation_url", "ftp://files.example/hook", "Enter an http:// or https:// URL."),
    ("evaluation_url", "ftps://files.example/hook", "Enter an http:// or https:// URL."),
    (
        "system_prompt",
        "x" * (SYSTEM_PROMPT_MAX_LENGTH + 1),
        f"A system prompt has at most {SYSTEM_PROMPT_MAX_LENGTH} characters; this one has "
        f"{SYSTEM_PROMPT_MAX_LENGTH + 1}.",
    ),
    ("guardrails", {"not": "a list"}, "guardrails: must be a list."),
    (
        "guardrails",
        [{"name": "x", "stage": "output", "action": "block", "match": "regex", "pattern": "("}],
        "guardrails[0].pattern: does not compile (missing ), unterminated subpattern at position 0).",
    ),
    ("principal", "nobody", "No member of this tenant has the username nobody."),
    ("intake_owner", "nobody", "No member of this tenant has the username nobody."),
    ("tools", [987654], "This tenant has no tool with the id 987654."),
]


@pytest.mark.parametrize(("field", "value", "message"), AGENT_REFUSED)
def test_a_setting_the_agent_cannot_work_with_is_refused_at_its_field_and_nothing_changes(
    api: APIClient, agent: Agent, house: ModelEndpoint, field: str, value: Any, message: str
) -> None:
    before = stored()

    response = api.patch(f"/api/v1/agents/{agent.pk}", {field: value}, format="json")

    problems = invalid(response)
    assert list(problems) == [field]
    assert any(m.startswith(message) for m in problems[field]), problems
    assert stored() == before


def test_an_http_evaluation_url_and_a_system_prompt_at_the_limit_are_taken(
    api: APIClient, agent: Agent
) -> None:
    prompt = "x" * SYSTEM_PROMPT_MAX_LENGTH
    body = {"evaluation_url": "http://hooks.example/evaluate", "system_prompt": prompt}

    response = api.patch(f"/api/v1/agents/{agent.pk}", body, format="json")

    assert response.status_code == 200, response.content
    agent.refresh_from_db()
    assert (agent.evaluation_url, agent.system_prompt) == ("http://hooks.example/evaluate", prompt)


def test_a_slug_another_agent_of_the_tenant_has_is_refused_at_the_slug(api: APIClient, agent: Agent) -> None:
    before = stored()

    response = api.post("/api/v1/agents", {"slug": agent.slug, "name": "Another"}, format="json")

    assert invalid(response) == {"slug": ["This tenant already has an agent with the slug 'tomas'."]}
    assert stored() == before


def test_the_same_slug_in_another_tenant_is_fine(other_api: APIClient, agent: Agent) -> None:
    response = other_api.post("/api/v1/agents", {"slug": agent.slug, "name": "Namesake"}, format="json")

    assert response.status_code == 201
    assert Agent.across_tenants.get(pk=response.json()["id"]).tenant.slug == "globex"


def test_a_viewer_cannot_be_the_principal(api: APIClient, tenant: Tenant, agent: Agent) -> None:
    viewer = make_user("vic")
    Membership.objects.create(user=viewer, tenant=tenant, role=Membership.Role.VIEWER)
    before = stored()

    response = api.patch(f"/api/v1/agents/{agent.pk}", {"principal": "vic"}, format="json")

    assert invalid(response) == {
        "principal": ["A viewer cannot answer for an agent; choose a member who can."]
    }
    assert stored() == before


def test_the_shape_of_a_write_is_judged_before_its_rules(api: APIClient, agent: Agent) -> None:
    response = api.patch(
        f"/api/v1/agents/{agent.pk}",
        {"max_steps": 0, "timezone": "Nowhere/Else", "slug": "ok-slug"},
        format="json",
    )

    assert set(invalid(response)) == {"max_steps"}  # the timezone is judged once the shape holds
    response = api.patch(f"/api/v1/agents/{agent.pk}", {"timezone": "Nowhere/Else"}, format="json")
    assert set(invalid(response)) == {"timezone"}


def test_an_agent_with_a_run_that_has_not_ended_is_not_deleted(
    api: APIClient, agent: Agent, intent: Intent
) -> None:
    run = runs.run_start(agent=agent, intent=intent, task="Find a CFO.")
    before = stored()

    response = api.delete(f"/api/v1/agents/{agent.pk}")

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "conflict",
        "message": "Tomas's agent has runs that have not ended (1); cancel them first.",
    }
    assert stored() == before

    runs.run_cancel(run=run, user=None)
    assert api.delete(f"/api/v1/agents/{agent.pk}").status_code == 204
    assert not Run.across_tenants.filter(pk=run.pk).exists()
    assert not Intent.across_tenants.filter(pk=intent.pk).exists()


def test_an_agent_a_tool_runs_is_not_deleted(api: APIClient, tenant: Tenant, agent: Agent) -> None:
    Tool.objects.create(
        tenant=tenant, name="ask-tomas", kind=Tool.Kind.AGENT, description="x", target_agent=agent
    )
    before = stored()

    response = api.delete(f"/api/v1/agents/{agent.pk}")

    assert response.status_code == 409
    assert "ask-tomas" in response.json()["error"]["message"]
    assert stored() == before


# --- Term guards -------------------------------------------------------------------------------------


def test_term_guards_are_read_and_replaced_as_a_list(api: APIClient, agent: Agent) -> None:
    agent.terms = "amount (number, EUR per day), currency, start (date)"
    agent.save()
    url = f"/api/v1/agents/{agent.pk}/term-guards"
    assert api.get(url).json() == []
    guards = [
        {"term": "amount", "op": "<=", "value": 1200, "currency": "EUR", "aspiration": 900},
        {"term": "start", "op": ">=", "value": "2030-01-01"},
    ]

    response = api.put(url, guards, format="json")

    assert response.status_code == 200, response.content
    assert response.json() == guards
    agent.refresh_from_db()
    assert agent.term_guards == guards
    assert api.get(url).json() == guards
    assert api.get(f"/api/v1/agents/{agent.pk}").json()["term_guards"] == guards


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            [{"term": "amount", "op": "<=", "value": 1}, {"term": "amount", "op": "<"}],
            "term guard 2 has op '<'",
        ),
        (
            [{"term": "amount", "op": "in", "value": []}],
            "term guard 1 needs a non-empty list of values for 'in'",
        ),
        ([{"op": "<=", "value": 1}], "term guard 1 names no term"),
        ([{"term": "amount", "op": {}, "value": 1}], "term guard 1 has op {}"),
        ({"term": "amount"}, "term guards must be a list"),
    ],
)
def test_a_malformed_term_guard_is_refused_naming_it(
    api: APIClient, agent: Agent, body: Any, message: str
) -> None:
    agent.term_guards = [{"term": "amount", "op": "<=", "value": 1000}]
    agent.save()
    before = stored()

    response = api.put(f"/api/v1/agents/{agent.pk}/term-guards", body, format="json")

    problems = invalid(response)
    assert list(problems) == ["term_guards"]
    assert problems["term_guards"][0].startswith(message), problems
    assert stored() == before


# --- Intents -----------------------------------------------------------------------------------------


def test_an_intent_round_trips(api: APIClient, agent: Agent) -> None:
    sent = {
        "agent": str(agent.pk),
        "statement": "Hire a fractional CFO.",
        "external_id": "crm-42",
        "term_guards": [{"term": "amount", "op": "<=", "value": 1100}],
    }

    created = api.post("/api/v1/intents", sent, format="json")

    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in sent} == sent
    intent = Intent.across_tenants.get(pk=body["id"])
    assert (intent.agent, intent.tenant, intent.external_id) == (agent, agent.tenant, "crm-42")
    assert api.get(f"/api/v1/intents/{intent.pk}").json() == body
    assert [i["id"] for i in api.get("/api/v1/intents", {"agent": str(agent.pk)}).json()["results"]] == [
        str(intent.pk)
    ]
    assert [i["id"] for i in api.get("/api/v1/intents", {"external_id": "crm-42"}).json()["results"]] == [
        str(intent.pk)
    ]

    changed = api.patch(
        f"/api/v1/intents/{intent.pk}",
        {"statement": "Hire a CFO by March.", "term_guards": [], "agent": "ignored"},
        format="json",
    )

    assert changed.status_code == 200, changed.content
    assert changed.json()["statement"] == "Hire a CFO by March."
    assert changed.json()["agent"] == str(agent.pk)
    intent.refresh_from_db()
    assert (intent.statement, intent.term_guards, intent.external_id) == (
        "Hire a CFO by March.",
        [],
        "crm-42",
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"statement": "  "}, "statement", "This field may not be blank."),
        ({"external_id": "crm-1"}, "external_id", "This agent already has an intent with this external id."),
        (
            {"term_guards": [{"term": "amount", "op": "~", "value": 1}]},
            "term_guards",
            "intent term guard 1 has op",
        ),
        ({"term_guards": "amount <= 5"}, "term_guards", "intent term guards must be a list"),
        (
            {"term_guards": [{"term": "banana", "op": "<=", "value": 1}]},
            "term_guards",
            "intent term guard 1 names term 'banana', which the terms description does not declare "
            "(amount, currency)",
        ),
        ({"external_id": "x" * 201}, "external_id", "Ensure this field has no more than 200 characters."),
    ],
)
def test_an_intent_the_agent_cannot_work_with_is_refused_at_its_field(
    api: APIClient, agent: Agent, intent: Intent, change: dict[str, Any], field: str, message: str
) -> None:
    Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Other.", external_id="crm-1")
    before = stored()

    patched = api.patch(f"/api/v1/intents/{intent.pk}", change, format="json")
    posted = api.post(
        "/api/v1/intents", {"agent": str(agent.pk), "statement": "New.", **change}, format="json"
    )

    for response in (patched, posted):
        problems = invalid(response)
        assert list(problems) == [field]
        assert problems[field][0].startswith(message), problems
    assert stored() == before


def test_an_intent_is_for_an_agent_of_the_tenant(api: APIClient, seller: Agent) -> None:
    before = stored()

    response = api.post("/api/v1/intents", {"agent": str(seller.pk), "statement": "Spy."}, format="json")

    assert invalid(response) == {"agent": [f"This tenant has no agent with the id {seller.pk}."]}
    assert invalid(api.post("/api/v1/intents", {"agent": "nope", "statement": "x"}, format="json")) == {
        "agent": ["Must be a valid UUID."]
    }
    assert stored() == before


# --- Tools -------------------------------------------------------------------------------------------


def test_a_tool_round_trips_and_its_secret_is_write_only(api: APIClient, agent: Agent) -> None:
    sent = {
        "name": "refund",
        "kind": "host",
        "description": "Refund an order.",
        "parameters": SCHEMA,
        "url": "https://host.example/refund",
        "timeout": 5.5,
        "suspends": False,
        "requires_approval": True,
    }

    created = api.post("/api/v1/tools", {**sent, "secret": SECRET}, format="json")

    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in sent} == sent
    assert (body["has_secret"], body["agents"], body["target_agent"]) == (True, [], None)
    assert "secret" not in body
    tool = Tool.across_tenants.get(pk=body["id"])
    assert (tool.secret, tool.tenant) == (SECRET, agent.tenant)
    assert api.get(f"/api/v1/tools/{tool.pk}").json() == body

    api.patch(f"/api/v1/agents/{agent.pk}", {"tools": [tool.pk]}, format="json")
    changed = api.patch(f"/api/v1/tools/{tool.pk}", {"timeout": 9, "secret": "rotated-secret"}, format="json")

    assert changed.status_code == 200, changed.content
    assert (changed.json()["timeout"], changed.json()["agents"]) == (9.0, [str(agent.pk)])
    tool.refresh_from_db()
    assert (tool.timeout, tool.secret) == (9.0, "rotated-secret")

    refused = api.delete(f"/api/v1/tools/{tool.pk}")
    assert refused.status_code == 409
    assert (
        refused.json()["error"]["message"] == "Agents offer refund (Tomas's agent); take it off them first."
    )
    api.patch(f"/api/v1/agents/{agent.pk}", {"tools": []}, format="json")

    assert api.delete(f"/api/v1/tools/{tool.pk}").status_code == 204
    assert not Tool.across_tenants.filter(pk=tool.pk).exists()


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"parameters": {"type": "nonsense"}}, "parameters", "Not a valid JSON Schema"),
        (
            {"parameters": ["not", "an", "object"]},
            "parameters",
            "A JSON Schema for arguments must be a JSON object.",
        ),
        ({"url": ""}, "url", "A host operation needs the URL it calls."),
        ({"secret": ""}, "secret", "A host operation needs a secret to sign its calls."),
        ({"name": "taken"}, "name", "This tenant already has a tool with the name 'taken'."),
        ({"name": "bad name!"}, "name", "A tool name is 1 to 64 letters"),
        ({"kind": "builtin"}, "name", "Built-in tools are"),
        (
            {"name": "ask_user"},
            "name",
            "'ask_user' is the name of a built-in tool (answer, ask_user, negotiate): choose another "
            'name, or the kind "Built in" to offer the built-in.',
        ),
        ({"suspends": True}, "requires_approval", "A tool that asks the party needs no approval"),
        ({"timeout": 500}, "timeout", "Ensure this value is less than or equal to 240"),
        ({"kind": "agent"}, "target_agent", "Choose an agent of this tenant to run."),
    ],
)
def test_a_tool_that_cannot_run_is_refused_at_its_field(
    api: APIClient, tenant: Tenant, lookup: Tool, change: dict[str, Any], field: str, message: str
) -> None:
    Tool.objects.create(tenant=tenant, name="taken", kind=Tool.Kind.BUILTIN, description="x")
    lookup.requires_approval = True
    lookup.save()
    before = stored()

    response = api.patch(f"/api/v1/tools/{lookup.pk}", change, format="json")

    problems = invalid(response)
    assert list(problems) == [field]
    assert problems[field][0].startswith(message), problems
    assert stored() == before


def test_a_tool_runs_only_an_agent_of_the_tenant(api: APIClient, seller: Agent) -> None:
    before = stored()

    response = api.post(
        "/api/v1/tools",
        {"name": "ask-idris", "kind": "agent", "description": "x", "target_agent": str(seller.pk)},
        format="json",
    )

    assert invalid(response) == {"target_agent": [f"This tenant has no agent with the id {seller.pk}."]}
    assert stored() == before


def test_a_tool_that_is_no_built_in_cannot_take_a_built_ins_name(api: APIClient, agent: Agent) -> None:
    before = stored()

    response = api.post(
        "/api/v1/tools",
        {"name": "negotiate", "kind": "agent", "description": "x", "target_agent": str(agent.pk)},
        format="json",
    )

    assert invalid(response) == {
        "name": [
            "'negotiate' is the name of a built-in tool (answer, ask_user, negotiate): choose another "
            'name, or the kind "Built in" to offer the built-in.'
        ]
    }
    assert stored() == before
    built_in = {"name": "negotiate", "kind": "builtin", "description": "x"}
    assert api.post("/api/v1/tools", built_in, format="json").status_code == 201


# --- Model endpoints ---------------------------------------------------------------------------------


def test_a_model_endpoint_round_trips_and_its_api_key_is_write_only(api: APIClient, agent: Agent) -> None:
    sent = {
        "name": "fast",
        "base_url": "https://llm.example/v1",
        "upstream_model": "fast-2",
        "input_price": "0.150000",
        "output_price": "0.600000",
        "timeout": 30.0,
        "attempts": 2,
    }

    created = api.post(
        "/api/v1/model-endpoints", {**sent, "api_key": API_KEY, "currency": "eur"}, format="json"
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in sent} == sent
    assert (body["currency"], body["has_api_key"]) == ("EUR", True)
    endpoint = ModelEndpoint.across_tenants.get(pk=body["id"])
    assert endpoint.api_key == API_KEY
    assert api.get(f"/api/v1/model-endpoints/{endpoint.pk}").json() == body

    assert (
        api.patch(f"/api/v1/model-endpoints/{endpoint.pk}", {"attempts": 4}, format="json").status_code == 200
    )
    endpoint.refresh_from_db()
    assert (endpoint.attempts, endpoint.api_key) == (4, API_KEY)  # an absent key is kept
    cleared = api.patch(f"/api/v1/model-endpoints/{endpoint.pk}", {"api_key": ""}, format="json")
    assert cleared.json()["has_api_key"] is False

    api.patch(f"/api/v1/agents/{agent.pk}", {"model": "fast"}, format="json")
    before = stored()
    renamed = api.patch(f"/api/v1/model-endpoints/{endpoint.pk}", {"name": "faster"}, format="json")
    assert invalid(renamed) == {
        "name": ["Tomas's agent uses the name 'fast'; choose another model for them first."]
    }
    refused = api.delete(f"/api/v1/model-endpoints/{endpoint.pk}")
    assert refused.status_code == 409
    assert (
        refused.json()["error"]["message"] == "Tomas's agent uses fast; choose another model for them first."
    )
    assert stored() == before

    api.patch(f"/api/v1/agents/{agent.pk}", {"model": "offline"}, format="json")
    assert api.delete(f"/api/v1/model-endpoints/{endpoint.pk}").status_code == 204
    assert not ModelEndpoint.across_tenants.filter(pk=endpoint.pk).exists()


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"base_url": "https://user:pw@llm.example/v1"}, "base_url", "Give the URL without user:password@"),
        ({"base_url": "llm.example"}, "base_url", "Enter a valid URL."),
        ({"currency": "euro"}, "currency", "Ensure this field has no more than 3 characters."),
        ({"currency": "E1R"}, "currency", "A currency is three capital letters"),
        ({"input_price": "-1"}, "input_price", "Ensure this value is greater than or equal to 0."),
        ({"currency": "USD"}, "currency", "Tomas's agent also uses other in EUR"),
        ({"attempts": 0}, "attempts", "Ensure this value is greater than or equal to 1."),
    ],
)
def test_a_model_endpoint_that_cannot_work_is_refused_at_its_field(
    api: APIClient,
    tenant: Tenant,
    agent: Agent,
    house: ModelEndpoint,
    change: dict[str, Any],
    field: str,
    message: str,
) -> None:
    ModelEndpoint.objects.create(
        tenant=tenant, name="other", base_url="https://o.example/v1", upstream_model="o", currency="EUR"
    )
    agent.model, agent.fallback_models = "house", ["other"]
    agent.save()
    before = stored()

    response = api.patch(f"/api/v1/model-endpoints/{house.pk}", change, format="json")

    problems = invalid(response)
    assert list(problems) == [field]
    assert problems[field][0].startswith(message), problems
    assert stored() == before


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("offline", "'offline' is the built-in model; choose another name."),
        ("house", "This tenant already has a model endpoint with the name 'house'."),
        ("", "This field may not be blank."),
    ],
)
def test_a_model_endpoint_name_that_cannot_be_used_is_refused(
    api: APIClient, house: ModelEndpoint, name: str, message: str
) -> None:
    before = stored()

    response = api.post(
        "/api/v1/model-endpoints",
        {"name": name, "base_url": "https://l.example/v1", "upstream_model": "m"},
        format="json",
    )

    assert invalid(response) == {"name": [message]}
    assert stored() == before


# --- Grounding documents -----------------------------------------------------------------------------


def test_a_grounding_document_round_trips(api: APIClient, agent: Agent, intent: Intent) -> None:
    created = api.post(
        "/api/v1/grounding-documents",
        {"agent": str(agent.pk), "title": "Rates", "text": "Tomas pays up to 1,100 EUR a day."},
        format="json",
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["agent"], body["title"]) == (str(agent.pk), "Rates")
    document = GroundingDocument.across_tenants.get(pk=body["id"])
    assert (document.agent, document.tenant) == (agent, agent.tenant)
    assert api.get(f"/api/v1/grounding-documents/{document.pk}").json() == body
    listed = api.get("/api/v1/grounding-documents", {"agent": str(agent.pk)}).json()["results"]
    assert [d["id"] for d in listed] == [document.pk]

    changed = api.patch(
        f"/api/v1/grounding-documents/{document.pk}", {"text": "Up to 1,200 EUR."}, format="json"
    )

    assert changed.status_code == 200, changed.content
    assert (changed.json()["title"], changed.json()["text"]) == ("Rates", "Up to 1,200 EUR.")
    document.refresh_from_db()
    assert document.text == "Up to 1,200 EUR."

    assert api.delete(f"/api/v1/grounding-documents/{document.pk}").status_code == 204
    assert not GroundingDocument.across_tenants.filter(pk=document.pk).exists()


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"title": ""}, "title", "This field may not be blank."),
        ({"title": "x" * 201}, "title", "Ensure this field has no more than 200 characters."),
        ({"text": ""}, "text", "This field may not be blank."),
    ],
)
def test_a_grounding_document_without_a_title_or_text_is_refused(
    api: APIClient, document: GroundingDocument, change: dict[str, Any], field: str, message: str
) -> None:
    before = stored()

    patched = api.patch(f"/api/v1/grounding-documents/{document.pk}", change, format="json")
    posted = api.post(
        "/api/v1/grounding-documents",
        {"agent": str(document.agent_id), "title": "T", "text": "x", **change},
        format="json",
    )

    assert invalid(patched) == {field: [message]}
    assert invalid(posted) == {field: [message]}
    assert stored() == before


# --- Previews ----------------------------------------------------------------------------------------


def dashboard_card(client: Client, operator: AbstractUser, agent: Agent) -> dict[str, Any]:
    client.force_login(operator)
    page = client.get(reverse("a2a_gateway:card", kwargs={"tenant": "acme", "pk": agent.pk}))
    assert page.status_code == 200
    return {
        "url": page.context["card_url"],
        "card": json.loads(page.context["card_json"]),
        "host_name": {
            "url": page.context["host_card_url"],
            "card": json.loads(page.context["host_card_json"]),
        }
        if "host_card_url" in page.context
        else None,
    }


def test_the_card_preview_is_the_dashboards(
    api: APIClient, client: Client, operator: AbstractUser, agent: Agent, document: GroundingDocument
) -> None:
    agent.inbound_auth, agent.host_name = Agent.InboundAuth.API_KEY, "tomas.example.com"
    agent.card_fields = {"documentationUrl": "https://acme.example/tomas"}
    agent.save()

    response = api.get(f"/api/v1/agents/{agent.pk}/card")

    assert response.status_code == 200
    body = response.json()
    assert body == {**dashboard_card(client, operator, agent), "signed": False}
    assert body["url"].endswith("/a2a/acme/tomas/.well-known/agent-card.json")
    assert body["card"]["documentationUrl"] == "https://acme.example/tomas"
    assert [s["id"] for s in body["card"]["skills"]] == ["negotiate", "ask"]  # the document turns "ask" on
    assert body["host_name"]["card"]["url"].endswith("://tomas.example.com/")


def test_a_signed_card_preview_signs_what_the_dashboard_signs(
    api: APIClient, client: Client, operator: AbstractUser, agent: Agent
) -> None:
    signing_key_create(tenant=agent.tenant)

    body = api.get(f"/api/v1/agents/{agent.pk}/card").json()
    shown = dashboard_card(client, operator, agent)

    assert body["signed"] is True
    unsigned = {k: v for k, v in body["card"].items() if k != "signatures"}
    assert unsigned == {k: v for k, v in shown["card"].items() if k != "signatures"}
    # ECDSA signatures are randomised; what they sign and with which key is the same.
    assert body["card"]["signatures"][0]["protected"] == shown["card"]["signatures"][0]["protected"]


def test_the_instructions_preview_is_the_system_message_a_run_gets(
    api: APIClient, client: Client, operator: AbstractUser, agent: Agent, intent: Intent
) -> None:
    agent.timezone = "Europe/Berlin"
    agent.save()
    at = datetime(2030, 3, 5, 9, 30, tzinfo=ZoneInfo("Europe/Berlin"))

    response = api.get(
        f"/api/v1/agents/{agent.pk}/instructions", {"intent": str(intent.pk), "at": "2030-03-05T09:30"}
    )

    assert response.status_code == 200, response.content
    body = response.json()
    expected = system_message(agent=agent, intent=intent, now=at)
    assert body["system_message"] == expected
    assert "Today is Tuesday, 5 March 2030 (Europe/Berlin)." in expected
    assert "Current intent: Bring in a fractional CFO." in expected
    assert (body["intent"], body["statement"]) == (str(intent.pk), intent.statement)
    assert datetime.fromisoformat(body["at"]) == at
    client.force_login(operator)
    page = client.get(
        reverse("agents:system-message", kwargs={"tenant": "acme", "pk": agent.pk}),
        {"intent": str(intent.pk), "at": "2030-03-05T09:30"},
    )
    assert page.context["message"] == body["system_message"]


def test_the_instructions_preview_defaults_to_the_latest_intent_or_a_stand_in(
    api: APIClient, agent: Agent
) -> None:
    url = f"/api/v1/agents/{agent.pk}/instructions"
    stand_in = api.get(url, {"statement": "Sell ten days."}).json()
    assert stand_in["intent"] is None
    assert "Current intent: Sell ten days." in stand_in["system_message"]
    assert not Intent.across_tenants.exists()  # the preview writes nothing

    latest = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a CFO.")
    assert api.get(url).json()["intent"] == str(latest.pk)


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"intent": "not-a-uuid"}, "intent", "“not-a-uuid” is not a valid UUID."),
        (
            {"intent": "5f0c9a8e-0000-4000-8000-000000000000"},
            "intent",
            "Intent: choose one of this agent's intents.",
        ),
        ({"at": "yesterday"}, "at", "At: enter an ISO 8601 date and time"),
        ({"at": "0001-01-01T00:00"}, "at", "At: pick a time between the years 1900 and 2999."),
    ],
)
def test_a_bad_instructions_parameter_is_named(
    api: APIClient, agent: Agent, intent: Intent, query: dict[str, str], field: str, message: str
) -> None:
    problems = invalid(api.get(f"/api/v1/agents/{agent.pk}/instructions", query))
    assert list(problems) == [field]
    assert problems[field][0].startswith(message)


# --- Scopes, secrets, tenants, pages, idempotency ----------------------------------------------------


@pytest.fixture
def rows(
    agent: Agent, intent: Intent, lookup: Tool, house: ModelEndpoint, document: GroundingDocument
) -> dict[str, Any]:
    """One row of each resource, by its path."""
    return {
        "agents": agent.pk,
        "intents": intent.pk,
        "tools": lookup.pk,
        "model-endpoints": house.pk,
        "grounding-documents": document.pk,
    }


def test_a_read_key_reads_and_cannot_configure(
    tenant: Tenant, rows: dict[str, Any], key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> None:
    for scopes in [("read",), ("read", "write")]:
        client = client_for(key_for(tenant, scopes=scopes, name="-".join(scopes)))
        before = stored()
        for path, pk in rows.items():
            assert client.get(f"/api/v1/{path}").status_code == 200
            assert client.get(f"/api/v1/{path}/{pk}").status_code == 200
            for response in (
                client.post(f"/api/v1/{path}", {}, format="json"),
                client.patch(f"/api/v1/{path}/{pk}", {}, format="json"),
                client.delete(f"/api/v1/{path}/{pk}"),
            ):
                assert response.status_code == 403, (path, response.content)
                assert response.json()["error"]["message"] == (
                    "This API key lacks the 'admin' scope this operation needs."
                )
        agent = rows["agents"]
        assert client.get(f"/api/v1/agents/{agent}/card").status_code == 200
        assert client.get(f"/api/v1/agents/{agent}/instructions").status_code == 200
        assert client.get(f"/api/v1/agents/{agent}/term-guards").status_code == 200
        assert client.put(f"/api/v1/agents/{agent}/term-guards", [], format="json").status_code == 403
        assert stored() == before


def test_a_write_key_cannot_configure_or_read(
    tenant: Tenant, rows: dict[str, Any], key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> None:
    client = client_for(key_for(tenant, scopes=("write",)))
    before = stored()
    for path, pk in rows.items():
        assert client.post(f"/api/v1/{path}", {}, format="json").status_code == 403
        assert client.patch(f"/api/v1/{path}/{pk}", {}, format="json").status_code == 403
        assert client.get(f"/api/v1/{path}/{pk}").status_code == 403
    assert stored() == before


def test_an_admin_key_alone_configures(
    tenant: Tenant, rows: dict[str, Any], key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> None:
    client = client_for(key_for(tenant, scopes=("admin",)))

    response = client.patch(f"/api/v1/agents/{rows['agents']}", {"max_steps": 3}, format="json")

    assert response.status_code == 200
    assert Agent.across_tenants.get(pk=rows["agents"]).max_steps == 3


def test_secrets_never_appear_in_a_response(
    api: APIClient, rows: dict[str, Any], agent: Agent, lookup: Tool, house: ModelEndpoint
) -> None:
    agent.tools.set([lookup])
    responses = [
        api.get("/api/v1/tools"),
        api.get(f"/api/v1/tools/{lookup.pk}"),
        api.patch(f"/api/v1/tools/{lookup.pk}", {"secret": SECRET}, format="json"),
        api.post(
            "/api/v1/tools",
            {"name": "t2", "kind": "host", "description": "x", "url": "https://h.example/", "secret": SECRET},
            format="json",
            HTTP_IDEMPOTENCY_KEY="tool-1",
        ),
        api.get("/api/v1/model-endpoints"),
        api.get(f"/api/v1/model-endpoints/{house.pk}"),
        api.patch(f"/api/v1/model-endpoints/{house.pk}", {"api_key": API_KEY}, format="json"),
        api.post(
            "/api/v1/model-endpoints",
            {"name": "m2", "base_url": "https://l.example/v1", "upstream_model": "m", "api_key": API_KEY},
            format="json",
            HTTP_IDEMPOTENCY_KEY="endpoint-1",
        ),
        api.get("/api/v1/agents"),
        api.get(f"/api/v1/agents/{agent.pk}"),
        api.get(f"/api/v1/agents/{agent.pk}/card"),
        api.get("/api/v1/schema"),
    ]
    responses.append(
        api.post(
            "/api/v1/tools",
            {"name": "t2", "kind": "host", "description": "x", "url": "https://h.example/", "secret": SECRET},
            format="json",
            HTTP_IDEMPOTENCY_KEY="tool-1",
        )
    )

    assert all(r.status_code in (200, 201) for r in responses), [r.status_code for r in responses]
    assert responses[-1].headers["Idempotent-Replayed"] == "true"
    for response in responses:
        assert SECRET.encode() not in response.content
        assert API_KEY.encode() not in response.content


def test_another_tenants_rows_are_not_found_and_stay_as_they_were(
    other_api: APIClient, rows: dict[str, Any]
) -> None:
    before = stored()
    for path, pk in rows.items():
        for response in (
            other_api.get(f"/api/v1/{path}/{pk}"),
            other_api.patch(
                f"/api/v1/{path}/{pk}", {"name": "stolen", "title": "x", "statement": "x"}, format="json"
            ),
            *([] if path == "intents" else [other_api.delete(f"/api/v1/{path}/{pk}")]),
        ):
            assert response.status_code == 404, (path, response.content)
            assert response.json()["error"]["code"] == "not_found"
        assert other_api.get(f"/api/v1/{path}").json()["results"] == []
    agent = rows["agents"]
    for action in ("card", "instructions", "term-guards"):
        assert other_api.get(f"/api/v1/agents/{agent}/{action}").status_code == 404
    assert other_api.put(f"/api/v1/agents/{agent}/term-guards", [], format="json").status_code == 404
    assert stored() == before


def test_another_tenants_ids_and_members_named_in_a_body_or_filter_are_refused(
    api: APIClient,
    other_api: APIClient,
    rows: dict[str, Any],
    seller: Agent,
    foreign_tool: Tool,
    foreign_member: AbstractUser,
    intent: Intent,
) -> None:
    agent = rows["agents"]
    private = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Private.")
    before = stored()

    assert invalid(
        other_api.post("/api/v1/intents", {"agent": str(agent), "statement": "x"}, format="json")
    ) == {"agent": [f"This tenant has no agent with the id {agent}."]}
    assert list(invalid(other_api.get("/api/v1/intents", {"agent": str(agent)}))) == ["agent"]
    assert list(invalid(other_api.get("/api/v1/grounding-documents", {"agent": str(agent)}))) == ["agent"]
    assert list(invalid(api.get("/api/v1/agents", {"principal": "gus"}))) == ["principal"]
    assert invalid(api.patch(f"/api/v1/agents/{agent}", {"tools": [foreign_tool.pk]}, format="json")) == {
        "tools": [f"This tenant has no tool with the id {foreign_tool.pk}."]
    }
    assert invalid(api.patch(f"/api/v1/agents/{agent}", {"principal": "gus"}, format="json")) == {
        "principal": ["No member of this tenant has the username gus."]
    }
    assert list(invalid(api.patch(f"/api/v1/agents/{agent}", {"intake_owner": "gus"}, format="json"))) == [
        "intake_owner"
    ]
    assert list(
        invalid(
            api.post(
                "/api/v1/grounding-documents",
                {"agent": str(seller.pk), "title": "t", "text": "x"},
                format="json",
            )
        )
    ) == ["agent"]
    assert list(invalid(api.get(f"/api/v1/agents/{agent}/instructions", {"intent": str(private.pk)}))) == [
        "intent"
    ]
    assert stored() == before


@pytest.mark.parametrize("path", ["agents", "intents", "tools", "model-endpoints", "grounding-documents"])
def test_lists_are_paged_by_cursor(api: APIClient, rows: dict[str, Any], tenant: Tenant, path: str) -> None:
    second = {
        "agents": lambda: api.post("/api/v1/agents", {"slug": "b", "name": "B"}, format="json"),
        "intents": lambda: api.post(
            "/api/v1/intents", {"agent": str(rows["agents"]), "statement": "B"}, format="json"
        ),
        "tools": lambda: api.post(
            "/api/v1/tools", {"name": "ask_user", "kind": "builtin", "description": "B"}, format="json"
        ),
        "model-endpoints": lambda: api.post(
            "/api/v1/model-endpoints",
            {"name": "b", "base_url": "https://b.example", "upstream_model": "b"},
            format="json",
        ),
        "grounding-documents": lambda: api.post(
            "/api/v1/grounding-documents",
            {"agent": str(rows["agents"]), "title": "B", "text": "B"},
            format="json",
        ),
    }[path]()
    assert second.status_code == 201, second.content

    first = api.get(f"/api/v1/{path}", {"page_size": 1}).json()

    assert [r["id"] for r in first["results"]] == [second.json()["id"]]  # newest first
    assert "cursor=" in first["next"]
    following = api.get(first["next"]).json()
    assert [str(r["id"]) for r in following["results"]] == [str(rows[path])]
    assert following["next"] is None


def test_a_post_with_an_idempotency_key_is_answered_once(api: APIClient, agent: Agent) -> None:
    body = {"agent": str(agent.pk), "statement": "Hire a CFO.", "external_id": "crm-7"}

    first = api.post("/api/v1/intents", body, format="json", HTTP_IDEMPOTENCY_KEY="intent-7")
    again = api.post("/api/v1/intents", body, format="json", HTTP_IDEMPOTENCY_KEY="intent-7")

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Intent.across_tenants.filter(agent=agent).count() == 1
