"""What a member's role lets them do with the tenant's agents: the one place these role sets are
declared (the pages' ``allowed_roles``, the selectors and the services all read them here).

A role is a :class:`parley.models.Membership.Role`. The rules built on these sets are
:func:`agents.selectors.can_answer_as` (whose questions a member answers) and
:func:`agents.selectors.can_operate`.
"""

from __future__ import annotations

from parley.models import Membership

# Owners and operators run the tenant's agents: they configure them, see what they are told, manage
# webhooks, and answer (start, cancel) for any party of the tenant, on the party's behalf.
OPERATE = frozenset({Membership.Role.OWNER, Membership.Role.OPERATOR})
# Members who may answer for an agent, so be its principal: all but viewers. A principal answers
# (starts, cancels) for the agents they are the principal of; owners and operators for any.
ANSWER = OPERATE | {Membership.Role.PRINCIPAL}
