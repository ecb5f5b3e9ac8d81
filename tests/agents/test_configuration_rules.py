"""The configuration's rules live in the service (:mod:`agents.configuration`), and the operator's
pages save through it as the host API does: the models keep only their fields' own checks, and a
page refuses what the API refuses, in the same words."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from agents import configuration
from agents.models import Agent, ModelEndpoint, Tool
from parley.models import Membership, Tenant
from parley.services import api_key_create
from tests.agents.pages import member
from tests.agents.test_config_pages import errors_of, page_form, snapshot, url

pytestmark = pytest.mark.django_db

GONE = "No model endpoint of this tenant is named 'gone'."


def test_a_model_keeps_only_the_checks_of_its_own_fields(tenant: Tenant) -> None:
    """The rules that read other rows or the registries (members, endpoints, built-in tools) are the
    service's: the model alone lets them pass."""
    viewer = member(tenant, "vera", Membership.Role.VIEWER)
    agent = Agent(tenant=tenant, slug="vera", name="Vera", model="nowhere", principal=viewer)
    tool = Tool(tenant=tenant, name="ask_user", kind=Tool.Kind.HOST, description="Not the built-in.")
    endpoint = ModelEndpoint(
        tenant=tenant, name="house", base_url="https://llm.example/v1", upstream_model="m"
    )

    for row in (agent, tool, endpoint):
        row.full_clean()
    with pytest.raises(ValidationError) as refused:
        configuration.full_clean(agent)
    assert set(refused.value.message_dict) == {"principal"}  # the people first: the models wait on them
    agent.principal = None
    with pytest.raises(ValidationError) as refused:
        configuration.full_clean(agent)
    assert set(refused.value.message_dict) == {"model"}
    with pytest.raises(ValidationError) as refused:
        configuration.full_clean(tool)
    assert set(refused.value.message_dict) == {"name"}
    configuration.full_clean(endpoint)


def test_the_page_refuses_a_fallback_the_api_refuses(
    client: Client, tenant: Tenant, agent: Agent, operator: AbstractUser, owner: AbstractUser
) -> None:
    """A fallback no endpoint serves is judged only with a model that is not offline by the model
    check; the service refuses it whatever the model, on the page as through the API (a ModelForm
    saving the row itself kept it)."""
    Agent.across_tenants.filter(pk=agent.pk).update(fallback_models=["gone"])
    agent.refresh_from_db()
    before = snapshot(agent)
    client.force_login(operator)
    data = page_form(client, url("agent-edit", pk=agent.pk))
    assert data["fallback_models_0"] == ["gone"]
    data["name"] = ["Renamed"]

    response = client.post(url("agent-edit", pk=agent.pk), data)

    assert errors_of(response, "fallback_models") == [GONE]
    raw = api_key_create(tenant=tenant, name="backend", scopes=("admin",), user=owner)[1]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    refused = api.patch(f"/api/v1/agents/{agent.pk}", {"name": "Renamed"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"]["fallback_models"] == [GONE]
    assert snapshot(agent) == before
