"""One party of a tenant never sees another party's agents, runs, questions or negotiations: those are
a 404 to them, as another tenant's are. Owners, operators and viewers see every party's."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from agents.models import Agent, Intent, Question, Run
from negotiations.models import Negotiation
from parley.models import Membership, Tenant
from tests.agents.pages import waiting_question
from tests.parley.tenancy import member

pytestmark = pytest.mark.django_db

SECRET = "Priya's floor is 900 EUR a day."


@pytest.fixture
def hers(tenant: Tenant) -> tuple[Agent, Question, Negotiation]:
    """Priya's agent, with a run waiting on her question and a negotiation under its intent."""
    priya = member(tenant, "priya", Membership.Role.PRINCIPAL)
    agent = Agent.objects.create(tenant=tenant, slug="priya", name="Priya's agent", principal=priya)
    intent = Intent.objects.create(tenant=tenant, agent=agent, statement="Hire a CFO.")
    question = waiting_question(agent, intent, text=SECRET)
    negotiation = Negotiation.objects.create(
        tenant=tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_name="Idris Haddad",
        objective=SECRET,
    )
    return agent, question, negotiation


def pages(agent: Agent, question: Question, negotiation: Negotiation) -> list[str]:
    kwargs = {"tenant": "acme"}
    return [
        reverse("agents:agent", kwargs={**kwargs, "pk": agent.pk}),
        reverse("agents:run", kwargs={**kwargs, "pk": question.run_id}),
        reverse("negotiations:detail", kwargs={**kwargs, "pk": negotiation.pk}),
    ]


def test_another_partys_pages_are_404_to_a_party(
    logged_in: Client, hers: tuple[Agent, Question, Negotiation]
) -> None:
    for url in pages(*hers):
        response = logged_in.get(url)
        assert response.status_code == 404, url
        assert SECRET not in response.content.decode()


def test_another_partys_work_is_not_on_a_partys_inbox_or_board(
    logged_in: Client, hers: tuple[Agent, Question, Negotiation]
) -> None:
    agent, _, _ = hers
    for url in (
        reverse("agents:inbox", kwargs={"tenant": "acme"}),
        reverse("negotiations:list", kwargs={"tenant": "acme"}),
    ):
        html = logged_in.get(url).content.decode()
        assert SECRET not in html
        assert "Idris Haddad" not in html

    filtered = logged_in.get(reverse("negotiations:list", kwargs={"tenant": "acme"}), {"agent": agent.pk})
    assert "Idris Haddad" not in filtered.content.decode()
    assert filtered.context["filters"].errors["agent"]


@pytest.mark.parametrize("role", [Membership.Role.OWNER, Membership.Role.OPERATOR, Membership.Role.VIEWER])
def test_staff_see_every_partys_pages(
    client: Client, tenant: Tenant, hers: tuple[Agent, Question, Negotiation], role: str
) -> None:
    client.force_login(member(tenant, f"staff-{role}", role))

    for url in pages(*hers):
        assert client.get(url).status_code == 200, url
    board = client.get(reverse("negotiations:list", kwargs={"tenant": "acme"})).content.decode()
    assert "Idris Haddad" in board


def test_a_party_still_sees_their_own(logged_in: Client, agent: Agent, principal: AbstractUser) -> None:
    intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Find office space.")
    question = waiting_question(agent, intent, text="Which district?")
    negotiation = Negotiation.objects.create(
        tenant=agent.tenant, agent=agent, intent=intent, direction=Negotiation.Direction.OUTBOUND
    )

    for url in pages(agent, question, negotiation):
        assert logged_in.get(url).status_code == 200, url


def test_acting_on_another_partys_run_or_question_is_a_404_and_changes_nothing(
    logged_in: Client, hers: tuple[Agent, Question, Negotiation]
) -> None:
    _, question, _ = hers
    for url, data in (
        (reverse("agents:run-cancel", kwargs={"tenant": "acme", "pk": question.run_id}), {}),
        (reverse("agents:question-answer", kwargs={"tenant": "acme", "pk": question.pk}), {"answer": "1000"}),
    ):
        assert logged_in.post(url, data).status_code == 404, url
    question.refresh_from_db()
    assert question.is_open
    assert question.run.status == Run.Status.NEEDS_INPUT


# Every dashboard page that lists or offers agents, runs, intents or negotiations, and its live regions.
LISTS = [
    ("agents:inbox", {}),
    ("agents:start", {}),
    ("agents:run-list", {}),
    ("agents:agent-list", {}),
    ("negotiations:list", {}),
    ("agents:inbox", {"fragment": "1"}),
    ("agents:run-list", {"fragment": "1"}),
    ("negotiations:list", {"fragment": "1"}),
]
# The operator's lists (tools, model endpoints, members, keys, webhooks): a 403 to a party.
OPERATOR_LISTS = [
    "agents:tool-list",
    "agents:model-list",
    "tenant:members",
    "tenant:api-keys",
    "tenant:webhooks",
    "tenant:webhook-deliveries",
]


def test_no_list_or_select_shows_a_party_another_partys_agent(
    logged_in: Client, agent: Agent, hers: tuple[Agent, Question, Negotiation]
) -> None:
    """Nothing of Priya's (her agent's name or id, her username, its intent, its work) is listed or
    offered to Tomas, whose own agent is."""
    theirs, _, _ = hers
    for name, query in LISTS:
        response = logged_in.get(reverse(name, kwargs={"tenant": "acme"}), query)
        html = response.content.decode()
        assert response.status_code == 200, name
        for leak in ("Priya", "priya", str(theirs.pk), "Hire a CFO.", SECRET, "Idris Haddad"):
            assert leak not in html, (name, query, leak)
        if not query and name != "agents:inbox":  # an inbox names the agents that asked something
            assert "Tomas&#x27;s agent" in html, name
    for name in OPERATOR_LISTS:
        assert logged_in.get(reverse(name, kwargs={"tenant": "acme"})).status_code == 403, name
