"""Who may start a run is the service's rule (:func:`agents.services.runs.require_may_start`), as for
answering and cancelling: the start page, the agent page and every caller that names a member go
through :func:`agents.services.runs.run_start`; the host through its API and the platform name none."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agents.models import Agent, Intent, Run
from agents.services import runs
from parley.models import Membership, Tenant
from tests.agents.pages import member, start_url

pytestmark = pytest.mark.django_db

REFUSED = "Only the agent's party, an owner or an operator can start its runs."


def test_a_viewer_or_another_party_is_refused_before_anything_is_read(tenant: Tenant, agent: Agent) -> None:
    """Refused before the task is read: an empty one is not what they hear about; nothing is written."""
    for user in (
        member(tenant, "vera", Membership.Role.VIEWER),
        member(tenant, "pia", Membership.Role.PRINCIPAL),
    ):
        with pytest.raises(runs.NotAllowed, match=REFUSED):
            runs.run_start(agent=agent, statement="A new thread.", task="", user=user)

    assert not Run.across_tenants.exists()
    assert not Intent.across_tenants.exists()


def test_the_party_an_operator_and_the_host_start(
    tenant: Tenant, agent: Agent, intent: Intent, principal: AbstractUser, operator: AbstractUser
) -> None:
    agent.on_busy = Agent.OnBusy.QUEUE
    agent.save()

    started = [
        runs.run_start(agent=agent, intent=intent, task="Go.", user=user)
        for user in (principal, operator, None)
    ]

    assert [run.status for run in started] == [Run.Status.QUEUED, Run.Status.PENDING, Run.Status.PENDING]


def test_the_agent_page_refuses_a_viewer_whatever_they_post(
    client: Client, tenant: Tenant, agent: Agent
) -> None:
    """The service is asked before the form is read: invalid input is a 403 too, not a form."""
    client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

    response = client.post(start_url(agent), {"task": ""})

    assert response.status_code == 403
    assert REFUSED.replace("'", "&#x27;") in response.content.decode()
    assert not Run.across_tenants.exists()
