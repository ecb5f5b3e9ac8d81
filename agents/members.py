"""What the tenant's agents need of its members, told to :mod:`parley` when the app is ready.

An agent names two members: its party (``principal``), who answers for it, and
its intake owner. ``parley`` manages members without importing ``agents``
(docs/layers.md), so it asks what it must not undo through its registries:
:func:`parley.services.register_member_check` (a role change or a removal that
would leave an agent without them) and :func:`parley.selectors.register_answers_for`
(what a placeholder hands over).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from agents.models import Agent
from agents.selectors import agents_of_principal
from parley import roles
from parley.models import Membership


def check_member(membership: Membership, role: str | None) -> None:
    """Refuse to give an agent's party a role that may not answer (``role`` not in
    :data:`parley.roles.ANSWER`: a viewer), or to remove an agent's party or intake
    owner from the tenant (``role`` None); ``membership`` is locked, with its user loaded.

    Raises:
        ValidationError: ``{"role": "tomas answers for Alpha, Beta; a viewer cannot. Give those
            agents another party first."}``; on removal, unkeyed: "tomas is the party of Alpha and
            the intake owner of Beta. Give those agents someone else first, then remove them."
    """
    if role is not None:
        if role not in roles.ANSWER:
            parties = _names(_agents_of(membership).filter(principal_id=membership.user_id))
            if parties:
                raise ValidationError(
                    {
                        "role": f"{membership.user.get_username()} answers for {parties}; a viewer cannot. "
                        "Give those agents another party first."
                    }
                )
        return
    agents = _agents_of(membership)
    parties = _names(agents.filter(principal_id=membership.user_id))
    intake = _names(agents.filter(intake_owner_id=membership.user_id))
    if parties or intake:
        duties = []
        if parties:
            duties.append(f"the party of {parties}")
        if intake:
            duties.append(f"the intake owner of {intake}")
        raise ValidationError(
            f"{membership.user.get_username()} is {' and '.join(duties)}. "
            "Give those agents someone else first, then remove them."
        )


def answered_for(membership: Membership) -> list[str]:
    """The names of the agents the member is the party of, by name (:func:`agents_of_principal`)."""
    return [agent.name for agent in agents_of_principal(membership=membership)]


def _agents_of(membership: Membership) -> QuerySet[Agent]:
    """The tenant's agents the member is the party or the intake owner of."""
    agents: QuerySet[Agent] = Agent.objects.for_tenant(membership.tenant_id).filter(
        Q(principal_id=membership.user_id) | Q(intake_owner_id=membership.user_id)
    )
    return agents


def _names(agents: Iterable[Agent]) -> str:
    """``"Alpha, Beta"`` for the agents by name, or ``""``."""
    return ", ".join(sorted(a.name for a in agents))
