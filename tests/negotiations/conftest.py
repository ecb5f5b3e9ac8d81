"""Shared by the negotiations tests: the offline negotiator's situation as the tests build it."""

from __future__ import annotations

from negotiations import offline
from negotiations.negotiator import Guard, Violation
from negotiations.wire import TaskRecord


def buyer_situation(
    record: TaskRecord, *guards: Guard, feedback: tuple[Violation, ...] = ()
) -> offline.Situation:
    """A structured buyer's situation in ``record``: bargaining over amount in EUR, under a
    €1,100 ceiling, ten moves, a party to ask; ``guards`` and ``feedback`` as given."""
    return offline.Situation(
        record=record,
        our_role="user",
        vocabulary=offline.Vocabulary("propose", "counter", "accept", "reject"),
        term="amount",
        currency="EUR",
        structured=True,
        limit=offline.Limit("amount", 1100, "ceiling"),
        max_moves=10,
        can_ask=True,
        guards=guards,
        feedback=feedback,
    )
