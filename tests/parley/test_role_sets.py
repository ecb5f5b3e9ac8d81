"""The role sets of :mod:`parley.roles` are what every rule about roles reads: who answers for an
agent, who starts and cancels its runs, who may be its principal, who keeps a party's duties on a
role change, and which pages a role opens. Each row below asks one of those places."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError

from agents import config_views, configuration, selectors, views
from agents.models import Agent, Run
from agents.services import runs
from parley import roles
from parley.models import Membership, Tenant
from parley.services import member_role_change
from tests.agents.pages import member

pytestmark = pytest.mark.django_db

EVERY_ROLE = [role.value for role in Membership.Role]


def test_the_sets_are_what_the_roles_mean() -> None:
    assert {Membership.Role.OWNER, Membership.Role.OPERATOR} == roles.OPERATE
    assert set(Membership.Role) - {Membership.Role.VIEWER} == roles.ANSWER


@pytest.mark.parametrize("role", EVERY_ROLE)
def test_answering_and_starting_read_the_sets(tenant: Tenant, agent: Agent, role: str) -> None:
    """For another party's agent only an operating role acts; for the member's own party, any role
    that may answer."""
    mo = member(tenant, "mo", role)
    membership = Membership.objects.get(user=mo, tenant=tenant)

    assert selectors.can_answer_for(membership=membership, agent=agent) == (role in roles.OPERATE)
    assert selectors.can_answer_as(membership=membership, principal_id=mo.pk) == (role in roles.ANSWER)
    assert selectors.can_operate(membership=membership, agent=agent) == (role in roles.OPERATE)
    assert selectors.startable_agents(membership=membership).contains(agent) == (role in roles.OPERATE)
    if role in roles.OPERATE:
        assert runs.run_start(agent=agent, statement="Hire.", task="Find a CFO.", user=mo).pk
    else:
        with pytest.raises(runs.NotAllowed):
            runs.run_start(agent=agent, statement="Hire.", task="Find a CFO.", user=mo)
        assert not Run.across_tenants.exists()


@pytest.mark.parametrize("role", EVERY_ROLE)
def test_who_may_be_a_principal_reads_the_answering_set(tenant: Tenant, agent: Agent, role: str) -> None:
    agent.principal = member(tenant, "mo", role)

    if role in roles.ANSWER:
        configuration.full_clean(agent)
    else:
        with pytest.raises(ValidationError) as refused:
            configuration.full_clean(agent)
        assert list(refused.value.message_dict) == ["principal"]


@pytest.mark.parametrize("role", EVERY_ROLE)
def test_a_party_keeps_a_role_of_the_answering_set(
    tenant: Tenant, agent: Agent, principal: AbstractUser, owner: AbstractUser, role: str
) -> None:
    party = Membership.objects.get(user=principal, tenant=tenant)

    if role in roles.ANSWER:
        assert member_role_change(membership=party, role=role, user=owner).role == role
    else:
        with pytest.raises(ValidationError, match="answers for Tomas's agent"):
            member_role_change(membership=party, role=role, user=owner)


def test_the_pages_open_to_the_sets() -> None:
    assert views.StartWorkView.allowed_roles is roles.ANSWER
    for page in (
        config_views.OperatorFormMixin,
        config_views.ToolListView,
        config_views.ModelEndpointListView,
    ):
        assert page.allowed_roles is roles.OPERATE
