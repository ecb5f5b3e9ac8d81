"""The runs page and the ways to it: the navigation, the inbox, an agent's page and a negotiation's page
all lead to runs; the list shows what the member may see, filtered and a page at a time."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from agents.models import Agent, Intent, Run
from negotiations.models import Batch, Negotiation
from parley.models import Membership, Tenant
from tests.agents.pages import member, run_url
from tests.negotiations.pages import outbound

pytestmark = pytest.mark.django_db


def runs_url(tenant: Tenant, **filters: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    return reverse("agents:run-list", kwargs={"tenant": tenant.slug}) + (f"?{query}" if query else "")


def listed(client: Client, url: str) -> list[str]:
    """The run ids the page at ``url`` links to in its table, in order."""
    response = client.get(url)
    assert response.status_code == 200
    return re.findall(r'<th scope="row"><a href="/t/[^/]+/runs/([0-9a-f-]{36})/">', response.content.decode())


def new_run(agent: Agent, intent: Intent, status: str = Run.Status.DONE) -> Run:
    return Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=status, step_count=2)


@pytest.fixture
def second_agent(tenant: Tenant) -> Agent:
    """Another party's agent in the same tenant."""
    lena = member(tenant, "lena", Membership.Role.PRINCIPAL)
    return Agent.objects.create(tenant=tenant, slug="lena", name="Lena's agent", principal=lena)


def test_a_principal_lists_their_own_agents_runs_and_staff_every_partys(
    client: Client,
    principal: AbstractUser,
    operator: AbstractUser,
    agent: Agent,
    intent: Intent,
    second_agent: Agent,
) -> None:
    mine = new_run(agent, intent)
    theirs = new_run(
        second_agent, Intent.objects.create(tenant=second_agent.tenant, agent=second_agent, statement="x")
    )

    client.force_login(principal)
    assert listed(client, runs_url(agent.tenant)) == [str(mine.pk)]
    client.force_login(operator)
    assert listed(client, runs_url(agent.tenant)) == [str(theirs.pk), str(mine.pk)]


def test_another_tenants_runs_are_not_listed_and_its_agent_is_no_filter(
    client: Client, operator: AbstractUser, agent: Agent, intent: Intent, seller: Agent
) -> None:
    new_run(agent, intent)
    new_run(seller, Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell days."))
    client.force_login(operator)

    assert len(listed(client, runs_url(agent.tenant))) == 1
    response = client.get(runs_url(agent.tenant, agent=str(seller.pk)))
    assert listed(client, runs_url(agent.tenant, agent=str(seller.pk))) == []
    assert "Choose one of this tenant&#x27;s agents." in response.content.decode()
    # Another tenant's runs page is a 404, like a tenant that does not exist.
    assert client.get(runs_url(seller.tenant)).status_code == 404


def test_the_filters_narrow_by_agent_intent_and_status(
    client: Client, operator: AbstractUser, agent: Agent, intent: Intent, second_agent: Agent
) -> None:
    other_intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a designer.")
    done = new_run(agent, intent)
    waiting = new_run(agent, other_intent, status=Run.Status.NEEDS_INPUT)
    new_run(second_agent, Intent.objects.create(tenant=agent.tenant, agent=second_agent, statement="y"))
    client.force_login(operator)

    assert listed(client, runs_url(agent.tenant, agent=str(agent.pk))) == [str(waiting.pk), str(done.pk)]
    assert listed(client, runs_url(agent.tenant, intent=str(intent.pk))) == [str(done.pk)]
    assert listed(client, runs_url(agent.tenant, status="needs_input")) == [str(waiting.pk)]
    response = client.get(runs_url(agent.tenant, status="sleeping"))
    assert "Choose a status from the list." in response.content.decode()
    assert listed(client, runs_url(agent.tenant, status="sleeping")) == []


def test_runs_are_listed_fifty_a_page_and_the_pager_keeps_the_filters(
    client: Client, operator: AbstractUser, agent: Agent, intent: Intent
) -> None:
    runs = [new_run(agent, intent) for _ in range(51)]
    client.force_login(operator)

    first = listed(client, runs_url(agent.tenant, agent=str(agent.pk)))
    second = listed(client, runs_url(agent.tenant, agent=str(agent.pk), page="2"))

    assert (len(first), len(second)) == (50, 1)
    assert set(first + second) == {str(r.pk) for r in runs}
    page = client.get(runs_url(agent.tenant, agent=str(agent.pk))).content.decode()
    assert f'href="?agent={agent.pk}&amp;page=2" rel="next"' in page
    assert f'data-live-src="/t/acme/runs/?agent={agent.pk}&amp;fragment=1"' in page


def test_the_fragment_is_the_live_region_alone(
    client: Client, operator: AbstractUser, agent: Agent, intent: Intent
) -> None:
    run = new_run(agent, intent)
    client.force_login(operator)

    body = client.get(runs_url(agent.tenant, fragment="1")).content.decode()

    assert body.lstrip().startswith('<div data-live="runs" data-announce="1 run">')
    assert run_url(run) in body
    assert "<nav" not in body.split("</table>")[0]


@pytest.mark.parametrize("role", list(Membership.Role))
def test_every_member_finds_the_runs_page_in_the_navigation(
    client: Client, tenant: Tenant, role: str
) -> None:
    client.force_login(member(tenant, f"m-{role}", role))

    inbox = client.get(reverse("agents:inbox", kwargs={"tenant": tenant.slug})).content.decode()
    runs = client.get(runs_url(tenant)).content.decode()

    assert '<a href="/t/acme/runs/">Runs</a>' in inbox
    assert '<a href="/t/acme/runs/" aria-current="page">Runs</a>' in runs
    assert '<a href="/t/acme/runs/">Every run</a>' in inbox


def test_an_agents_page_leads_to_its_runs(client: Client, principal: AbstractUser, agent: Agent) -> None:
    client.force_login(principal)

    page = client.get(
        reverse("agents:agent", kwargs={"tenant": agent.tenant.slug, "pk": agent.pk})
    ).content.decode()

    assert f'<a href="/t/acme/runs/?agent={agent.pk}">Runs of this agent</a>' in page


def test_a_negotiations_page_leads_to_the_run_that_negotiates_it(
    client: Client, principal: AbstractUser, agent: Agent, intent: Intent
) -> None:
    run = new_run(agent, intent, status=Run.Status.WAITING)
    negotiation = outbound(agent, "Idris Haddad", intent=intent)
    negotiation.batch = Batch.objects.create(tenant=agent.tenant, run=run, tool_call_id="call-1")
    negotiation.save(update_fields=["batch"])
    inbound = Negotiation.objects.create(
        tenant=agent.tenant, agent=agent, direction=Negotiation.Direction.INBOUND, task_id="t-in"
    )
    client.force_login(principal)

    def page(n: Negotiation) -> str:
        return client.get(
            reverse("negotiations:detail", kwargs={"tenant": "acme", "pk": n.pk})
        ).content.decode()

    assert f'<a href="{run_url(run)}">the run that negotiates it</a>' in page(negotiation)
    assert "none: the agent answers an inbound negotiation outside a run" in page(inbound)
