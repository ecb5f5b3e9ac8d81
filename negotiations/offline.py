"""The ``offline`` negotiator: named concession strategies over one numeric term, plus fixed terms.

Deterministic, no key, no network. It is named ``offline`` wherever it appears.

**The numeric term** (say ``amount``) is bargained between an aspiration (our
opening) and the reservation value (our limit), chosen per agent by
``Agent.strategy``. Every strategy plays to the same clock: of our
``max_moves`` moves, the last (``T = max_moves - 1``) only accepts or rejects,
since a counter-offer there could not be answered; the one before it
(``D = T - 1``, :func:`last_offer_move`) offers the reservation itself, the
offer a counterparty with a zone of agreement can always take; before that we
concede towards the *aim* (:func:`aim`), halfway between our limit and the
counterparty's as read from its opening, so two Parley agents both aim at the
even split:

* time-dependent tactics (Faratin, Sierra & Jennings, "Negotiation decision
  functions for autonomous agents", Robotics and Autonomous Systems 24(3-4),
  1998; the polynomial family with κ = 0): our offer at our own move ``t``
  (0-based) is

      offer(t) = aspiration + (aim - aspiration) · (min(t, D - 1) / (D - 1)) ** (1 / β)

  with β = 0.5 for ``boulware`` (holds firm, concedes late), 1 for ``linear``
  and 2 for ``conceder`` (concedes early), and the reservation at ``t >= D``;
* ``tit_for_tat``: relative tit-for-tat, a behaviour-dependent tactic of the
  same paper, with δ = 1: our next offer is our last one times the ratio of the
  counterparty's previous offer to its last, so we concede in the proportion
  they just did, clamped between aspiration and aim. It never concedes less
  than the Boulware tactic would (Faratin et al.'s combination of tactics,
  taking the more conceding one), so two tit-for-tat agents, each waiting for
  the other to move first, still meet.

Offers are rounded to a whole number towards our side (down for a ceiling, up
for a floor), so rounding never crosses the reservation. The limit comes from a
term guard (``amount >= 950``, tightest first; its op is the party's side) or
from the party's standing guidance ("Not above €1,100 a day"), read by
:mod:`negotiations.limits` only where it states one limit unambiguously — the
side is not known to the strategy before then, so the answer must say it.
Without either it asks its party, and when the party's answer gave no usable
limit it asks again saying what was unclear and quoting it
(:func:`limit_question`). An agent with no principal has nobody to ask, so it
declines instead. The aspiration is the guard's optional ``aspiration``, else
:data:`negotiations.limits.OPENING_FACTOR` times the limit.

**Acceptance** (Faratin et al.'s "next offer" rule): we accept the
counterparty's offer once it is at least as good as our own next offer and it
keeps to every guard and fixed term; from our last offer on, our next offer is
the reservation, so we take any offer within our limit, as we do on our last move
whatever the cap (with ``max_moves`` 1 it is also our first). On our last move, when
we still cannot accept their offer, we reject. **Meeting halfway**: before our
last offer, when their offer is within our limit but short of our next offer, a
deal exists and we counter halfway between the two (:func:`_meet_halfway`)
rather than overshoot it.

Against a counterparty that never concedes into our limit there is no deal to
find: we offer our reservation, reject on our last move, and never accept
outside the limit (the guards check every move again).

**Fixed terms**: a term with an ``==`` or ``in`` guard is not bargained over.
Our offers carry its first allowed value, and an offer that leaves it out or
names a value outside the allowed set is not acceptable (we counter restating
ours, and reject at our deadline). A fixed numeric term (``amount == 800``) is
a firm price: no limit is needed and none is asked for.

**Guard feedback**: the negotiator checks every move against the guards and
calls :func:`decide` again with the violations in ``Situation.feedback``; the
strategy then corrects its terms (each broken term to the nearest value its
guard allows, the guard's currency) and a corrected accept becomes a counter.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from negotiations.digest import clean
from negotiations.limits import OPENING_FACTOR, Kind, Limit, Reading
from negotiations.verdict import prose_amounts
from negotiations.wire import Entry, Move, TaskRecord

if TYPE_CHECKING:
    from negotiations.negotiator import Guard, Violation

BOULWARE, LINEAR, CONCEDER, TIT_FOR_TAT = "boulware", "linear", "conceder", "tit_for_tat"
# β of each time-dependent tactic (Faratin et al. 1998): below 1 firm, above 1 yielding.
BETA: dict[str, float] = {BOULWARE: 0.5, LINEAR: 1.0, CONCEDER: 2.0}
STRATEGIES = frozenset({*BETA, TIT_FOR_TAT})

_SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£"}


@dataclass(frozen=True)
class Vocabulary:
    """The agent's actions sorted into the roles the strategy plays them in."""

    opening: str
    counter: str
    accept: str
    reject: str

    @classmethod
    def from_actions(cls, actions: list[dict[str, Any]]) -> Vocabulary:
        """Sort ``actions`` (ActionSpec dicts); raises ``ValueError`` unless there is an open action,
        one that ends completed and one that ends otherwise."""
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
    """Everything one decision depends on.

    ``term`` is the numeric term bargained over and ``currency`` the one our
    amounts are in ("" for none); ``structured`` is whether our moves carry
    terms. ``max_moves`` is how many moves we may make in all. ``can_ask`` is
    whether the agent has a principal to ask; ``unread`` is the party's
    answer that gave no usable limit, as it was read (None otherwise), quoted
    with what was unclear when we ask again. ``strategy`` is one of :data:`STRATEGIES`. ``guards``
    are the party's effective guards, relative dates already resolved;
    ``feedback`` the violations of earlier attempts at this same move (see the
    module docstring).
    """

    record: TaskRecord
    our_role: Literal["user", "agent"]
    vocabulary: Vocabulary
    term: str
    currency: str
    structured: bool
    limit: Limit | None
    max_moves: int
    can_ask: bool
    unread: Reading | None = None
    unit: str = ""
    strategy: str = BOULWARE
    guards: tuple[Guard, ...] = ()
    feedback: tuple[Violation, ...] = ()


@dataclass(frozen=True)
class Offer:
    """The counterparty's last move, read as an offer on our terms.

    ``value`` is what it names on ``Situation.term`` (None: nothing); ``terms``
    are its terms as sent, None for a prose move (``value`` then comes from its text).
    """

    entry: Entry
    value: float | None
    terms: dict[str, Any] | None


def limit_question(term: str, unit: str = "", unread: Reading | None = None) -> str:
    """The question that asks the party for its limit on ``term`` (``unit`` e.g. "EUR per day").

    After an answer that gave no usable limit (``unread``, as :func:`negotiations.limits.read_limit`
    read it), it first says what was unclear and quotes the answer, so the party is never asked the
    same question twice without being told why: 'Your answer gives no usable limit on amount (EUR
    per day): it names several numbers (2 and 1100). You said: "…" What is your limit on amount
    (EUR per day): the most you will pay, or the least you will take?'
    """
    shown = f"{term} ({unit})" if unit else term
    question = f"What is your limit on {shown}: the most you will pay, or the least you will take?"
    if unread is None or unread.limit is not None:
        return question
    said = clean(unread.said)
    stop = "" if said.endswith((".", "!", "?", "…")) else "."
    return f'{unread.message} You said: "{said}"{stop} {question}'


def time_dependent_offer(aspiration: float, reservation: float, t: int, deadline: int, beta: float) -> float:
    """``aspiration + (reservation - aspiration) * (min(t, T) / T) ** (1 / beta)``, unrounded.

    ``t`` is our own move (0-based), ``deadline`` (T) the move by which the offer reaches
    ``reservation`` (at least 1 is used; the strategy passes its aim there, see the module
    docstring); Faratin, Sierra & Jennings 1998, time-dependent tactics.
    """
    progress = min(1.0, t / max(1, deadline)) ** (1 / beta)
    return aspiration + (reservation - aspiration) * progress


def tit_for_tat_offer(our_last: float, their_previous: float, their_last: float, limit: Limit) -> float:
    """Relative tit-for-tat: ``our_last * their_previous / their_last``, unrounded.

    Clamped into [aspiration, reservation]; Faratin, Sierra & Jennings 1998,
    relative tit-for-tat with δ = 1. A last offer of 0 gives no ratio, so we
    hold ``our_last``.
    """
    mirrored = our_last * their_previous / their_last if their_last else our_last
    low, high = sorted((limit.opening, limit.value))
    return min(high, max(low, mirrored))


def their_offer(s: Situation) -> Offer | None:
    """The counterparty's last move as an offer, or None when it is no offer we can read.

    With terms, an offer may name only our numeric term (a number), a currency
    and terms we hold a guard on; terms that add anything else, or put a
    non-number where our number goes, are no offer, so accepting one can never
    agree to something we did not weigh. Whether an offer is acceptable (its
    currency, fixed terms, guards, value) is :func:`acceptable`'s call. Without
    terms (a prose-only counterparty), the first amount in its message counts.
    """
    for entry in reversed(s.record.history):
        if entry.role == s.our_role or entry.move is None:
            continue
        terms = entry.move.terms
        if terms is None:
            amounts = prose_amounts(entry.move.message)
            return Offer(entry, amounts[0], None) if amounts else None
        known = {s.term, "currency"} | {g.term for g in s.guards}
        value = terms.get(s.term)
        if set(terms) - known or (value is not None and not is_number(value)):
            return None
        return Offer(entry, None if value is None else float(value), dict(terms))
    return None


def acceptable(s: Situation, offer: Offer, my_next: float) -> bool:
    """Whether we take ``offer`` when our own next offer would be ``my_next``.

    It must name a value; a structured offer must be in our currency, name
    every fixed term and break no guard (prose names no fixed term, so with
    fixed terms it is never enough). Then the value must be allowed (a fixed
    numeric term) or at least as good as ``my_next`` (a ceiling: at most; a
    floor: at least).
    """
    if offer.value is None:
        return False
    fixed = _fixed_terms(s)
    if offer.terms is None:
        if fixed:
            return False
    else:
        if s.currency and str(offer.terms.get("currency", "")).upper() != s.currency.upper():
            return False
        if any(term not in offer.terms for term in fixed):
            return False
        if any(g.broken_by("accept", offer.terms) for g in s.guards):
            return False
    firm = [g for g in s.guards if g.term == s.term and g.fixed]
    if firm:
        return all(g.allows(offer.value) for g in firm)
    if s.limit is None:
        return False
    return offer.value <= my_next if s.limit.kind == "ceiling" else offer.value >= my_next


def next_value(s: Situation) -> float | None:
    """Our next offer on ``s.term`` by ``s.strategy``, rounded towards our side; None without a limit.

    Each tactic concedes from the aspiration towards :func:`aim` by the move before our last
    offer, and offers the reservation itself on :func:`last_offer_move`. Tit-for-tat mirrors
    their concession (never past the aim) but concedes at least as much as the Boulware tactic
    would, so two tit-for-tat agents, each waiting for the other to move first, still meet
    before the end. A fixed numeric term gives its first allowed value.
    """
    firm = [g for g in s.guards if g.term == s.term and g.fixed]
    if firm:
        return float(firm[0].allowed[0])
    if s.limit is None:
        return None
    t = sum(1 for e in s.record.history if e.role == s.our_role and e.move is not None)
    deadline = last_offer_move(s.max_moves)
    target = s.limit.value if t >= deadline else aim(s)
    beta = BETA[BOULWARE if s.strategy == TIT_FOR_TAT else s.strategy]
    value = time_dependent_offer(s.limit.opening, target, t, max(1, deadline - 1), beta)
    if s.strategy == TIT_FOR_TAT:
        ours = _values(s, mine=True)
        theirs = _values(s, mine=False)
        our_last = ours[-1] if ours else s.limit.opening
        if len(theirs) >= 2:
            bounds = Limit(s.term, target, s.limit.kind, s.limit.opening)
            mirrored = tit_for_tat_offer(our_last, theirs[-2], theirs[-1], bounds)
            value = max(mirrored, value) if s.limit.kind == "ceiling" else min(mirrored, value)
    # Round away from the reservation, so a rounded offer never crosses it.
    rounded = round(value, 6)
    return float(math.floor(rounded) if s.limit.kind == "ceiling" else math.ceil(rounded))


def aim(s: Situation) -> float:
    """Where we concede to before our last offer: halfway between our limit and theirs as we read it.

    Their limit is read from their first offer by the default opening
    (:data:`negotiations.limits.OPENING_FACTOR`, the same ratio either side): a Parley
    counterparty without an aspiration of its own opens exactly there, so against one the
    reading is exact and both sides aim at the even split. Against a counterparty that opens
    elsewhere it is a prior, and whatever they open with the aim stays between our aspiration
    and our limit. Before they have offered, the aim is our limit.
    """
    assert s.limit is not None
    theirs = _values(s, mine=False)
    if not theirs:
        return s.limit.value
    their_kind: Kind = "floor" if s.limit.kind == "ceiling" else "ceiling"
    their_limit = theirs[0] / OPENING_FACTOR[their_kind]
    low, high = sorted((s.limit.opening, s.limit.value))
    return min(high, max(low, (s.limit.value + their_limit) / 2))


def last_offer_move(max_moves: int) -> int:
    """The index of our last offer (0-based, at least 1): the move before our last.

    Our last move only accepts or rejects, and a counter-offer there would leave the counterparty
    a move we could not answer; so the offer the counterparty can still take is the one before.
    """
    return max(1, max_moves - 2)


def decide(s: Situation) -> Move:
    """One move for ``s``. The platform mints ``offerId`` afterwards; this never does."""
    # Our messages without a move (a holding or try-again reply) are not moves: they spend no time.
    ours = [e for e in s.record.history if e.role == s.our_role and e.move is not None]
    theirs = [e for e in s.record.history if e.role != s.our_role and e.move is not None]
    last_theirs = theirs[-1].move if theirs else None
    t = len(ours)
    if last_theirs is not None and last_theirs.action == s.vocabulary.reject:
        return Move(s.vocabulary.reject, "Understood. Thank you for your time.")
    if last_theirs is not None and last_theirs.action == s.vocabulary.accept:
        confirmed = _confirm(s, last_theirs, ours)
        if confirmed is not None:
            return _corrected(s, confirmed, t)
    mine = next_value(s)
    if mine is None:
        if s.can_ask:
            return Move("ask", limit_question(s.term, s.unit, s.unread))
        return Move(
            s.vocabulary.reject,
            f"I must decline: I have no limit on {s.term} and no principal to ask for one.",
        )
    offered = their_offer(s)
    last_move = t >= s.max_moves - 1
    # On our last move the choice is their offer or no deal, so our limit is the bar: with one or
    # two moves in all, the last comes before the curve reaches it.
    bar = s.limit.value if last_move and s.limit is not None else mine
    if offered is not None and offered.value is not None and acceptable(s, offered, bar):
        assert offered.entry.move is not None
        shown = offered.terms if offered.terms is not None else _terms(s, offered.value)
        accept = Move(
            s.vocabulary.accept,
            f"Agreed: {_describe(s, shown)}.",
            # A prose offer is restated as our terms, so the accept names what we agreed to.
            terms=shown if offered.terms is not None or s.structured else None,
            accepts_offer_id=offered.entry.move.offer_id,
        )
        return _corrected(s, accept, t)
    if last_move and offered is not None:
        return Move(s.vocabulary.reject, "We cannot agree on these terms, so I must decline.")
    if offered is not None and t < last_offer_move(s.max_moves) and _within_limit(s, offered):
        mine = _meet_halfway(s, mine, offered)
    return _corrected(s, _proposal(s, _terms(s, mine), t), t)


def _within_limit(s: Situation, offer: Offer) -> bool:
    """Whether we could take ``offer`` at our limit: a deal exists, though not yet at our next offer."""
    firm = any(g.term == s.term and g.fixed for g in s.guards)
    return not firm and s.limit is not None and acceptable(s, offer, s.limit.value)


def _meet_halfway(s: Situation, mine: float, offer: Offer) -> float:
    """Halfway between our next offer and their offer, rounded towards our side.

    Their offer is within our limit, so a deal exists: taking it would hand them what is left
    between it and our next offer, and insisting on our own offer would overshoot, so we
    counter in the middle. Only before our last offer: the moves left still let us take what
    they offer next, which concedes at least as much as this one (safe under monotone concession).
    """
    assert s.limit is not None
    assert offer.value is not None
    middle = round((mine + offer.value) / 2, 6)
    return float(math.floor(middle) if s.limit.kind == "ceiling" else math.ceil(middle))


def money(value: float, currency: str) -> str:
    """``value`` in ``currency`` for people: "€1,100", "$800", "1,250.50 CHF", "300" (no currency)."""
    number = f"{int(value):,}" if float(value).is_integer() else f"{value:,.2f}"
    symbol = _SYMBOLS.get(currency.upper())
    if symbol:
        return f"{symbol}{number}"
    return f"{number} {currency}".strip()


def is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number a double holds: an int or float, not a bool, finite and at most
    ``sys.float_info.max`` in size (RFC 8259 §6: beyond that no two readers agree, and
    ``float()`` of it overflows)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max


def _fixed_terms(s: Situation) -> dict[str, Any]:
    """Each fixed term other than ours and the currency, with the first value all its guards allow.

    With no such value, the first guard's first value: the guard check then
    reports the contradiction, and the party is asked.
    """
    fixed: dict[str, Any] = {}
    for guard in s.guards:
        if not guard.fixed or guard.term in (s.term, "currency") or guard.term in fixed:
            continue
        same = [g for g in s.guards if g.term == guard.term and g.fixed]
        allowed = [v for v in guard.allowed if all(g.allows(v) for g in same)]
        fixed[guard.term] = allowed[0] if allowed else guard.allowed[0]
    return fixed


def move_value(move: Move, term: str) -> float | None:
    """The value ``move`` names on the numeric ``term``: its terms' number there, or, for a prose
    move (no terms), the first amount its message names (:func:`negotiations.verdict.prose_amounts`);
    None when it names none (terms without a number on ``term`` name none, whatever the message says).
    """
    if move.terms is not None:
        value = move.terms.get(term)
        return float(value) if is_number(value) else None
    amounts = prose_amounts(move.message)
    return amounts[0] if amounts else None


def _values(s: Situation, *, mine: bool) -> list[float]:
    """The values named on ``s.term``, in order, by our moves (``mine``) or theirs."""
    found = []
    for entry in s.record.history:
        if entry.move is None or (entry.role == s.our_role) != mine:
            continue
        value = move_value(entry.move, s.term)
        if value is not None:
            found.append(value)
    return found


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
            return Move(s.vocabulary.accept, f"Agreed at {money(value[0], s.currency)}.")
    return None


def _proposal(s: Situation, terms: dict[str, Any], t: int) -> Move:
    """Our offer of ``terms`` (all we name, currency included); sent as terms only when ours are on."""
    action = s.vocabulary.opening if t == 0 else s.vocabulary.counter
    return Move(action, f"I can offer {_describe(s, terms)}.", terms=terms if s.structured else None)


def _terms(s: Situation, value: float) -> dict[str, Any]:
    terms: dict[str, Any] = {s.term: int(value) if value.is_integer() else value}
    if s.currency:
        terms["currency"] = s.currency
    terms.update(_fixed_terms(s))
    return terms


def _corrected(s: Situation, move: Move, t: int) -> Move:
    """``move`` with the feedback applied: each broken term set to the nearest value its guard allows.

    A move whose terms change is no longer the one it answered, so an accept
    or a confirmation becomes our own offer of the corrected terms.
    """
    if not s.feedback or move.terms is None:
        return move
    terms = dict(move.terms)
    for violation in s.feedback:
        guard = violation.guard
        if guard.term in terms:
            terms[guard.term] = guard.nearest(terms[guard.term])
            if guard.currency:
                terms["currency"] = guard.currency
    return move if terms == move.terms else _proposal(s, terms, t)


def _describe(s: Situation, terms: dict[str, Any]) -> str:
    """The terms for people: "€1,042", or "€1,042 (days: 2, location: Berlin)"."""
    value = terms.get(s.term)
    currency = str(terms.get("currency", s.currency))
    rest = ", ".join(f"{k}: {v}" for k, v in terms.items() if k not in (s.term, "currency"))
    if not is_number(value):
        return rest
    head = money(value, currency)
    return f"{head} ({rest})" if rest else head
