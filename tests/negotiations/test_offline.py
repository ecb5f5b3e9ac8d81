"""The offline negotiator move by move: curves, acceptance, tit-for-tat, guard feedback, fixed terms, dates.

Pure: agents are unsaved model instances, the clock is fixed, nothing touches the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import pytest

from agents.models import Agent, Intent
from negotiations import negotiator, offline
from negotiations.negotiator import Guard, Violation
from negotiations.wire import Entry, Move, TaskRecord
from tests.negotiations.conftest import buyer_situation

# Monday 30 November 2026, noon UTC.
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
TERMS = "amount (number, EUR per day), currency"
CEILING = {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}
FLOOR = {"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def exchange(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]], *, our_role: Literal["user", "agent"] = "user"
) -> TaskRecord:
    """A Task in which we and they take turns, we first, each move offering the terms given."""
    their_role: Literal["user", "agent"] = "agent" if our_role == "user" else "user"
    history: list[Entry] = []
    for index in range(max(len(ours), len(theirs))):
        for role, moves, side in ((our_role, ours, "o"), (their_role, theirs, "t")):
            if index < len(moves):
                action = "propose" if index == 0 else "counter"
                history.append(Entry(role, Move(action, "…", moves[index], f"{side}{index}")))
    return TaskRecord("input-required", tuple(history))


def eur(amount: float, **more: Any) -> dict[str, Any]:
    return {"amount": amount, "currency": "EUR", **more}


def decide(agent: Agent, record: TaskRecord, *, can_ask: bool = True, **kwargs: Any) -> Move:
    """The negotiator's move as the outbound side, on the fixed clock; the offer id left out.

    ``can_ask`` gives the agent a principal (an id: only whether it has one counts) or takes it away.
    """
    agent.principal_id = 1 if can_ask else None
    arguments: dict[str, Any] = {
        "agent": agent,
        "record": record,
        "our_role": "user",
        "guidance": [],
        "max_moves": 10,
        "now": NOW,
        **kwargs,
    }
    move = negotiator.decide(**arguments).move
    assert bool(move.offer_id) == (move.terms is not None)
    return Move(move.action, move.message, move.terms, accepts_offer_id=move.accepts_offer_id)


def buyer(strategy: str = "boulware", *guards: dict[str, Any], terms: str = TERMS) -> Agent:
    return Agent(terms=terms, strategy=strategy, term_guards=[CEILING, *guards])


def seller(strategy: str = "boulware", *guards: dict[str, Any], terms: str = TERMS) -> Agent:
    return Agent(terms=terms, strategy=strategy, term_guards=[FLOOR, *guards])


# --- Time-dependent tactics ---------------------------------------------------------------

# Our offer at each of our ten moves against a counterparty that has not offered (so we aim at our
# limit): aspiration 770 (a buyer's 70% of its 1,100 ceiling) or 1,358 (a seller's 950 floor / 0.7),
# the limit by move 7 (the one before our last offer) and held on our last offer (8) and last move (9).
CURVES = {
    ("boulware", "ceiling"): [770, 776, 796, 830, 877, 938, 1012, 1100, 1100, 1100],
    ("linear", "ceiling"): [770, 817, 864, 911, 958, 1005, 1052, 1100, 1100, 1100],
    ("conceder", "ceiling"): [770, 894, 946, 986, 1019, 1048, 1075, 1100, 1100, 1100],
    ("boulware", "floor"): [1358, 1349, 1324, 1283, 1225, 1150, 1059, 950, 950, 950],
    ("linear", "floor"): [1358, 1299, 1241, 1183, 1125, 1067, 1009, 950, 950, 950],
    ("conceder", "floor"): [1358, 1204, 1140, 1091, 1050, 1014, 981, 950, 950, 950],
}


@pytest.mark.parametrize(("strategy", "kind"), list(CURVES))
def test_offer_curve(strategy: str, kind: str) -> None:
    agent = buyer(strategy) if kind == "ceiling" else seller(strategy)
    offers = [decide(agent, exchange([eur(0)] * t, [])).terms for t in range(10)]
    assert offers == [eur(v) for v in CURVES[(strategy, kind)]]


@pytest.mark.parametrize(
    ("t", "beta", "expected"),
    [
        (0, 0.5, 770),
        (3, 0.5, 770 + 330 / 9),
        (3, 1.0, 880),
        (4, 2.0, 990),
        (9, 0.5, 1100),
        (12, 2.0, 1100),  # past the deadline it stays at the reservation
    ],
)
def test_the_classic_formula(t: int, beta: float, expected: float) -> None:
    assert offline.time_dependent_offer(770, 1100, t, 9, beta) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("agent", "t", "their_offer", "action"),
    [
        # Accept once their offer is at least as good as our own next one. They opened at 1,300
        # (a buyer reads a floor of 910 from it and aims at 1,005) or 800 (a seller reads 1,143 and
        # aims at 1,046); our next offer is the tactic's curve towards that aim.
        (buyer("boulware"), 2, 789, "accept"),
        (buyer("boulware"), 2, 790, "counter"),
        (buyer("conceder"), 2, 895, "accept"),
        (buyer("conceder"), 2, 896, "counter"),
        (seller("linear"), 3, 1224, "accept"),
        (seller("linear"), 3, 1223, "counter"),
        # Our last move: take it if it is within the limit, else end it.
        (buyer("boulware"), 9, 1100, "accept"),
        (buyer("boulware"), 9, 1101, "reject"),
        (seller("conceder"), 9, 950, "accept"),
        (seller("conceder"), 9, 949, "reject"),
    ],
)
def test_acceptance_rule(agent: Agent, t: int, their_offer: float, action: str) -> None:
    opening = 1300 if agent.term_guards[0]["op"] == "<=" else 800
    record = exchange([eur(0)] * t, [eur(opening)] * (t - 1) + [eur(their_offer)])
    assert decide(agent, record).action == action


def test_their_offer_within_our_limit_but_short_of_our_next_is_met_halfway() -> None:
    """A deal exists (1,000 is within our 1,100 ceiling) but our next offer is 789: we counter
    halfway, 894, rather than take their 1,000 or overshoot back to our curve."""
    move = decide(buyer("boulware"), exchange([eur(770), eur(776)], [eur(1300), eur(1000)]))
    assert (move.action, move.terms) == ("counter", eur(894))


def test_accepting_names_their_offer_and_restates_its_terms() -> None:
    move = decide(buyer(), exchange([eur(770)], [eur(760)]))
    assert move == Move("accept", "Agreed: €760.", eur(760), accepts_offer_id="t0")


def test_their_acceptance_of_our_offer_is_confirmed() -> None:
    record = exchange([eur(770)], [])
    record = TaskRecord(
        "input-required",
        (*record.history, Entry("agent", Move("accept", "Deal.", eur(770), accepts_offer_id="o0"))),
    )
    assert decide(buyer(), record) == Move("accept", "Confirmed.", eur(770), accepts_offer_id="o0")


def test_the_aspiration_can_be_set_on_the_guard() -> None:
    agent = Agent(terms=TERMS, term_guards=[{**FLOOR, "value": 1000, "aspiration": 1200}])
    move = decide(agent, exchange([], [eur(770)], our_role="agent"), our_role="agent")
    assert move.terms == eur(1200)


def test_without_a_limit_it_asks_and_reads_the_answer() -> None:
    agent = Agent(terms=TERMS)
    record = exchange([], [eur(1330)], our_role="agent")

    asked = decide(agent, record, our_role="agent")
    answered = decide(agent, record, our_role="agent", guidance=["At least €1,000 a day."])

    assert asked == Move(
        "ask",
        "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?",
    )
    # Their 1,330 is within the floor read (1,000), so a deal exists: we meet them halfway between
    # it and our opening of 1,429 (1,000 / 0.7).
    assert answered.terms == eur(1380)


def test_a_reply_of_ours_without_a_move_is_no_move_of_ours() -> None:
    """A holding reply (the party was being consulted) spends none of our time: the opening after it
    is the one we would have made at once, and their offer is still weighed."""
    agent = Agent(terms=TERMS)
    held = TaskRecord(
        "input-required",
        (
            Entry("user", Move("propose", "€1,330?", eur(1330), "t0")),
            Entry("agent", None, "I am consulting the party I act for."),
        ),
    )
    at_once = exchange([], [eur(1330)], our_role="agent")

    after = decide(agent, held, our_role="agent", guidance=["At least €1,000 a day."])

    assert after == decide(agent, at_once, our_role="agent", guidance=["At least €1,000 a day."])
    assert after == Move("propose", "I can offer €1,380.", eur(1380))


# --- Tit-for-tat --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("our_last", "their_previous", "their_last", "limit", "expected"),
    [
        # They came down by 1/13, so do we, the other way.
        (800, 1300, 1200, offline.Limit("amount", 1100, "ceiling"), 800 * 1300 / 1200),
        # Never past the reservation …
        (1050, 1300, 1000, offline.Limit("amount", 1100, "ceiling"), 1100),
        # … and a retreat is mirrored, but never below our aspiration.
        (800, 1200, 1300, offline.Limit("amount", 1100, "ceiling"), 770),
        (1330, 800, 880, offline.Limit("amount", 950, "floor"), 1330 * 800 / 880),
        (1000, 800, 0, offline.Limit("amount", 950, "floor"), 1000),
    ],
)
def test_tit_for_tat_formula(
    our_last: float, their_previous: float, their_last: float, limit: offline.Limit, expected: float
) -> None:
    assert offline.tit_for_tat_offer(our_last, their_previous, their_last, limit) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("agent", "ours", "theirs", "expected"),
    [
        (buyer("tit_for_tat"), [], [], 770),
        # One offer of theirs shows no concession yet: nothing to mirror, so the Boulware floor
        # towards our aim (1,005, from their opening) moves us a little.
        (buyer("tit_for_tat"), [770], [1300], 774),
        # Two tit-for-tat agents who each wait for the other still move: the floor again.
        (buyer("tit_for_tat"), [770, 774], [1358, 1358], 790),
        (buyer("tit_for_tat"), [770, 800], [1300, 1200], 866),
        (buyer("tit_for_tat"), [770, 800], [1300, 1300], 800),
        (seller("tit_for_tat"), [1330, 1330], [800, 880], 1210),
    ],
)
def test_tit_for_tat_mirrors_their_last_concession(
    agent: Agent, ours: list[float], theirs: list[float], expected: float
) -> None:
    move = decide(agent, exchange([eur(v) for v in ours], [eur(v) for v in theirs]))
    assert move.terms == eur(expected)


# --- Guards: feedback, then parking -------------------------------------------------------


def test_a_move_breaking_a_guard_is_decided_again_with_the_violation() -> None:
    # Tomas never offers less than €900, lest he insult them.
    agent = buyer("boulware", {"term": "amount", "op": ">=", "value": 900, "currency": "EUR"})
    guards = negotiator.effective_guards(agent, today=negotiator.local_today(agent, NOW))
    record = exchange([], [])

    # Decided without feedback, the opening offer breaks the guard ...
    first = offline.decide(buyer_situation(record, *guards))
    violations = negotiator.guard_violations(guards, first)
    assert [str(v) for v in violations] == ["propose with amount=770 breaks the guard amount >= 900"]
    # ... decided again with that violation as feedback, it keeps to it ...
    corrected = offline.decide(buyer_situation(record, *guards, feedback=violations))
    assert negotiator.guard_violations(guards, corrected) == ()
    # ... and that corrected move is the one the negotiator makes.
    assert decide(agent, record) == corrected == Move("propose", "I can offer €900.", eur(900))


def test_the_intents_guards_count_too() -> None:
    intent = Intent(term_guards=[{"term": "amount", "op": ">=", "value": 900, "currency": "EUR"}])
    assert decide(buyer(), exchange([], []), intent=intent).terms == eur(900)


def test_after_two_failures_it_asks_the_party_naming_the_limits() -> None:
    agent = buyer("boulware", {"term": "amount", "op": ">=", "value": 1200, "currency": "EUR"})

    move = decide(agent, exchange([], []))

    assert move == Move(
        "ask",
        "Every move I could make breaks one of your limits "
        "(amount: at least €1,200; amount: at most €1,100). How should I go on?",
    )


def test_inbound_the_question_stays_off_the_wire_so_it_names_the_limit_for_the_party() -> None:
    agent = seller("boulware", {"term": "amount", "op": "<=", "value": 900, "currency": "EUR"})

    move = decide(agent, exchange([], [eur(800)], our_role="agent"), our_role="agent")

    assert move.action == "ask"
    assert "amount: at most €900" in move.message


def test_after_two_failures_without_a_party_to_ask_it_rejects() -> None:
    agent = buyer("boulware", {"term": "amount", "op": ">=", "value": 1200, "currency": "EUR"})

    move = decide(agent, exchange([], []), can_ask=False)

    assert move == Move("reject", "I cannot agree to terms within my instructions, so I must decline.")


def test_a_fixed_term_that_breaks_another_guard_is_corrected_to_an_allowed_value_then_parks() -> None:
    agent = buyer(
        "boulware",
        {"term": "location", "op": "==", "value": "Berlin"},
        {"term": "location", "op": "in", "value": ["Lisbon", "Porto"]},
        terms=f"{TERMS}, location",
    )

    move = decide(agent, exchange([], []))

    assert move.action == "ask"
    assert "(location: Lisbon or Porto; location: Berlin)" in move.message


def _feedback(guard: Guard) -> tuple[Violation, ...]:
    return (Violation(guard, "test"),)


def test_feedback_clamps_to_the_limit_and_sets_the_currency() -> None:
    guard = Guard("amount", ">=", 900, "USD")
    move = offline.decide(buyer_situation(exchange([], []), feedback=_feedback(guard)))
    assert move == Move("propose", "I can offer $900.", {"amount": 900, "currency": "USD"})


def test_feedback_picks_an_allowed_value_for_a_fixed_term() -> None:
    day = Guard("day", "in", ("Saturday", "Sunday"))
    move = offline.decide(
        buyer_situation(exchange([], []), day, feedback=_feedback(Guard("day", "==", "Sunday")))
    )
    assert move.terms == eur(770, day="Sunday")


def test_a_confirmation_the_guards_no_longer_allow_becomes_our_offer() -> None:
    record = exchange([eur(770)], [])
    record = TaskRecord(
        record.state,
        (*record.history, Entry("agent", Move("accept", "Deal.", eur(770), accepts_offer_id="o0"))),
    )
    move = offline.decide(buyer_situation(record, feedback=_feedback(Guard("amount", ">=", 800, "EUR"))))
    assert move == Move("counter", "I can offer €800.", eur(800))


# --- Fixed terms --------------------------------------------------------------------------

WEEKDAY_BUYER = buyer(
    "boulware",
    {"term": "day", "op": "in", "value": WEEKDAYS},
    terms=f"{TERMS}, day (weekday)",
)


@pytest.mark.parametrize(
    ("t", "theirs", "expected"),
    [
        (0, None, ("propose", "I can offer €770 (day: Monday).", eur(770, day="Monday"))),
        # Their weekend does not suit us: restate ours. (Their 300 reads as a floor far below our
        # aspiration, so our aim is the aspiration itself: we hold it until our last offer.)
        (1, eur(300, day="Saturday"), ("counter", "I can offer €770 (day: Monday).", eur(770, day="Monday"))),
        # Silent on the day: it commits to nothing there.
        (1, eur(300), ("counter", "I can offer €770 (day: Monday).", eur(770, day="Monday"))),
        (1, eur(300, day="tuesday"), ("accept", "Agreed: €300 (day: tuesday).", eur(300, day="tuesday"))),
        # An impossible schedule ends at our deadline, never in a deal.
        (9, eur(300, day="Saturday"), ("reject", "We cannot agree on these terms, so I must decline.", None)),
    ],
)
def test_fixed_terms(t: int, theirs: dict[str, Any] | None, expected: tuple[str, str, Any]) -> None:
    record = exchange([eur(0, day="Monday")] * t, [theirs] * t if theirs else [])
    move = decide(WEEKDAY_BUYER, record)
    assert (move.action, move.message, move.terms) == expected


def test_a_firm_price_needs_no_limit_and_moves_nowhere() -> None:
    frank = Agent(
        terms=f"{TERMS}, day (weekday)",
        term_guards=[
            {"term": "amount", "op": "==", "value": 300, "currency": "EUR"},
            {"term": "day", "op": "in", "value": ["Saturday", "Sunday"]},
        ],
    )
    opening = decide(frank, exchange([], [eur(200, day="Monday")], our_role="agent"), our_role="agent")
    later = decide(frank, exchange([eur(300, day="Saturday")] * 5, [eur(290, day="Sunday")] * 5))
    taken = decide(frank, exchange([eur(300, day="Saturday")], [eur(300, day="Sunday")]))

    assert opening.terms == later.terms == eur(300, day="Saturday")
    assert (taken.action, taken.terms) == ("accept", eur(300, day="Sunday"))


@pytest.mark.parametrize(
    ("t", "theirs", "action"),
    [
        (1, {"amount": 800, "currency": "EUR"}, "counter"),
        (9, {"amount": 800, "currency": "EUR"}, "reject"),
        (9, {"amount": 800}, "reject"),
        (9, {"amount": 800, "currency": "USD"}, "accept"),
    ],
)
def test_another_currency_is_never_taken_as_ours(t: int, theirs: dict[str, Any], action: str) -> None:
    kim = Agent(
        terms="amount (number, USD per day), currency",
        term_guards=[{"term": "amount", "op": "<=", "value": 800, "currency": "USD"}],
    )
    move = decide(kim, exchange([{"amount": 560, "currency": "USD"}] * t, [theirs] * t))
    assert move.action == action
    if action == "counter":
        assert move.terms == {"amount": 562, "currency": "USD"}


# --- Absurd offers --------------------------------------------------------------------------


def test_an_amount_no_double_holds_is_no_offer() -> None:
    """A counterparty's structured amount of 10**400 (JSON, and a Python int, but beyond any
    double) is no offer: the seller goes on as if none had been made, rather than failing on
    ``float()`` of it."""
    unanswered = decide(seller(), exchange([eur(1358)], []))
    move = decide(seller(), exchange([eur(1358)], [eur(10**400)]))
    assert (move.action, move.terms) == ("counter", unanswered.terms)


def test_a_prose_amount_that_reads_as_infinity_is_never_accepted() -> None:
    """A prose offer of €99…9 (400 digits, infinity as a double) names no amount: the seller
    does not agree to €inf, a price no JSON can carry."""
    idris = seller()
    record = exchange([eur(1358)], [])
    record = TaskRecord(record.state, (*record.history, Entry("agent", Move("counter", "€" + "9" * 400))))
    move = decide(idris, record)
    assert (move.action, move.terms) == ("counter", decide(seller(), exchange([eur(1358)], [])).terms)


@pytest.mark.parametrize("strategy", sorted(offline.STRATEGIES))
def test_with_one_move_in_all_an_offer_within_the_limit_is_taken(strategy: str) -> None:
    """Our only move is our last: the choice is their offer or no deal, so 1,000 against a floor of
    950 is taken, though short of where the curve would open (it was rejected)."""
    record = exchange([], [eur(1000)], our_role="agent")
    move = decide(seller(strategy), record, our_role="agent", max_moves=1)
    assert (move.action, move.terms, move.accepts_offer_id) == ("accept", eur(1000), "t0")
    assert (
        decide(
            seller(strategy), exchange([], [eur(900)], our_role="agent"), our_role="agent", max_moves=1
        ).action
        == "reject"
    )


# --- Relative dates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("today", "2026-11-30"),
        ("Tomorrow", "2026-12-01"),
        ("next Tuesday", "2026-12-01"),
        ("next  saturday", "2026-12-05"),
        ("next Sat", "2026-12-05"),
        # Today is a Monday: "next Monday" is a week away.
        ("next Monday", "2026-12-07"),
        ("Saturday", None),
        ("2026-12-01", None),
        ("next month", None),
        ("next Tues", None),
    ],
)
def test_relative_dates(text: str, expected: str | None) -> None:
    assert negotiator.resolve_relative_date(text, NOW.date()) == expected


@pytest.mark.parametrize(("timezone", "start"), [("UTC", "2026-12-01"), ("Pacific/Auckland", "2026-12-08")])
def test_a_relative_date_is_offered_as_the_absolute_date_on_the_agents_clock(
    timezone: str, start: str
) -> None:
    hal = Agent(
        terms=f"{TERMS}, start (date)",
        timezone=timezone,
        term_guards=[{**FLOOR, "value": 600}, {"term": "start", "op": "==", "value": "next Tuesday"}],
    )
    move = decide(hal, exchange([], [eur(500)], our_role="agent"), our_role="agent")
    # Our opening: the floor of 600 / 0.7, rounded up.
    assert move.terms == eur(858, start=start)


@pytest.mark.parametrize(("start", "action"), [("2026-12-01", "accept"), ("2026-11-30", "counter")])
def test_a_relative_date_bounds_what_we_accept(start: str, action: str) -> None:
    ivy = buyer(
        "boulware", {"term": "start", "op": ">=", "value": "tomorrow"}, terms=f"{TERMS}, start (date)"
    )
    move = decide(ivy, exchange([eur(770)], [eur(700, start=start)]))
    # Taken as offered; otherwise our counter names no start: we never invent a date.
    assert (move.action, move.terms) == (action, eur(700, start=start) if action == "accept" else eur(770))
