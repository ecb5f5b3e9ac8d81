"""Reads of agents, runs and questions, always within one tenant."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from agents.models import Question, Run
from parley.models import Tenant


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
    """The latest runs of the agents ``user`` answers for."""
    return (
        Run.objects.for_tenant(tenant)
        .filter(agent__principal_id=user.pk)
        .select_related("agent", "intent")
        .order_by("-created_at")[:limit]
    )
