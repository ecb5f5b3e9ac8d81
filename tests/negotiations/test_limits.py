"""The party's limit read from its own words: read only when stated unambiguously, and otherwise the
follow-up question saying exactly what was unclear. Pure: nothing touches the database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.models import Agent
from negotiations import limits, negotiator, offline
from negotiations.limits import Kind
from negotiations.wire import Entry, Move, TaskRecord

TERM, CURRENCY, UNIT = "amount", "EUR", "EUR per day"
QUESTION = "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
EITHER = "the most you will pay or the least you will take"
AGAINST_CEILING = "the least you will take, and you gave your limit as the most you will pay before"


def read(said: str, side: Kind | None = None) -> limits.Reading:
    return limits.read_limit(said, term=TERM, currency=CURRENCY, unit=UNIT, side=side)


def asked_again(said: str, why: str) -> str:
    """The exact follow-up question after ``said`` gave no usable limit for ``why``."""
    stop = "" if said.endswith((".", "!", "?", "…")) else "."
    gave = f"Your answer gives no usable limit on amount (EUR per day): {why}."
    return f'{gave} You said: "{said}"{stop} {QUESTION}'


READ: list[tuple[str, Kind, float]] = [
    # Negations turn a comparative round (the tester's answer, and its kin).
    ("Not above €1,100 a day.", "ceiling", 1100),
    ("Don't go above 1100", "ceiling", 1100),
    ("Never above €1,100", "ceiling", 1100),
    ("I won't go over 1,100 EUR a day", "ceiling", 1100),
    ("I do not want to pay more than 1100", "ceiling", 1100),
    ("Not a cent more than €1,100", "ceiling", 1100),
    ("nothing above 1100", "ceiling", 1100),
    ("Do not exceed 1100 euros a day", "ceiling", 1100),
    ("not below 950", "floor", 950),
    ("Never under €950 a day", "floor", 950),
    ("I can't go below 950", "floor", 950),
    ("Not less than 950", "floor", 950),
    # Ceiling and floor words.
    ("Up to €1,100 a day.", "ceiling", 1100),
    ("at most 1100", "ceiling", 1100),
    ("no more than 1k", "ceiling", 1000),
    ("1 100 € max", "ceiling", 1100),
    ("max. 1100", "ceiling", 1100),
    ("Maximum: 1,100 EUR per day", "ceiling", 1100),
    ("1100 or less", "ceiling", 1100),
    ("1100 tops", "ceiling", 1100),
    ("≤ 1100", "ceiling", 1100),
    ("Keep it under 1100", "ceiling", 1100),
    ("At least €1,000 a day.", "floor", 1000),
    ("no less than 950", "floor", 950),
    ("minimum 950 EUR", "floor", 950),
    ("950 min", "floor", 950),
    ("950 or more", "floor", 950),
    ("950+", "floor", 950),
    ("anything above 950 works", "floor", 950),
    # Other languages, and separators that are not decimals.
    ("Bis zu 1.100 € pro Tag", "ceiling", 1100),
    ("höchstens 1.100,50 EUR", "ceiling", 1100.5),
    ("Mindestens 950 € am Tag", "floor", 950),
    ("au plus 1\u202f100 € par jour", "ceiling", 1100),
    ("up to 1\u2009100", "ceiling", 1100),
    ("up to 1\u00a0100", "ceiling", 1100),
    ("up to 1\u2019100", "ceiling", 1100),
    ("up to 1'100.50", "ceiling", 1100.5),
    ("up to 1,100.50", "ceiling", 1100.5),
    ("up to 1.5k", "ceiling", 1500),
    ("up to 1,5k", "ceiling", 1500),
    ("up to 2 thousand", "ceiling", 2000),
    ("at most 1100.5", "ceiling", 1100.5),
    # A period of the term's own, whatever else is said.
    ("Up to €1,100 a day, two days a month", "ceiling", 1100),
    ("up to 1100/day", "ceiling", 1100),
    ("daily max 1100", "ceiling", 1100),
    ("Max per day 1100", "ceiling", 1100),
]


@pytest.mark.parametrize(("said", "kind", "value"), READ)
def test_a_limit_stated_unambiguously_is_read(said: str, kind: Kind, value: float) -> None:
    reading = read(said)

    assert reading.limit == limits.Limit(TERM, value, kind)
    assert reading.problem == ""


REFUSED: list[tuple[str, Kind | None, str]] = [
    ("No money changes hands: we would build it together.", None, "it names no number"),
    ("Whatever you think is fair.", "ceiling", "it names no number"),
    # Several numbers, quoted as written; a date or a quantity among them may change the amount.
    ("Day 2 of the month is fine; up to 1100", None, "it names several numbers (Day 2 and 1100)"),
    ("up to 1100 for 2 days", "ceiling", "it names several numbers (1100 and 2 days)"),
    ("Up to 1100 but at least 900", None, "it names several numbers (1100 and 900)"),
    ("900 or 1000, up to 1100", "ceiling", "it names several numbers (900, 1000 and 1100)"),
    ("at most 1100 before 2026-12-01", "ceiling", "it names several numbers (1100 and 2026-12-01)"),
    # Only dates and quantities.
    ("up to 2026-12-01", None, "it names no amount, only 2026-12-01"),
    ("Send it at 10:30", None, "it names no amount, only 10:30"),
    ("Two days a month, 2nd week", None, "it names no amount, only 2nd"),
    ("10% more", "ceiling", "it names no amount, only 10%"),
    # Digits that are no number read.
    ("1e3", None, "it names 1e3, which I cannot read as an amount"),
    ("no more than 1E+3", None, "it names 1E+3, which I cannot read as an amount"),
    ("at most 1100.505", None, "it names 1100.505, which I cannot read as an amount"),
    ("at most 11,00,000", None, "it names 11,00,000, which I cannot read as an amount"),
    ("up to 1,100k", None, "it names 1,100k, which I cannot read as an amount"),
    # Another currency or period than the term's.
    ("at most 1100 USD", None, "it is in USD, and amount is in EUR"),
    ("up to $1,100", "ceiling", "it is in USD, and amount is in EUR"),
    ("1\u2019100 CHF max", None, "it is in CHF, and amount is in EUR"),
    ("at most €1,100 a month", None, "it is per month, and amount is per day"),
    ("up to 150 per hour", "ceiling", "it is per hour, and amount is per day"),
    # No direction, and none known.
    ("1100", None, f"it does not say whether 1,100 is {EITHER}"),
    ("€1,100 a day", None, f"it does not say whether 1,100 is {EITHER}"),
    ("between 900 and 1100", None, f"it does not say whether 900 to 1,100 is {EITHER}"),
    # A direction that may be meant either way, or both.
    (
        "More than 1,100 is too much",
        None,
        f'it does not say whether 1,100 is {EITHER} (I cannot tell how "More than" is meant)',
    ),
    (
        "Don't go up to 1100",
        "ceiling",
        f'it does not say whether 1,100 is {EITHER} (I cannot tell how "up to" is meant)',
    ),
    (
        "at least 1100, max",
        None,
        f'it does not say whether 1,100 is {EITHER}: it says both "max" and "at least"',
    ),
    # A direction against the side the party gave before.
    (
        "At least 900",
        "ceiling",
        f"it gives 900 as {AGAINST_CEILING}",
    ),
    (
        "no more than 1200",
        "floor",
        "it gives 1,200 as the most you will pay, and you gave your limit as the least you will take before",
    ),
]


@pytest.mark.parametrize(("said", "side", "why"), REFUSED)
def test_an_answer_that_is_not_unambiguous_is_refused_and_asked_again_saying_why(
    said: str, side: Kind | None, why: str
) -> None:
    reading = read(said, side)

    assert (reading.limit, reading.problem) == (None, why)
    assert reading.message == f"Your answer gives no usable limit on amount (EUR per day): {why}."
    assert offline.limit_question(TERM, UNIT, reading) == asked_again(said, why)


@pytest.mark.parametrize(
    ("said", "side", "value"),
    [
        ("1100", "ceiling", 1100),
        ("€950 a day", "floor", 950),
        # A range: the bound that matters for the party's side.
        ("between 900 and 1100", "ceiling", 1100),
        ("between 900 and 1100", "floor", 900),
        ("900-1100", "ceiling", 1100),
        ("from €900 to €1,100 a day", "floor", 900),
        ("zwischen 900 und 1.100 €", "ceiling", 1100),
        ("900 bis 1100", "floor", 900),
    ],
)
def test_a_known_side_gives_the_direction_an_answer_leaves_out(said: str, side: Kind, value: float) -> None:
    assert read(said, side).limit == limits.Limit(TERM, value, side)


def test_what_the_party_is_told_names_the_bound_the_amount_and_the_unit() -> None:
    assert read("Not above €1,100 a day.").message == "Understood: at most 1,100 EUR per day for amount."
    assert read("minimum 950.5").message == "Understood: at least 950.50 EUR per day for amount."
    bare = limits.read_limit("up to 300", term="price")
    assert bare.message == "Understood: at most 300 for price."
    in_currency = limits.read_limit("up to 300", term="price", currency="GBP")
    assert in_currency.message == "Understood: at most 300 GBP for price."


@pytest.mark.parametrize(
    ("guidance", "kind", "value", "problem"),
    [
        ([], None, None, None),
        (["Not above €1,100 a day."], "ceiling", 1100, ""),
        # Words without an amount say nothing of the limit: an older line stands.
        (["Up to 1,100 a day.", "Go on, they are slow."], "ceiling", 1100, ""),
        (["Up to 1,100 a day.", "Send it again in 2 hours."], "ceiling", 1100, ""),
        (["Whatever is fair.", "Use your judgement."], None, None, "it names no number"),
        # The newest amount decides, and an earlier limit tells the side it leaves out.
        (["Up to 1,100 a day.", "Make it 1,200."], "ceiling", 1200, ""),
        (["At least 950.", "between 900 and 1000"], "floor", 900, ""),
        (["Up to 1,100 a day.", "At least 900."], None, None, f"it gives 900 as {AGAINST_CEILING}"),
        # An unreadable newest amount is never replaced by an older one; words after it are what the
        # party is asked about again.
        (["Up to 1,100 a day.", "900 or 1000?"], None, None, "it names several numbers (900 and 1000)"),
        (["Up to 1,100 a day.", "900 or 1000?", "Whatever."], None, None, "it names no number"),
    ],
)
def test_standing_guidance_is_read_newest_first(
    guidance: list[str], kind: Kind | None, value: float | None, problem: str | None
) -> None:
    reading = limits.limit_from_guidance(guidance, term=TERM, currency=CURRENCY, unit=UNIT)

    if problem is None:
        assert reading is None
        return
    assert reading is not None
    assert reading.problem == problem
    assert reading.limit == (
        limits.Limit(TERM, value, kind) if kind is not None and value is not None else None
    )


# The negotiator reads the party's answer with the same rule, and never settles outside it.

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
TERMS = "amount (number, EUR per day), currency"


def decide(guidance: list[str], their_offers: list[int]) -> Move:
    """The offline negotiator's move for a party with no term guard that answered ``guidance``: we
    opened and they answered each of our moves, offering ``their_offers`` in turn (out of ten moves)."""
    agent = Agent(terms=TERMS, principal_id=1)
    history: list[Entry] = []
    for index, amount in enumerate(their_offers):
        ours = {"amount": 0, "currency": "EUR"}
        history.append(Entry("user", Move("counter", "…", ours, f"o{index}")))
        theirs = {"amount": amount, "currency": "EUR"}
        history.append(Entry("agent", Move("counter", f"€{amount}?", theirs, f"t{index}")))
    record = TaskRecord("input-required", tuple(history))
    return negotiator.decide(
        agent=agent, record=record, our_role="user", guidance=guidance, max_moves=10, now=NOW
    ).move


def test_the_testers_answer_is_a_ceiling_and_nothing_above_it_is_offered_or_accepted() -> None:
    """The tester's answer read as a floor had the buyer open at €1,540 and agree to it."""
    opening = decide(["Not above €1,100 a day."], [])
    assert opening.terms == {"amount": 770, "currency": "EUR"}
    # A counterparty at 1,330, then 1,101, is never agreed to; at 1,100 on the last move it is.
    assert decide(["Not above €1,100 a day."], [1330]).action == "counter"
    assert decide(["Not above €1,100 a day."], [1101] * 9).action == "reject"
    assert decide(["Not above €1,100 a day."], [1100] * 9).action == "accept"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("1e3", "it names 1e3, which I cannot read as an amount"),
        ("Day 2 of the month is fine; up to 1100", "it names several numbers (Day 2 and 1100)"),
        ("between 900 and 1100", f"it does not say whether 900 to 1,100 is {EITHER}"),
        ("at most 1100 USD", "it is in USD, and amount is in EUR"),
        ("1100", f"it does not say whether 1,100 is {EITHER}"),
    ],
)
def test_the_negotiator_asks_again_where_the_reader_reads_no_limit(answer: str, why: str | None) -> None:
    """Never guessed from the counterparty's offer: the answer says its direction, or it is asked."""
    assert decide([answer], [1330]) == Move("ask", asked_again(answer, why))


@pytest.mark.parametrize(
    ("answer", "second"),
    [
        # Boulware's second offer towards its aim, halfway between the ceiling read and the floor read
        # from their opening of 1,330 (931): from 770 towards 1,015 for a ceiling of 1,100, from 700
        # towards 965 for a ceiling of 1,000.
        ("Bis zu 1.100 € pro Tag", 775),
        ("1 100 € max", 775),
        ("no more than 1k", 705),
    ],
)
def test_the_negotiator_concedes_towards_the_ceiling_as_read(answer: str, second: int) -> None:
    assert decide([answer], [1330]).terms == {"amount": second, "currency": "EUR"}
