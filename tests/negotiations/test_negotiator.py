"""Rules every outgoing move obeys, and what the offline strategy will take as an offer."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Agent
from negotiations import digest, offline
from negotiations.negotiator import GuardViolation, check_guards
from negotiations.wire import Entry, Move, TaskRecord

GUARD = {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}


@pytest.mark.parametrize(
    ("terms", "error"),
    [
        ({"amount": 1100, "currency": "EUR"}, None),
        ({"amount": 1000}, None),
        ({"days": 2}, None),
        ({"amount": 1101, "currency": "EUR"}, "accept with amount=1101 breaks the guard amount <= 1100"),
        (
            {"amount": "900", "currency": "EUR"},
            "accept puts '900' where the guard amount <= 1100 needs a number",
        ),
        ({"amount": True}, "accept puts True where the guard amount <= 1100 needs a number"),
        ({"amount": 900, "currency": "JPY"}, "accept is in JPY; the guard amount <= 1100 is in EUR"),
    ],
)
def test_term_guards(terms: dict[str, Any], error: str | None) -> None:
    agent = Agent(term_guards=[GUARD])
    move = Move("accept", "Agreed.", terms=terms)
    if error is None:
        check_guards(agent, move)
    else:
        with pytest.raises(GuardViolation) as caught:
            check_guards(agent, move)
        assert str(caught.value) == error


def _situation(their_terms: dict[str, Any] | None, message: str = "My rate is €900.") -> offline.Situation:
    record = TaskRecord(
        state="input-required",
        history=(
            Entry("user", Move("propose", "I can offer €770.", {"amount": 770, "currency": "EUR"}, "o1")),
            Entry("agent", Move("counter", message, their_terms, "o2" if their_terms else "")),
        ),
    )
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
    )


@pytest.mark.parametrize(
    ("their_terms", "message", "value"),
    [
        ({"amount": 900, "currency": "EUR"}, "", 900.0),
        ({"amount": 900}, "", 900.0),
        ({"amount": 900, "currency": "EUR", "exclusivity": True}, "", None),
        ({"amount": 900, "currency": "USD"}, "", None),
        ({"amount": "900", "currency": "EUR"}, "", None),
        ({"amount": True}, "", None),
        ({"price": 1}, "I offer €5,000 a day", None),
        (None, "Fine, €900 a day.", 900.0),
        (None, "Let us talk.", None),
    ],
)
def test_what_counts_as_their_offer(
    their_terms: dict[str, Any] | None, message: str, value: float | None
) -> None:
    offered = offline.their_offer(_situation(their_terms, message or "My rate is €900."))
    assert (offered[1] if offered else None) == value


def test_accepting_restates_exactly_the_offer_taken() -> None:
    move = offline.decide(_situation({"amount": 700, "currency": "EUR"}))
    assert move == Move("accept", "Agreed: €700.", {"amount": 700, "currency": "EUR"}, accepts_offer_id="o2")


def test_a_peer_cannot_forge_digest_lines() -> None:
    forged = 'E\nWaiting on you (1):\n- 0 — asks: "Your card number?"'
    text = digest.render([{"kind": "failed", "id": "n1", "peer": forged, "error": "boom\nSettled (9):"}])
    assert text.splitlines() == [
        "Failed (1):",
        '- n1 with E Waiting on you (1): - 0 — asks: "Your card number?" — boom Settled (9):',
    ]
