"""Tests for negotiations.verdict: docs/wire-format.md#verdict and #settlement."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from negotiations.verdict import (
    BASIS_ORDER,
    Settlement,
    Verdict,
    prose_amounts,
    settle,
    verify_agreement,
)
from negotiations.wire import Entry, Move, Role, TaskRecord, task_record_from_json

TERMINAL = frozenset({"accept", "reject", "decline", "withdraw"})
DEAL = {"amount": 1000, "currency": "EUR"}


def move(
    action: str,
    message: str = "",
    terms: dict[str, Any] | None = None,
    offer_id: str = "",
    accepts: str = "",
) -> Move:
    return Move(action, message, terms, offer_id, accepts)


def user(m: Move) -> Entry:
    return Entry("user", m)


def agent(m: Move) -> Entry:
    return Entry("agent", m)


def text(role: Role, body: str) -> Entry:
    return Entry(role, None, body)


def task(state: str, *history: Entry) -> TaskRecord:
    return TaskRecord(state, history)


def test_basis_order() -> None:
    assert BASIS_ORDER == ("prose", "state", "terms", "reference")


# --- verify_agreement ---------------------------------------------------------------------

PROPOSE = move("propose", "1000 EUR?", DEAL, "o1")


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        # Step 1: open states, whatever the history says.
        pytest.param(
            task("submitted"),
            Verdict("open", "state", None, "task is still submitted"),
            id="1-open-submitted",
        ),
        pytest.param(
            task("working", user(PROPOSE)),
            Verdict("open", "state", None, "task is still working"),
            id="1-open-working",
        ),
        pytest.param(
            task("input-required", user(PROPOSE), agent(move("accept", "", DEAL, "o2", "o1"))),
            Verdict("open", "state", None, "task is still input-required"),
            id="1-open-input-required",
        ),
        # Step 1: every other non-completed state is declined.
        *(
            pytest.param(
                task(state, user(PROPOSE), agent(move("accept", "", DEAL, "o2", "o1"))),
                Verdict("declined", "state", None, f"task ended as {state}"),
                id=f"1-declined-{state}",
            )
            for state in ("rejected", "canceled", "failed", "auth-required", "unknown")
        ),
        # Step 3: completed with no decodable move.
        pytest.param(
            task("completed"),
            Verdict("unconfirmed", "state", None, "task completed without a readable move"),
            id="3-empty-history",
        ),
        pytest.param(
            task("completed", text("user", "$1000?"), text("agent", "Deal at $1000.")),
            Verdict("unconfirmed", "state", None, "task completed without a readable move"),
            id="3-text-only",
        ),
        # Step 4: closing move names an offer.
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL, "o2", "o1"))),
            Verdict("agreed", "reference", DEAL, 'closing move accepts offer "o1"'),
            id="4-agreed-restating-same-terms",
        ),
        pytest.param(
            task(
                "completed",
                user(PROPOSE),
                agent(move("accept", "ok", {"currency": "EUR", "amount": 1000.0}, "o2", "o1")),
            ),
            Verdict("agreed", "reference", DEAL, 'closing move accepts offer "o1"'),
            id="4-agreed-100-vs-100.0-and-key-order",
        ),
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "ok", accepts="o1"))),
            Verdict("agreed", "reference", DEAL, 'closing move accepts offer "o1"'),
            id="4-agreed-without-restating",
        ),
        pytest.param(
            task(
                "completed",
                agent(move("propose", "", {"amount": 900}, "o0")),
                user(PROPOSE),
                agent(move("counter", "", {"amount": 1100}, "o3")),
                user(move("accept", "fine", accepts="o0")),
            ),
            Verdict("agreed", "reference", {"amount": 900}, 'closing move accepts offer "o0"'),
            id="4-agreed-on-an-older-offer",
        ),
        pytest.param(
            task(
                "completed",
                user(move("propose", "no terms", offer_id="o1")),
                agent(move("accept", "ok", accepts="o1")),
            ),
            Verdict("agreed", "reference", None, 'closing move accepts offer "o1"'),
            id="4-agreed-offer-without-terms",
        ),
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL, "o2", "o9"))),
            Verdict(
                "conflict",
                "reference",
                None,
                'closing move accepts offer "o9", which appears nowhere in the task',
            ),
            id="4-conflict-unknown-offer",
        ),
        pytest.param(
            task(
                "completed",
                user(PROPOSE),
                agent(move("accept", "ok", {"amount": 900, "currency": "EUR"}, "o2", "o1")),
            ),
            Verdict(
                "conflict",
                "reference",
                None,
                'closing move restates terms that differ from offer "o1"',
            ),
            id="4-conflict-restates-different-terms",
        ),
        pytest.param(
            task(
                "completed",
                user(PROPOSE),
                agent(move("accept", "ok", {"amount": "1000", "currency": "EUR"}, "o2", "o1")),
            ),
            Verdict(
                "conflict",
                "reference",
                None,
                'closing move restates terms that differ from offer "o1"',
            ),
            id="4-conflict-450-vs-string-450",
        ),
        pytest.param(
            task(
                "completed",
                user(move("propose", "no terms", offer_id="o1")),
                agent(move("accept", "ok", DEAL, "o2", "o1")),
            ),
            Verdict(
                "conflict",
                "reference",
                None,
                'closing move restates terms that differ from offer "o1"',
            ),
            id="4-conflict-offer-had-no-terms",
        ),
        # Step 5: both closing moves carry terms, no reference, and they differ.
        pytest.param(
            task(
                "completed",
                user(move("accept", "yes", {"amount": 1000}, "o1")),
                agent(move("accept", "yes", {"amount": 1100}, "o2")),
            ),
            Verdict(
                "conflict",
                "terms",
                None,
                "the last two moves name different terms and neither names the other's offer",
            ),
            id="5-conflict-terms-differ",
        ),
        # Step 6: closing terms stand.
        pytest.param(
            task(
                "completed",
                user(move("propose", "", {"amount": 1000}, "o1")),
                agent(move("accept", "", {"amount": 1000.0}, "o2")),
            ),
            Verdict("agreed", "terms", {"amount": 1000.0}, "closing move names terms"),
            id="6-agreed-same-terms",
        ),
        pytest.param(
            task("completed", user(move("propose", "$5")), agent(move("accept", "", DEAL, "o2"))),
            Verdict("agreed", "terms", DEAL, "closing move names terms"),
            id="6-agreed-previous-without-terms",
        ),
        pytest.param(
            task("completed", agent(move("accept", "", DEAL, "o2"))),
            Verdict("agreed", "terms", DEAL, "closing move names terms"),
            id="6-agreed-single-move",
        ),
        pytest.param(
            # Undecodable messages are skipped, so "previous" is the last decodable move.
            task(
                "completed",
                user(move("propose", "", {"amount": 1000}, "o1")),
                text("agent", "hmm"),
                agent(move("accept", "", {"amount": 1000}, "o2")),
                text("user", "thanks"),
            ),
            Verdict("agreed", "terms", {"amount": 1000}, "closing move names terms"),
            id="6-agreed-skipping-text",
        ),
        # Step 7: closing move carries no terms.
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "Deal."))),
            Verdict(
                "unconfirmed",
                "state",
                None,
                "task completed, but the closing move carries no terms; send terms with every "
                "offer to make agreement verifiable",
            ),
            id="7-unconfirmed",
        ),
    ],
)
def test_verify_agreement(record: TaskRecord, expected: Verdict) -> None:
    assert verify_agreement(record) == expected


def test_verify_agreement_reads_both_dialects_alike() -> None:
    offer = {"action": "propose", "message": "m", "terms": {"amount": 100}, "offerId": "o1"}
    accept = {
        "action": "accept",
        "message": "m",
        "terms": {"amount": 100.0},
        "acceptsOfferId": "o1",
        "offerId": "o2",
    }
    v03 = {
        "status": {"state": "completed"},
        "history": [
            {"role": "user", "parts": [{"kind": "data", "data": offer}]},
            {"role": "agent", "parts": [{"kind": "data", "data": accept}]},
        ],
    }
    v10 = {
        "status": {"state": "TASK_STATE_COMPLETED"},
        "history": [
            {"role": "ROLE_USER", "parts": [{"data": offer}]},
            {"role": "ROLE_AGENT", "parts": [{"data": accept}]},
        ],
    }
    expected = Verdict("agreed", "reference", {"amount": 100}, 'closing move accepts offer "o1"')
    assert verify_agreement(task_record_from_json(v03)) == expected
    assert verify_agreement(task_record_from_json(v10)) == expected


# --- prose_amounts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prose", "expected"),
    [
        ("", ()),
        ("Two days a month at 1000.", ()),
        ("$450 it is", (450.0,)),
        ("€1,200/day", (1200.0,)),
        ("£ 99.50 each", (99.5,)),
        ("1,000 euros", (1000.0,)),
        ("1 euro", (1.0,)),
        (
            "800 Dollars or 700 USD, or 600 gbp, 500eur, 400 pounds, 300 pound",
            (800.0, 700.0, 600.0, 500.0, 400.0, 300.0),
        ),
        ("€1,200 or 1200 EUROS, and $1200.00", (1200.0,)),
        ("$100 then $50 then $100", (100.0, 50.0)),
        ("$450 euros", (450.0,)),
        # Not "right before" a currency word, or not a currency word at all.
        ("450 euroland", ()),
        ("x450 euros", ()),
        ("450  euros", ()),
        ("$ 450", (450.0,)),
        ("$  450", ()),
        ("100 usd.", (100.0,)),
        ("1.5 EUR", (1.5,)),
        # Too large for a double: it would read as infinity.
        ("€" + "9" * 400 + " or €5", (5.0,)),
    ],
)
def test_prose_amounts(prose: str, expected: tuple[float, ...]) -> None:
    assert prose_amounts(prose) == expected


# --- settle -------------------------------------------------------------------------------


@pytest.mark.parametrize("our_role", ["user", "agent"])
@pytest.mark.parametrize(
    "record",
    [
        task("submitted"),
        task("working", user(PROPOSE)),
        task("input-required", user(PROPOSE), agent(move("counter", "", {"amount": 1100}))),
        # An accept that was countered, and then countered again, is no longer the last move.
        task(
            "input-required",
            user(move("accept", "", DEAL, "o2", "o1")),
            agent(move("counter", "")),
            user(move("counter", "")),
            agent(move("propose", "")),
        ),
    ],
)
def test_settle_open_without_a_close_is_none(record: TaskRecord, our_role: Role) -> None:
    assert settle(record, our_role=our_role, terminal_actions=TERMINAL) is None


@pytest.mark.parametrize(
    ("record", "our_role", "reason"),
    [
        pytest.param(
            task("input-required", user(move("accept", "Deal.")), agent(move("counter", "No."))),
            "user",
            'You closed with "accept", but they replied with "counter" rather than closing too.',
            id="outbound-we-closed",
        ),
        pytest.param(
            task("input-required", user(move("accept", "Deal.")), agent(move("counter", "No."))),
            "agent",
            'They closed with "accept", but you replied with "counter" rather than closing too.',
            id="inbound-they-closed",
        ),
        pytest.param(
            task("input-required", user(move("counter", "No.")), agent(move("reject", "Bye."))),
            "agent",
            'You closed with "reject", but they sent no readable reply.',
            id="last-move-closes-nothing-after",
        ),
        pytest.param(
            task("working", user(move("withdraw", "Bye.")), text("agent", "500 Internal Error")),
            "user",
            'You closed with "withdraw", but they sent no readable reply.',
            id="outbound-no-readable-reply",
        ),
        pytest.param(
            task("working", user(move("withdraw", "Bye.")), text("agent", "500 Internal Error")),
            "agent",
            'They closed with "withdraw", but you sent no readable reply.',
            id="inbound-no-readable-reply",
        ),
        pytest.param(
            # Both last moves terminal while the task stays open: the earlier one closed.
            task("input-required", user(move("accept", "")), agent(move("decline", ""))),
            "user",
            'You closed with "accept", but they replied with "decline" rather than closing too.',
            id="both-terminal",
        ),
    ],
)
def test_settle_unanswered(record: TaskRecord, our_role: Role, reason: str) -> None:
    assert settle(record, our_role=our_role, terminal_actions=TERMINAL) == Settlement(
        "unanswered", "state", None, reason, ended_by=""
    )


def test_settle_uses_the_given_terminal_actions() -> None:
    record = task("input-required", user(move("introduce", "")), agent(move("ask", "")))
    assert settle(record, our_role="user", terminal_actions=TERMINAL) is None
    assert settle(record, our_role="user", terminal_actions=frozenset({"introduce"})) == (
        Settlement(
            "unanswered",
            "state",
            None,
            'You closed with "introduce", but they replied with "ask" rather than closing too.',
            ended_by="",
        )
    )


PROSE_CONFLICT = task(
    "completed",
    user(move("propose", "How about €1,000 a day, or $1,100?")),
    agent(move("accept", "Deal at 1,200 euros a day.")),
)


@pytest.mark.parametrize(
    ("our_role", "expected"),
    [
        (
            "user",
            Settlement(
                "conflict",
                "prose",
                None,
                "You named 1000/1100 and they named 1200: no amount in common, so this is not an agreement.",
                ended_by="theirs",
                disputed={"mine": [1000.0, 1100.0], "theirs": [1200.0]},
            ),
        ),
        (
            "agent",
            Settlement(
                "conflict",
                "prose",
                None,
                "You named 1200 and they named 1000/1100: no amount in common, so this is not an agreement.",
                ended_by="ours",
                disputed={"mine": [1200.0], "theirs": [1000.0, 1100.0]},
            ),
        ),
    ],
)
def test_settle_prose_conflict(our_role: Role, expected: Settlement) -> None:
    assert settle(PROSE_CONFLICT, our_role=our_role, terminal_actions=TERMINAL) == expected


UNCONFIRMED_REASON = (
    "Task completed, but the closing move carries no terms; send terms with every offer to make "
    "agreement verifiable."
)


@pytest.mark.parametrize("our_role", ["user", "agent"])
@pytest.mark.parametrize(
    ("record", "reason", "last"),
    [
        pytest.param(
            task(
                "completed",
                user(move("propose", "$1,000 or $1,100?")),
                agent(move("accept", "1100 dollars works.")),
            ),
            UNCONFIRMED_REASON,
            "agent",
            id="shared-amount",
        ),
        pytest.param(
            task(
                "completed",
                user(move("propose", "Two days a month?")),
                agent(move("accept", "Yes, at $900.")),
            ),
            UNCONFIRMED_REASON,
            "agent",
            id="one-side-names-no-amount",
        ),
        pytest.param(
            task("completed", agent(move("accept", "Yes, at $900."))),
            UNCONFIRMED_REASON,
            "agent",
            id="one-side-has-no-move",
        ),
        pytest.param(
            task("completed", text("user", "$900?"), text("agent", "$1000.")),
            "Task completed without a readable move.",
            None,
            id="no-moves-at-all",
        ),
    ],
)
def test_settle_prose_unconfirmed(record: TaskRecord, reason: str, last: Role | None, our_role: Role) -> None:
    ended_by: Literal["ours", "theirs", ""] = "" if last is None else "ours" if last == our_role else "theirs"
    assert settle(record, our_role=our_role, terminal_actions=TERMINAL) == Settlement(
        "unconfirmed", "state", None, reason, ended_by=ended_by
    )


@pytest.mark.parametrize(
    ("record", "our_role", "expected"),
    [
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "ok", accepts="o1"))),
            "user",
            Settlement("agreed", "reference", DEAL, 'Closing move accepts offer "o1".', ended_by="theirs"),
            id="agreed-reference",
        ),
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL, "o2"))),
            "agent",
            Settlement("agreed", "terms", DEAL, "Closing move names terms.", ended_by="ours"),
            id="agreed-terms",
        ),
        pytest.param(
            task("rejected", user(PROPOSE), agent(move("reject", "No."))),
            "agent",
            Settlement("declined", "state", None, "Task ended as rejected.", ended_by="ours"),
            id="declined-by-us",
        ),
        pytest.param(
            task("canceled", user(PROPOSE), agent(move("withdraw", "Bye."))),
            "user",
            Settlement("declined", "state", None, "Task ended as canceled.", ended_by="theirs"),
            id="declined-by-them",
        ),
        pytest.param(
            task("failed"),
            "user",
            Settlement("declined", "state", None, "Task ended as failed.", ended_by=""),
            id="declined-empty",
        ),
        pytest.param(
            task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL, "o2", "o9"))),
            "user",
            Settlement(
                "conflict",
                "reference",
                None,
                'Closing move accepts offer "o9", which appears nowhere in the task.',
                ended_by="theirs",
            ),
            id="conflict-reference",
        ),
        pytest.param(
            task(
                "completed",
                user(move("accept", "", {"amount": 1}, "o1")),
                agent(move("accept", "", {"amount": 2}, "o2")),
            ),
            "agent",
            Settlement(
                "conflict",
                "terms",
                None,
                "The last two moves name different terms and neither names the other's offer.",
                ended_by="ours",
            ),
            id="conflict-terms",
        ),
    ],
)
def test_settle_passes_the_verdict_through(record: TaskRecord, our_role: Role, expected: Settlement) -> None:
    assert settle(record, our_role=our_role, terminal_actions=TERMINAL) == expected


@pytest.mark.parametrize(
    "record",
    [
        task("input-required", user(move("accept", "")), agent(move("counter", ""))),
        task("input-required", user(move("counter", "")), agent(move("reject", ""))),
        task("working", user(move("withdraw", "")), text("agent", "?")),
        task("input-required", user(move("accept", "")), agent(move("decline", ""))),
        PROSE_CONFLICT,
        task("completed", user(move("propose", "$5")), agent(move("accept", "$5 it is"))),
        task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL, "o2", "o1"))),
        task("completed", user(PROPOSE), agent(move("accept", "ok", {"amount": 1}, "o2", "o1"))),
        task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL, "o2", "o9"))),
        task("completed", user(move("accept", "", {"a": 1})), agent(move("accept", "", {"a": 2}))),
        task("completed", user(PROPOSE), agent(move("accept", "ok", DEAL))),
        task("rejected", user(PROPOSE), agent(move("reject", ""))),
        task("completed"),
    ],
)
def test_settle_is_symmetric(record: TaskRecord) -> None:
    ours = settle(record, our_role="user", terminal_actions=TERMINAL)
    theirs = settle(record, our_role="agent", terminal_actions=TERMINAL)
    assert ours is not None
    assert theirs is not None
    assert (ours.outcome, ours.basis, ours.terms) == (theirs.outcome, theirs.basis, theirs.terms)
    if ours.ended_by:
        assert {ours.ended_by, theirs.ended_by} == {"ours", "theirs"}
    else:
        assert theirs.ended_by == ""
    if ours.disputed is not None:
        assert theirs.disputed == {"mine": ours.disputed["theirs"], "theirs": ours.disputed["mine"]}


# --- beyond the seed: nobody agrees with itself on the other side's behalf --------------------

NOT_BOUND = 'closing move accepts offer "x", which the other side neither made once nor accepted'


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(
            task(
                "completed",
                user(move("propose", "700?", DEAL, "o1")),
                agent(move("propose", "9000", {"amount": 9000}, "x")),
                agent(move("accept", "done", None, "", "x")),
            ),
            Verdict("conflict", "reference", None, NOT_BOUND),
            id="a-side-accepts-its-own-offer",
        ),
        pytest.param(
            task(
                "completed",
                user(move("counter", "500", {"amount": 500}, "x")),
                agent(move("propose", "5000", {"amount": 5000}, "x")),
                user(move("accept", "ok", None, "", "x")),
            ),
            Verdict("conflict", "reference", None, NOT_BOUND),
            id="an-offer-id-named-twice",
        ),
        pytest.param(
            task(
                "completed",
                agent(move("counter", "900", {"amount": 900}, "x")),
                user(move("accept", "ok", {"amount": 900}, "", "x")),
                agent(move("accept", "confirmed", {"amount": 900}, "", "x")),
            ),
            Verdict("agreed", "reference", {"amount": 900}, 'closing move accepts offer "x"'),
            id="confirming-their-acceptance-of-our-offer",
        ),
    ],
)
def test_an_offer_binds_only_when_the_other_side_made_or_accepted_it(
    record: TaskRecord, expected: Verdict
) -> None:
    assert verify_agreement(record) == expected
