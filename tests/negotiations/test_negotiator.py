"""Rules every outgoing move obeys, whatever model decides it; what the offline strategy takes as an offer."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from agents.models import Agent, Intent
from negotiations import digest, negotiator, offline
from negotiations.client import canonical_url
from negotiations.negotiator import Guard, GuardViolation, NegotiatorError, check_guards, parse_guards
from negotiations.wire import Entry, Move, TaskRecord
from tests.negotiations.conftest import buyer_situation

GUARD = {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}
# Monday 30 November 2026, noon UTC.
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("terms", "error"),
    [
        ({"amount": 1100, "currency": "EUR"}, None),
        ({"days": 2}, None),
        ({"amount": 1101, "currency": "EUR"}, "accept with amount=1101 breaks the guard amount <= 1100"),
        (
            {"amount": "900", "currency": "EUR"},
            "accept puts '900' where the guard amount <= 1100 needs a number",
        ),
        ({"amount": True}, "accept puts True where the guard amount <= 1100 needs a number"),
        ({"amount": 900, "currency": "JPY"}, "accept is in JPY; the guard amount <= 1100 is in EUR"),
        # An amount without its currency could be read in any currency.
        ({"amount": 1000}, "accept names no currency; the guard amount <= 1100 is in EUR"),
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


@pytest.mark.parametrize(
    ("guard", "terms", "error"),
    [
        ({"term": "amount", "op": ">=", "value": 950}, {"amount": 950}, None),
        ({"term": "amount", "op": ">=", "value": 950}, {"amount": 949.5}, "amount >= 950"),
        ({"term": "location", "op": "==", "value": "Berlin"}, {"location": " berlin "}, None),
        ({"term": "location", "op": "==", "value": "Berlin"}, {"location": "remote"}, "location == Berlin"),
        ({"term": "day", "op": "in", "value": ["Saturday", "Sunday"]}, {"day": "Sunday"}, None),
        (
            {"term": "day", "op": "in", "value": ["Saturday", "Sunday"]},
            {"day": "Monday"},
            "day in ['Saturday', 'Sunday']",
        ),
        ({"term": "seats", "op": "==", "value": 1}, {"seats": True}, "seats == 1"),
        ({"term": "start", "op": ">=", "value": "tomorrow"}, {"start": "2026-12-01"}, None),
        ({"term": "start", "op": ">=", "value": "tomorrow"}, {"start": "2026-11-30"}, "start >= 2026-12-01"),
        ({"term": "start", "op": "<=", "value": "2026-12-31"}, {"start": "soon"}, "needs a date"),
        ({"term": "start", "op": "==", "value": "next Tuesday"}, {"start": "2026-12-01"}, None),
        ({"term": "currency", "op": "in", "value": ["USD"]}, {"currency": "EUR"}, "currency in ['USD']"),
    ],
)
def test_every_op_and_relative_dates(guard: dict[str, Any], terms: dict[str, Any], error: str | None) -> None:
    move = Move("counter", "…", terms=terms)
    if error is None:
        check_guards(Agent(term_guards=[guard]), move, now=NOW)
    else:
        with pytest.raises(GuardViolation, match=re.escape(error)):
            check_guards(Agent(term_guards=[guard]), move, now=NOW)


def test_the_intents_guards_add_to_the_agents() -> None:
    agent = Agent(term_guards=[GUARD])
    intent = Intent(term_guards=[{"term": "amount", "op": "<=", "value": 1000, "currency": "EUR"}])
    move = Move("counter", "…", terms={"amount": 1050, "currency": "EUR"})

    check_guards(agent, move)
    with pytest.raises(GuardViolation) as caught:
        check_guards(agent, move, intent=intent)
    assert [v.guard.value for v in caught.value.violations] == [1000]


def test_guards_resolve_relative_dates_on_the_agents_clock() -> None:
    guards = [
        {"term": "start", "op": "==", "value": "next Tuesday"},
        {"term": "d", "op": "in", "value": ["today"]},
    ]
    # Noon UTC on Monday is already Tuesday 01:00 in Auckland.
    assert parse_guards(guards, today=negotiator.local_today(Agent(timezone="Pacific/Auckland"), NOW)) == (
        Guard("start", "==", "2026-12-08"),
        Guard("d", "in", ("2026-12-01",)),
    )


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({"term": "amount", "op": ">="}, "agent term guard 1 needs a number or a date for '>='"),
        (
            {"term": "amount", "op": "<", "value": 1},
            "agent term guard 1 has op '<'; use one of <=, >=, ==, in",
        ),
        ({"op": "==", "value": 1}, "agent term guard 1 names no term"),
        ({"term": "day", "op": "in", "value": "Saturday"}, "agent term guard 1 needs a non-empty list"),
        ({"term": "amount", "op": "<=", "value": 1, "currency": 1}, "currency that is not a string"),
        ({"term": "amount", "op": "<=", "value": 1, "aspiration": "1"}, "aspiration that is not a number"),
    ],
)
def test_a_malformed_guard_is_a_negotiator_error(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(NegotiatorError, match=error):
        check_guards(Agent(term_guards=[raw]), Move("propose", "…", terms={"amount": 1}))


def test_an_unknown_timezone_is_a_negotiator_error() -> None:
    with pytest.raises(NegotiatorError, match="the agent's timezone 'Mars/Olympus' is unknown"):
        negotiator.local_today(Agent(timezone="Mars/Olympus"), NOW)


@pytest.mark.parametrize(
    ("terms", "guards", "expected"),
    [
        ("amount (number, EUR per day), currency", [], ("amount", "EUR", "EUR per day")),
        ("day (weekday), fee (number, per session), currency", [], ("fee", "", "per session")),
        (
            "amount (number, EUR per day)",
            [{"term": "amount", "op": "<=", "value": 1, "currency": "USD"}],
            ("amount", "USD", "EUR per day"),
        ),
        ("amount (number)", [{"term": "currency", "op": "==", "value": "GBP"}], ("amount", "GBP", "")),
        (
            "",
            [{"term": "day", "op": "in", "value": ["Sat"]}, {"term": "rate", "op": ">=", "value": 1}],
            ("rate", "", ""),
        ),
        ("", [], ("amount", "", "")),
    ],
)
def test_the_term_bargained_over(
    terms: str, guards: list[dict[str, Any]], expected: tuple[str, str, str]
) -> None:
    agent = Agent(terms=terms)
    assert negotiator.numeric_term(agent, parse_guards(guards, today=NOW.date())) == expected


def test_a_move_with_terms_gets_an_offer_id_minted_here() -> None:
    agent = Agent(terms="amount (number, EUR per day), currency", term_guards=[GUARD])
    record = TaskRecord("submitted", ())

    move = negotiator.decide(agent=agent, record=record, our_role="user", guidance=[], max_moves=10).move

    assert (move.action, move.terms) == ("propose", {"amount": 770, "currency": "EUR"})
    assert len(move.offer_id) == 36


def test_a_moves_message_passes_the_output_guardrails_before_it_leaves() -> None:
    redact = {"name": "no-euro", "stage": "output", "action": "redact", "match": "regex", "pattern": "€770"}
    agent = Agent(terms="amount (number, EUR per day), currency", term_guards=[GUARD], guardrails=[redact])

    move = negotiator.decide(
        agent=agent,
        record=TaskRecord("submitted", ()),
        our_role="user",
        guidance=[],
        max_moves=10,
    ).move

    assert "€770" not in move.message
    assert "[redacted]" in move.message
    assert move.terms == {"amount": 770, "currency": "EUR"}


def test_a_blocking_output_guardrail_stops_the_move() -> None:
    block = {"name": "no-offers", "stage": "output", "action": "block", "match": "regex", "pattern": "offer"}
    agent = Agent(terms="amount (number, EUR per day), currency", term_guards=[GUARD], guardrails=[block])

    with pytest.raises(NegotiatorError, match='Guardrail "no-offers" blocked the output'):
        negotiator.decide(
            agent=agent,
            record=TaskRecord("submitted", ()),
            our_role="user",
            guidance=[],
            max_moves=10,
        )


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"strategy": "haggler"}, "strategy 'haggler' is not one of"),
        ({"allowed_actions": [{"name": "propose"}]}, "the offline negotiator needs at least one open action"),
    ],
)
def test_what_cannot_negotiate(change: dict[str, Any], error: str) -> None:
    agent = Agent(term_guards=[GUARD], **change)
    with pytest.raises(NegotiatorError, match=error):
        negotiator.decide(
            agent=agent,
            record=TaskRecord("submitted", ()),
            our_role="user",
            guidance=[],
            max_moves=10,
        )


def _situation(their_terms: dict[str, Any] | None, message: str = "My rate is €900.") -> offline.Situation:
    record = TaskRecord(
        state="input-required",
        history=(
            Entry("user", Move("propose", "I can offer €770.", {"amount": 770, "currency": "EUR"}, "o1")),
            Entry("agent", Move("counter", message, their_terms, "o2" if their_terms else "")),
        ),
    )
    return buyer_situation(record)


@pytest.mark.parametrize(
    ("their_terms", "message", "value", "taken"),
    [
        ({"amount": 900, "currency": "EUR"}, "", 900.0, True),
        ({"amount": 900, "currency": "eur"}, "", 900.0, True),
        # Readable, but not in our currency (or in none): never taken as ours.
        ({"amount": 900}, "", 900.0, False),
        ({"amount": 900, "currency": "USD"}, "", 900.0, False),
        ({"currency": "EUR"}, "", None, False),
        # No offer at all: strings attached, or not a number where ours goes.
        ({"amount": 900, "currency": "EUR", "exclusivity": True}, "", None, None),
        ({"amount": "900", "currency": "EUR"}, "", None, None),
        ({"amount": True}, "", None, None),
        ({"price": 1}, "I offer €5,000 a day", None, None),
        (None, "Fine, €900 a day.", 900.0, True),
        (None, "Let us talk.", None, None),
    ],
)
def test_what_counts_as_their_offer(
    their_terms: dict[str, Any] | None, message: str, value: float | None, taken: bool | None
) -> None:
    situation = _situation(their_terms, message or "My rate is €900.")
    offered = offline.their_offer(situation)
    if taken is None:
        assert offered is None
    else:
        assert offered is not None
        assert offered.value == value
        # With our next offer at €1,000, anything at or below it is good enough.
        assert offline.acceptable(situation, offered, 1000) is taken


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


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTP://LocalHost:80/a2a/x/", "http://localhost/a2a/x"),
        ("https://cfo.example:443/a2a/id%72is", "https://cfo.example/a2a/idris"),
        ("https://cfo.example/a2a/x%2fy", "https://cfo.example/a2a/x%2Fy"),
        ("http://h/p/./seller", "http://h/p/seller"),
        ("http://h/p/x/../seller", "http://h/p/seller"),
        ("http://[::1]:8000/a/", "http://[::1]:8000/a"),
        ("http://h/", "http://h"),
    ],
)
def test_one_counterparty_has_one_url(url: str, canonical: str) -> None:
    assert canonical_url(url) == canonical
