"""The rules agents, tools and model endpoints are judged by (:func:`agents.configuration.full_clean`:
their fields' own checks and the configuration's rules), so that every way of saving them (the
operator's pages, the admin, the host API) refuses what cannot work, each at its field."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.test import Client

from agents import configuration
from agents.models import Agent, ModelEndpoint, Tool
from parley.models import Membership, Tenant
from tests.agents.pages import member
from tests.parley.test_admin import AGENT_FORM

pytestmark = pytest.mark.django_db


def refused(row: Model, **fields: Any) -> dict[str, list[str]]:
    """What :func:`agents.configuration.full_clean` says of ``row`` with ``fields`` set."""
    for name, value in fields.items():
        setattr(row, name, value)
    with pytest.raises(ValidationError) as caught:
        configuration.full_clean(row)
    return caught.value.message_dict


def endpoint(tenant: Tenant, name: str, currency: str = "EUR") -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        tenant=tenant,
        name=name,
        base_url="https://llm.example/v1",
        upstream_model=f"{name}-1",
        currency=currency,
    )


@pytest.fixture
def house(tenant: Tenant) -> ModelEndpoint:
    return endpoint(tenant, "house")


@pytest.fixture
def host_tool(tenant: Tenant) -> Tool:
    return Tool(
        tenant=tenant,
        name="lookup",
        kind=Tool.Kind.HOST,
        description="Look an order up.",
        url="https://host.example/lookup",
        secret="s3cret",
    )


# --- Agents ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        # Every inbound turn would time out at once (asyncio.wait_for(timeout <= 0)).
        ("turn_timeout", 0.0, "Ensure this value is greater than or equal to 0.1."),
        ("turn_timeout", -5.0, "Ensure this value is greater than or equal to 0.1."),
        ("turn_timeout", 1e308, "Ensure this value is less than or equal to 3600.0."),
        ("max_steps", 0, "Ensure this value is greater than or equal to 1."),
        ("max_turns", 0, "Ensure this value is greater than or equal to 1."),
        # A cap of 0 takes nothing (a2a_gateway.caps): the public endpoint would refuse everyone.
        ("rate_limit", 0, "Ensure this value is greater than or equal to 1."),
        ("max_concurrency", 0, "Ensure this value is greater than or equal to 1."),
        ("max_input_chars", 0, "Ensure this value is greater than or equal to 1."),
        ("max_turns_per_context", 0, "Ensure this value is greater than or equal to 1."),
        ("max_contexts", 0, "Ensure this value is greater than or equal to 1."),
    ],
)
def test_an_agent_that_cannot_work_is_refused_at_its_field(
    agent: Agent, field: str, value: Any, message: str
) -> None:
    assert refused(agent, **{field: value}) == {field: [message]}


def test_the_bounds_themselves_are_accepted(agent: Agent) -> None:
    agent.turn_timeout, agent.max_steps, agent.rate_limit = 0.1, 1, 1
    configuration.full_clean(agent)
    agent.turn_timeout = 3600.0
    configuration.full_clean(agent)


@pytest.mark.parametrize(
    "field", ["term_guards", "guardrails", "fallback_models", "card_skills", "card_fields"]
)
def test_a_null_json_setting_is_refused_at_its_field(agent: Agent, field: str) -> None:
    """Blank JSON settings are [] or {}; null passes Django's field check but not the NOT NULL column."""
    assert refused(agent, **{field: None})[field] == ["Give a JSON value, not null."]


@pytest.mark.parametrize("role", [Membership.Role.OWNER, Membership.Role.OPERATOR, Membership.Role.PRINCIPAL])
def test_a_member_who_can_answer_may_be_the_principal(agent: Agent, tenant: Tenant, role: str) -> None:
    agent.principal = member(tenant, "pat", role)
    configuration.full_clean(agent)


def test_a_viewer_cannot_be_an_agents_principal(agent: Agent, tenant: Tenant) -> None:
    """A viewer may never answer (agents.selectors.can_answer_as): the agent's questions would have
    a party who cannot answer them."""
    viewer = member(tenant, "vera", Membership.Role.VIEWER)

    assert refused(agent, principal=viewer) == {
        "principal": ["A viewer cannot answer for an agent; choose a member who can."]
    }


def test_the_principal_and_the_intake_owner_are_members_of_the_tenant(
    agent: Agent, tenant: Tenant, other_tenant: Tenant
) -> None:
    stranger = member(other_tenant, "gus", Membership.Role.OWNER)

    assert refused(agent, principal=stranger, intake_owner=stranger) == {
        "principal": ["The principal must be a member of this tenant."],
        "intake_owner": ["The intake owner must be a member of this tenant."],
    }
    agent.principal = None
    agent.intake_owner = member(tenant, "vera", Membership.Role.VIEWER)  # receiving requests is reading
    configuration.full_clean(agent)


# --- Tools -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        (0.0, "Ensure this value is greater than or equal to 0.1."),
        # Waiting on it would raise OverflowError; past a run step's time limit it would never time out.
        (1e308, "Ensure this value is less than or equal to 240.0."),
        (241.0, "Ensure this value is less than or equal to 240.0."),
    ],
)
def test_a_tool_timeout_outside_what_a_run_step_can_wait_is_refused(
    host_tool: Tool, timeout: float, message: str
) -> None:
    assert refused(host_tool, timeout=timeout) == {"timeout": [message]}


def test_a_tool_timeout_at_the_bound_is_accepted(host_tool: Tool) -> None:
    host_tool.timeout = 240.0
    configuration.full_clean(host_tool)


# --- Model endpoints ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        # A negative price lowers spend: runs would defeat the tenant's budget and a run's max_cost.
        ({"input_price": Decimal(-5)}, "input_price", "Ensure this value is greater than or equal to 0."),
        (
            {"output_price": Decimal("-0.01")},
            "output_price",
            "Ensure this value is greater than or equal to 0.",
        ),
        ({"timeout": 1e308}, "timeout", "Ensure this value is less than or equal to 240.0."),
        ({"name": "offline"}, "name", "'offline' is the built-in model; choose another name."),
        (
            {"base_url": "https://me:secret@llm.example/v1"},
            "base_url",
            "Give the URL without user:password@; the API key is for credentials.",
        ),
        (
            {"base_url": "https://me@llm.example/v1"},
            "base_url",
            "Give the URL without user:password@; the API key is for credentials.",
        ),
        *(
            (
                {"currency": code},
                "currency",
                "A currency is three capital letters, its ISO 4217 code: EUR, USD, GBP.",
            )
            for code in ("eur", "EU", "E1R", "€€€", "US\n")
        ),
    ],
)
def test_a_model_endpoint_that_cannot_work_is_refused_at_its_field(
    house: ModelEndpoint, fields: dict[str, Any], field: str, message: str
) -> None:
    assert refused(house, **fields) == {field: [message]}


def test_a_model_endpoint_with_zero_prices_is_accepted(house: ModelEndpoint) -> None:
    house.input_price = house.output_price = Decimal(0)
    configuration.full_clean(house)


def test_an_endpoint_cannot_be_priced_in_another_currency_than_the_models_an_agent_uses_with_it(
    tenant: Tenant, agent: Agent, house: ModelEndpoint
) -> None:
    """An agent's model and fallbacks share one currency (agents.llm.model_for): changing one
    endpoint's currency would leave the agent unable to run."""
    backup = endpoint(tenant, "backup")
    endpoint(tenant, "dollars", currency="USD")  # not the agent's: does not count
    agent.model, agent.fallback_models = "house", ["offline", "backup"]
    agent.save()

    assert refused(backup, currency="USD") == {
        "currency": [
            "Tomas's agent also uses house in EUR; an agent's models are priced in one currency. "
            "Choose other models for them first."
        ]
    }
    house.currency = "EUR"
    configuration.full_clean(house)  # unchanged: fine
    agent.fallback_models = ["offline"]
    agent.save()
    house.currency = "USD"
    configuration.full_clean(house)  # the agent's only endpoint: its currency is the agent's


def test_the_admin_refuses_a_viewer_as_principal(client: Client, tenant: Tenant) -> None:
    """The admin's form runs the model's checks, so it refuses what the operator's pages refuse."""
    viewer = member(tenant, "vera", Membership.Role.VIEWER)
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))

    response = client.post(
        "/admin/agents/agent/add/",
        {**AGENT_FORM, "tenant": tenant.pk, "guardrails": "[]", "principal": viewer.pk},
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["principal"] == [
        "A viewer cannot answer for an agent; choose a member who can."
    ]
    assert not Agent.across_tenants.filter(tenant=tenant).exists()
