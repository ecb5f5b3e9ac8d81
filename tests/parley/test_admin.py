"""The admin is where a new deployment's first tenants, members and agents are made."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import DEFAULT_ACTIONS, Agent, Intent, Tool
from parley.models import Tenant

AGENT_FORM = {
    "slug": "tomas",
    "name": "Tomas's agent",
    "version": "1.0.0",
    "terms": "amount (number, EUR per day)",
    "allowed_actions": json.dumps(DEFAULT_ACTIONS),
    "term_guards": "[]",
    "model": "offline",
    "strategy": "boulware",
    "turn_timeout": 180,
    "max_steps": 10,
    "max_turns": 10,
    "timezone": "UTC",
    "history": "append_only",
    "history_window": 20,
    "on_busy": "refuse",
    "fallback_models": "[]",
    "inbound_auth": "anonymous",
    "card_skills": "[]",
    "card_fields": "{}",
    "max_concurrency": 8,
    "max_input_chars": 8000,
    "max_turns_per_context": 50,
    "max_contexts": 1000,
    "rate_limit": 60,
    "cors_origins": "[]",
    "try_again_text": "I could not answer in time. Please try again in a moment.",
    "intents-TOTAL_FORMS": 0,
    "intents-INITIAL_FORMS": 0,
}


@pytest.mark.django_db
def test_a_superuser_creates_an_agent_with_an_intent(client: Client) -> None:
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    intent_form = {
        "intents-TOTAL_FORMS": 1,
        "intents-0-statement": "Bring in a fractional CFO.",
        "intents-0-external_id": "cfo",
    }
    response = client.post(
        "/admin/agents/agent/add/", {**AGENT_FORM, "tenant": tenant.pk, "guardrails": "[]", **intent_form}
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent = Agent.across_tenants.get(tenant=tenant, slug="tomas")
    intent = Intent.across_tenants.get(agent=agent)
    assert (intent.tenant_id, intent.statement) == (tenant.pk, "Bring in a fractional CFO.")
    for page in ("/admin/parley/tenant/", "/admin/agents/run/", "/admin/negotiations/negotiation/"):
        assert client.get(page).status_code == 200


@pytest.fixture
def root(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("guardrails", "message"),
    [
        (
            [{"name": "no-email", "stage": "inbound", "action": "redact", "match": "email"}],
            'guardrails[0].stage: "inbound" is not one of "input", "output".',
        ),
        # Valid JSON of the wrong shape, in the check's words, not the JSON field's "Enter a valid JSON.".
        ({"not": "a list"}, "guardrails: must be a list."),
        (
            [{"name": "x", "stage": "output", "action": "block", "match": "regex", "pattern": "("}],
            "guardrails[0].pattern: does not compile (missing ), unterminated subpattern at position 0).",
        ),
    ],
)
def test_an_agent_refuses_a_malformed_guardrail_naming_it(
    root: Client, guardrails: object, message: str
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    response = root.post(
        "/admin/agents/agent/add/", {**AGENT_FORM, "tenant": tenant.pk, "guardrails": json.dumps(guardrails)}
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["guardrails"] == [message]
    assert not Agent.across_tenants.exists()


@pytest.mark.django_db
def test_an_agent_refuses_another_tenants_tool(root: Client) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    other = Tenant.objects.create(slug="globex", name="Globex")
    theirs = Tool.objects.create(tenant=other, name="ask_user", description="", kind=Tool.Kind.BUILTIN)
    response = root.post(
        "/admin/agents/agent/add/",
        {**AGENT_FORM, "tenant": tenant.pk, "guardrails": "[]", "tools": [theirs.pk]},
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["tools"] == ["Choose tools of the agent's own tenant."]
    assert not Agent.across_tenants.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"name": "fetch", "kind": "builtin"}, "name", "Built-in tools are"),
        (
            {"name": "lookup", "kind": "host", "secret": "s"},
            "url",
            "A host operation needs the URL it calls.",
        ),
        (
            {"name": "lookup", "kind": "host", "url": "https://h.example/x"},
            "secret",
            "A host operation needs a",
        ),
        ({"name": "helper", "kind": "agent"}, "target_agent", "Choose an agent of this tenant to run."),
        ({"name": "bad name!", "kind": "builtin"}, "name", "A tool name is 1 to 64 letters"),
        (
            {
                "name": "lookup",
                "kind": "host",
                "url": "https://h.example/x",
                "secret": "s",
                "parameters": '{"type": 5}',
            },
            "parameters",
            "Not a valid JSON Schema: schema.type: 5 is not valid",
        ),
    ],
)
def test_a_tool_that_cannot_run_as_its_kind_says_is_refused(
    root: Client, fields: dict[str, str], field: str, message: str
) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    form = {"tenant": tenant.pk, "description": "d", "parameters": "{}", "timeout": 10, **fields}

    response = root.post("/admin/agents/tool/add/", form)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors
    assert errors[field][0].startswith(message)
    assert not Tool.across_tenants.exists()


@pytest.mark.django_db
def test_a_host_operation_tool_is_created(root: Client) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    form = {
        "tenant": tenant.pk,
        "name": "lookup",
        "description": "Look an order up.",
        "parameters": json.dumps({"type": "object", "properties": {"order": {"type": "string"}}}),
        "kind": "host",
        "url": "https://host.example/lookup",
        "secret": "s3cret",
        "timeout": 5,
        "requires_approval": "on",
    }

    response = root.post("/admin/agents/tool/add/", form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    tool = Tool.across_tenants.get(tenant=tenant, name="lookup")
    assert (tool.kind, tool.requires_approval, tool.parameters["properties"]) == (
        "host",
        True,
        {"order": {"type": "string"}},
    )
