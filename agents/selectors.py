"""Reads of agents, runs and questions, always within one tenant."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from parley.models import Event, Membership, Tenant

# Roles that may answer any question of their tenant's agents, on the party's behalf.
ANSWER_FOR_ANYONE = frozenset({Membership.Role.OWNER, Membership.Role.OPERATOR})
# Roles that run the tenant's agents, and so may see what the agents are told.
OPERATE = frozenset({Membership.Role.OWNER, Membership.Role.OPERATOR})
# Stored events that belong in a run's timeline: its model calls' retries and fallbacks.
TIMELINE_EVENTS = ("run.retry", "run.fallback")


def open_questions_for(*, tenant: Tenant, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Question]:
    """Open questions of the tenant's agents whose party is ``user``, newest first; a question of a
    run that ended (cancelled, failed, …) takes no answer and is left out."""
    return (
        Question.objects.for_tenant(tenant)
        .filter(answered_at=None, run__agent__principal_id=user.pk, run__status__in=Run.ACTIVE)
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


def can_operate(*, membership: Membership, agent: Agent) -> bool:
    """Whether the member is an owner or an operator of ``agent``'s tenant (may see its system message)."""
    return membership.tenant_id == agent.tenant_id and membership.role in OPERATE


def latest_intent(*, agent: Agent) -> Intent | None:
    """``agent``'s newest intent, or None when it has none."""
    return Intent.objects.for_tenant(agent.tenant_id).filter(agent=agent).order_by("-created_at").first()


def agent_tools(*, agent: Agent) -> QuerySet[Tool]:
    """The tools ``agent`` offers by choice, by name; empty means the defaults (see ``agents.tools``)."""
    return Tool.objects.for_tenant(agent.tenant_id).filter(agents=agent).select_related("target_agent")


@dataclass(frozen=True)
class AgentModel:
    """One model ``agent`` may call, in the order it tries them: ``endpoint`` None is ``offline`` or
    a name without a :class:`ModelEndpoint` of the tenant."""

    name: str
    fallback: bool
    endpoint: ModelEndpoint | None


def agent_models(*, agent: Agent) -> list[AgentModel]:
    """``agent.model`` then its ``fallback_models``, each with its endpoint (prices, currency)."""
    names = [agent.model, *(str(n) for n in agent.fallback_models or [])]
    endpoints = {e.name: e for e in ModelEndpoint.objects.for_tenant(agent.tenant_id).filter(name__in=names)}
    return [AgentModel(name=n, fallback=i > 0, endpoint=endpoints.get(n)) for i, n in enumerate(names)]


def run_currency(*, run: Run) -> str:
    """The currency of ``run``'s costs and cost budget: its agent's model endpoint's, "" for none."""
    currency = (
        ModelEndpoint.objects.for_tenant(run.tenant_id)
        .filter(name=run.agent.model)
        .values_list("currency", flat=True)
        .first()
    )
    return currency or ""


def run_children(*, run: Run) -> QuerySet[Run]:
    """The runs ``run`` delegated to (other agents called as tools), oldest first."""
    return (
        Run.objects.for_tenant(run.tenant_id)
        .filter(parent=run)
        .select_related("agent")
        .order_by("created_at")
    )


def run_timeline(*, run: Run) -> QuerySet[Event]:
    """The stored retries and fallbacks of ``run``'s model calls, in step order, then as they happened.

    Each is an :class:`parley.models.Event` of kind ``run.retry`` (payload
    ``{run, step, model, attempt, wait, reason}``) or ``run.fallback``
    (``{run, step, from, to, reason}``).
    """
    return (
        Event.objects.for_tenant(run.tenant_id)
        .filter(kind__in=TIMELINE_EVENTS, payload__run=str(run.pk))
        .order_by("payload__step", "created_at", "pk")
    )
