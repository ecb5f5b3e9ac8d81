"""Reads of the representative face: whether an agent answers visitors, and the intake requests
and unconfigured agents the dashboard lists."""

from __future__ import annotations

from django.db.models import QuerySet

from agents.models import Agent
from parley import roles
from parley.models import Membership
from representative.intake import intake_recipient
from representative.models import GroundingDocument, IntakeRequest


def face_on(agent: Agent) -> bool:
    """Whether ``agent`` answers visitors: it has a grounding document or an intake owner."""
    return (
        agent.intake_owner_id is not None
        or GroundingDocument.objects.for_tenant(agent.tenant_id).filter(agent=agent).exists()
    )


def intake_requests_for(*, membership: Membership) -> QuerySet[IntakeRequest] | None:
    """The intake requests ``membership``'s user may see, newest first; None if none at all (a 403).

    Owners and operators see every request of the tenant; anyone else sees the
    requests addressed to them, if they are an agent's intake owner or were a
    request's recipient.
    """
    rows = IntakeRequest.objects.for_tenant(membership.tenant_id).select_related("agent", "recipient")
    if membership.role in roles.OPERATE:
        return rows.order_by("-created_at", "-pk")
    user_id = membership.user_id
    is_owner = Agent.objects.for_tenant(membership.tenant_id).filter(intake_owner_id=user_id).exists()
    mine = rows.filter(recipient_id=user_id).order_by("-created_at", "-pk")
    if not is_owner and not mine.exists():
        return None
    return mine


def agents_without_intake(*, membership: Membership) -> list[Agent]:
    """For owners and operators: agents whose representative face is on but whose intake is unconfigured."""
    if membership.role not in roles.OPERATE:
        return []
    agents = (
        Agent.objects.for_tenant(membership.tenant_id)
        .filter(grounding_documents__isnull=False)
        .distinct()
        .order_by("name")
    )
    return [a for a in agents if intake_recipient(a) is None]
