"""The ``offline`` negotiator: a time-dependent concession strategy over one numeric term.

Deterministic, no key, no network. It is named ``offline`` wherever it appears.

It knows its party's limit from a term guard (``amount >= 950``) or from the
party's standing guidance ("Up to 1,100 a day"); without either it asks. Its
offer at its own move ``t`` (0-based) of ``T`` moves concedes from an opening
aspiration to the limit along ``start + (limit - start) * (t / (T - 1)) ** 2``
(a Boulware curve: it holds firm early and concedes late). It accepts the
counterparty's offer once that is at least as good as its own next offer, and
rejects on its last move when they are still apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from negotiations.verdict import prose_amounts
from negotiations.wire import Entry, Move, TaskRecord

OPENING_FACTOR = {"ceiling": 0.7, "floor": 1.4}
_CEILING_WORDS = re.compile(r"\b(up to|at most|no more than|max(imum)?|ceiling|under|below)\b", re.I)
_FLOOR_WORDS = re.compile(r"\b(at least|no less than|min(imum)?|floor|above)\b", re.I)
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£"}


@dataclass(frozen=True)
class Limit:
    """The party's reservation value on ``term``: the most it pays (ceiling) or the least it takes (floor)."""

    term: str
    value: float
    kind: Literal["ceiling", "floor"]


@dataclass(frozen=True)
class Vocabulary:
    """The agent's actions sorted into the roles the strategy plays them in."""

    opening: str
    counter: str
    accept: str
    reject: str

    @classmethod
    def from_actions(cls, actions: list[dict[str, Any]]) -> Vocabulary:
        open_moves = [a["name"] for a in actions if not a.get("terminal")]
        accepts = [a["name"] for a in actions if a.get("terminal") and a.get("state") == "completed"]
        rejects = [a["name"] for a in actions if a.get("terminal") and a.get("state") != "completed"]
        if not open_moves or not accepts or not rejects:
            raise ValueError(
                "the offline negotiator needs at least one open action, one action that ends "
                "completed and one that ends otherwise"
            )
        return cls(opening=open_moves[0], counter=open_moves[-1], accept=accepts[0], reject=rejects[0])


@dataclass(frozen=True)
class Situation:
    """Everything one decision depends on."""

    record: TaskRecord
    our_role: Literal["user", "agent"]
    vocabulary: Vocabulary
    term: str
    currency: str
    structured: bool
    limit: Limit | None
    max_moves: int
    can_ask: bool
    unit: str = ""


def limit_from_guidance(guidance: list[str], term: str, offered: float | None) -> Limit | None:
    """Read a limit from the party's standing guidance, newest first.

    The first number in a line is the value; "up to"/"at most" make it a
    ceiling and "at least"/"minimum" a floor; with neither, a counterparty
    asking for more than the number makes it a ceiling.
    """
    for line in reversed(guidance):
        match = _NUMBER.search(line)
        if match is None:
            continue
        value = float(match.group().replace(",", ""))
        if _CEILING_WORDS.search(line):
            kind: Literal["ceiling", "floor"] = "ceiling"
        elif _FLOOR_WORDS.search(line):
            kind = "floor"
        else:
            kind = "ceiling" if offered is None or offered >= value else "floor"
        return Limit(term=term, value=value, kind=kind)
    return None


def their_offer(s: Situation) -> tuple[Entry, float] | None:
    """The counterparty's last move and the value it offers on ``s.term``, if it is one we can take.

    With terms, only an offer on exactly our term (a number) and currency
    counts: terms that add other keys, quote another currency or put a string
    where the number goes are no offer, so accepting one can never agree to
    anything but the number we bargain over. Without terms (a prose-only
    counterparty), the first amount in its message counts.
    """
    for entry in reversed(s.record.history):
        if entry.role == s.our_role or entry.move is None:
            continue
        terms = entry.move.terms
        if terms is None:
            amounts = prose_amounts(entry.move.message)
            return (entry, amounts[0]) if amounts else None
        value = terms.get(s.term)
        if set(terms) - {s.term, "currency"} or not isinstance(value, int | float) or isinstance(value, bool):
            return None
        if s.currency and terms.get("currency", s.currency) != s.currency:
            return None
        return entry, float(value)
    return None


def decide(s: Situation) -> Move:
    """One move for ``s``. The platform mints ``offerId`` afterwards; this never does."""
    ours = [e for e in s.record.history if e.role == s.our_role]
    theirs = [e for e in s.record.history if e.role != s.our_role and e.move is not None]
    last_theirs = theirs[-1].move if theirs else None
    if last_theirs is not None and last_theirs.action == s.vocabulary.reject:
        return Move(s.vocabulary.reject, "Understood. Thank you for your time.")
    if last_theirs is not None and last_theirs.action == s.vocabulary.accept:
        confirmed = _confirm(s, last_theirs, ours)
        if confirmed is not None:
            return confirmed
    if s.limit is None:
        if s.can_ask:
            unit = f" ({s.unit})" if s.unit else ""
            return Move(
                "ask",
                f"What is your limit on {s.term}{unit}: the most you will pay, or the least you will take?",
            )
        return Move(s.vocabulary.reject, "I cannot negotiate this without instructions from my party.")
    offered = their_offer(s)
    t = len(ours)
    mine = _offer_at(s.limit, t, s.max_moves)
    if offered is not None and _acceptable(s.limit, offered[1], mine):
        entry, value = offered
        assert entry.move is not None
        return Move(
            s.vocabulary.accept,
            f"Agreed: {_amount(s, value)}.",
            terms=_terms(s, value) if entry.move.terms is None else dict(entry.move.terms),
            accepts_offer_id=entry.move.offer_id,
        )
    if t >= s.max_moves - 1 and offered is not None:
        return Move(s.vocabulary.reject, f"We cannot meet at {_amount(s, offered[1])}, so I must decline.")
    action = s.vocabulary.opening if t == 0 else s.vocabulary.counter
    return Move(action, f"I can offer {_amount(s, mine)}.", terms=_terms(s, mine))


def _confirm(s: Situation, accept: Move, ours: list[Entry]) -> Move | None:
    """Confirm their acceptance of our own offer with the same terms and offer id."""
    our_offers = {e.move.offer_id: e.move for e in ours if e.move is not None and e.move.offer_id}
    accepted = our_offers.get(accept.accepts_offer_id)
    if accepted is not None:
        return Move(
            s.vocabulary.accept,
            "Confirmed.",
            terms=accepted.terms,
            accepts_offer_id=accept.accepts_offer_id,
        )
    if not s.structured and ours and ours[-1].move is not None:
        value = prose_amounts(ours[-1].move.message)
        if value:
            return Move(s.vocabulary.accept, f"Agreed at {_amount(s, value[0])}.")
    return None


def _offer_at(limit: Limit, t: int, max_moves: int) -> float:
    start = limit.value * OPENING_FACTOR[limit.kind]
    progress = min(1.0, t / max(1, max_moves - 1)) ** 2
    return float(round(start + (limit.value - start) * progress))


def _acceptable(limit: Limit, value: float, my_next: float) -> bool:
    return value <= my_next if limit.kind == "ceiling" else value >= my_next


def _terms(s: Situation, value: float) -> dict[str, Any] | None:
    if not s.structured:
        return None
    terms: dict[str, Any] = {s.term: int(value) if value.is_integer() else value}
    if s.currency:
        terms["currency"] = s.currency
    return terms


def _amount(s: Situation, value: float) -> str:
    number = f"{int(value):,}" if value.is_integer() else f"{value:,.2f}"
    symbol = _SYMBOLS.get(s.currency)
    if symbol:
        return f"{symbol}{number}"
    return f"{number} {s.currency}".strip()
