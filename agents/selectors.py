"""Reads of agents, runs and questions, always within one tenant."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from agents.models import Agent, Message, Question, Run
from parley.models import Membership, Tenant

# Roles that may answer any question of their tenant's agents, on the party's behalf.
ANSWER_FOR_ANYONE = frozenset({Membership.Role.OWNER, Membership.Role.OPERATOR})


def open_questions_for(*, tenant: Tenant, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Question]:
    """Open questions of the tenant's agents whose party is ``user``, newest first."""
    return (
        Question.objects.for_tenant(tenant)
        .filter(answered_at=None, run__agent__principal_id=user.pk)
        .exclude(run__status=Run.Status.CANCELLED)
        .select_related("run__agent", "run__intent")
        .order_by("-created_at")
    )


def runs_for(*, tenant: Tenant, user: AbstractBaseUser | AnonymousUser, limit: int = 20) -> QuerySet[Run]:
    """The latest ``limit`` runs of the agents ``user`` answers for, newest first."""
    return (
        Run.objects.for_tenant(tenant)
        .filter(agent__principal_id=user.pk)
        .select_related("agent", "intent")
        .order_by("-created_at")[:limit]
    )


def questions_of(*, tenant: Tenant) -> QuerySet[Question]:
    """Every question of the tenant, with its run and agent loaded (for permission checks)."""
    return Question.objects.for_tenant(tenant).select_related("run__agent")


def run_messages(*, run: Run) -> QuerySet[Message]:
    """The messages ``run`` wrote (its input, model replies and tool results), in thread order."""
    return Message.objects.for_tenant(run.tenant_id).filter(run=run).order_by("seq")


def run_questions(*, run: Run) -> QuerySet[Question]:
    """The questions ``run`` asked, oldest first, with who answered them."""
    return (
        Question.objects.for_tenant(run.tenant_id)
        .filter(run=run)
        .select_related("answered_by")
        .order_by("created_at")
    )


def can_answer_for(*, membership: Membership, agent: Agent) -> bool:
    """Whether the member may answer ``agent``'s questions (see :func:`can_answer_as`).

    ``membership`` must be of the agent's tenant.
    """
    return membership.tenant_id == agent.tenant_id and can_answer_as(
        membership=membership, principal_id=agent.principal_id
    )


def can_answer_as(*, membership: Membership, principal_id: int | None) -> bool:
    """Whether the member may answer for the party ``principal_id``.

    The party may, and so may the tenant's owners and operators (on the party's
    behalf); viewers never may, and neither may another party of the tenant.
    """
    if membership.role == Membership.Role.VIEWER:
        return False
    return membership.role in ANSWER_FOR_ANYONE or principal_id == membership.user_id
