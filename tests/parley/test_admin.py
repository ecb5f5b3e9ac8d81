"""The admin is where a new deployment's first tenants, members and agents are made."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import DEFAULT_ACTIONS, Agent, Intent
from parley.models import Tenant


@pytest.mark.django_db
def test_a_superuser_creates_an_agent_with_an_intent(client: Client) -> None:
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    response = client.post(
        "/admin/agents/agent/add/",
        {
            "tenant": tenant.pk,
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
            "intents-TOTAL_FORMS": 1,
            "intents-INITIAL_FORMS": 0,
            "intents-0-statement": "Bring in a fractional CFO.",
            "intents-0-external_id": "cfo",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent = Agent.objects.get(tenant=tenant, slug="tomas")
    intent = Intent.objects.get(agent=agent)
    assert (intent.tenant_id, intent.statement) == (tenant.pk, "Bring in a fractional CFO.")
    for page in ("/admin/parley/tenant/", "/admin/agents/run/", "/admin/negotiations/negotiation/"):
        assert client.get(page).status_code == 200
