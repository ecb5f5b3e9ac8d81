"""Decides one move per turn for an agent, whatever model it runs on, and checks it.

Whatever decides, the same rules hold before a move may reach the wire: its
action is in the agent's vocabulary, it carries terms only when the agent's
terms are on, it breaks no term guard (docs/design.md#who-decides-a-move), and the platform — never
the model — mints the ``offerId`` of every move with terms.

**Term guards** are the party's hard limits, data on the agent and on the
intent; both apply. Each is ``{"term", "op", "value", "currency"?,
"aspiration"?}``:

* ``op`` ``<=`` / ``>=``: ``value`` is a number, or a date (YYYY-MM-DD, or a
  relative date, below) compared as a date; ``aspiration`` (a number, optional)
  is where the ``offline`` strategy opens on that term;
* ``op`` ``==``: ``value`` is one JSON scalar; ``op`` ``in``: a non-empty list
  of them. Strings compare ignoring case and surrounding space;
* ``currency`` (optional): a move naming the term must name this currency too.

A string value that names a relative date — "today", "tomorrow", "next
<weekday>" (the first one after today: on a Tuesday, "next Tuesday" is a week
away) — is resolved to YYYY-MM-DD from the clock in the agent's timezone before
anything is offered or compared. A guard only limits a term a move names.

A move that breaks a guard never leaves: the model is told why
(``offline.Situation.feedback``, or handed back to a chat model) and decides
again, and after :data:`GUARD_ATTEMPTS` failed attempts the negotiation parks
with a question to the party naming the limit (an ``ask``), or, where it cannot
ask, rejects.

**Who decides.** On ``offline``, a concession strategy (:mod:`negotiations.offline`).
On any other model, the agent's own chat model (:mod:`negotiations.model_negotiator`):
one call per decision through the same client as the loop (timeout, retries,
fallbacks), bounded by the agent's ``turn_timeout``; a reply that is not exactly
one valid move is handed back once with the reason, and a second one ends the
decision with :class:`NegotiatorError`. Either way the usage is the
:class:`Decision`'s (or the error's).
"""

from __future__ import annotations

import contextvars
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.utils import timezone

from agents import guardrails
from agents.llm import (
    CallOptions,
    ChatMessage,
    ChatModel,
    ModelCancelled,
    ModelError,
    ModelReply,
    ToolSpec,
    Usage,
    model_for,
)
from agents.models import OFFLINE, Agent, Intent, currency_validator
from agents.selectors import can_ask_party
from negotiations import limits, model_negotiator, offline
from negotiations.rules import MoveRules, TermSpec, declared_terms, iso_date, rules_for
from negotiations.wire import Move, TaskRecord, canonical_terms
from parley import telemetry

ASK = "ask"
# Actions that end a task in the seed's default vocabulary, whatever an agent's own says.
SEED_TERMINAL = frozenset({"accept", "reject", "decline", "withdraw"})
# Attempts at one move before the negotiation parks: the first decision and one corrected.
GUARD_ATTEMPTS = 2
# Seconds between two looks at whether a decision must be given up while its model is asked.
GIVE_UP_POLL_SECONDS = 0.2
GuardOp = Literal["<=", ">=", "==", "in"]
_GUARD_OPS: dict[object, GuardOp] = {op: op for op in get_args(GuardOp)}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NEXT_WEEKDAY = re.compile(r"next ([a-z]+)")


@dataclass(frozen=True)
class Decision:
    """The move decided, checked and stamped, and what deciding it cost."""

    move: Move
    usage: Usage = field(default_factory=Usage)


class NegotiatorError(Exception):
    """No acceptable move could be decided; the message says why.

    ``usage`` is what the attempt cost before it failed (a chat model's calls), to be counted.
    """

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()


class GuardError(NegotiatorError):
    """A malformed term guard: the ``index``-th (from 1) of its list, wrong at its key ``field`` ("" for
    the guard as a whole); ``problem`` is what the message says of it without naming it."""

    def __init__(self, message: str, *, index: int = 0, field: str = "", problem: str = "") -> None:
        super().__init__(message)
        self.index = index
        self.field = field
        self.problem = problem or message


@dataclass(frozen=True)
class Violation:
    """One guard a move broke. ``reason`` is for the logs and the platform: it names the limit."""

    guard: Guard
    reason: str

    def __str__(self) -> str:
        return self.reason


class GuardViolation(NegotiatorError):
    """A move broke one or more of the party's term guards; it was not sent.

    ``violations`` lists them; the message joins their reasons with "; ".
    """

    def __init__(self, violations: tuple[Violation, ...]) -> None:
        super().__init__("; ".join(v.reason for v in violations))
        self.violations = violations


@dataclass(frozen=True)
class Guard:
    """One term guard with relative dates resolved (see the module docstring for the rules).

    ``value`` is a number or string for ``<=``, ``>=`` and ``==``, a tuple of
    scalars for ``in``; ``currency`` is "" when the guard names none.
    """

    term: str
    op: GuardOp
    value: Any
    currency: str = ""
    aspiration: float | None = None

    @property
    def rule(self) -> str:
        """``amount <= 1100``, ``day in ['Saturday', 'Sunday']``."""
        value = list(self.value) if self.op == "in" else self.value
        return f"{self.term} {self.op} {value}"

    @property
    def fixed(self) -> bool:
        """An ``==`` or ``in`` guard fixes its term to the values it allows."""
        return self.op in ("==", "in")

    @property
    def allowed(self) -> tuple[Any, ...]:
        """The values a fixed guard allows, in order; empty for a bound."""
        if self.op == "in":
            return tuple(self.value)
        return (self.value,) if self.op == "==" else ()

    @property
    def on_dates(self) -> bool:
        """A ``<=``/``>=`` bound on a date rather than a number."""
        return not self.fixed and isinstance(self.value, str)

    def allows(self, value: object) -> bool:
        """Whether ``value`` keeps to this guard (the currency aside)."""
        if self.fixed:
            return any(_same(value, allowed) for allowed in self.allowed)
        if self.on_dates:
            given = iso_date(value) if isinstance(value, str) else None
            bound = iso_date(self.value)
            if given is None or bound is None:
                return False
            return given <= bound if self.op == "<=" else given >= bound
        if not offline.is_number(value):
            return False
        return value <= self.value if self.op == "<=" else value >= self.value

    def broken_by(self, action: str, terms: Mapping[str, Any]) -> Violation | None:
        """The violation when ``action`` with ``terms`` breaks this guard; None when it keeps to it.

        Terms that do not name ``term`` never break it. A bound needs a number
        (or a date); a guard with a currency needs the same currency named.
        """
        if self.term not in terms:
            return None
        value = terms[self.term]
        if not self.fixed and not self.on_dates and not offline.is_number(value):
            return Violation(self, f"{action} puts {value!r} where the guard {self.rule} needs a number")
        if self.on_dates and (not isinstance(value, str) or iso_date(value) is None):
            return Violation(self, f"{action} puts {value!r} where the guard {self.rule} needs a date")
        if self.currency:
            named = terms.get("currency")
            in_currency = f"the guard {self.rule} is in {self.currency}"
            if not isinstance(named, str):
                return Violation(self, f"{action} names no currency; {in_currency}")
            if named.upper() != self.currency.upper():
                return Violation(self, f"{action} is in {named}; {in_currency}")
        if not self.allows(value):
            return Violation(self, f"{action} with {self.term}={value} breaks the guard {self.rule}")
        return None

    def nearest(self, value: object) -> Any:
        """The value this guard allows that is nearest ``value``: itself, the bound, or the first allowed."""
        if self.allows(value):
            return value
        return self.allowed[0] if self.fixed else self.value

    def describe(self) -> str:
        """The limit in the party's words: "amount: at most €1,100", "day: Saturday or Sunday"."""
        shown = [self._shown(v) for v in self.allowed] or [self._shown(self.value)]
        if self.op == "<=":
            return f"{self.term}: at most {shown[0]}"
        if self.op == ">=":
            return f"{self.term}: at least {shown[0]}"
        listed = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
        return f"{self.term}: {listed}"

    def _shown(self, value: object) -> str:
        if offline.is_number(value):
            return offline.money(value, self.currency) if self.currency else f"{value:,}"
        return str(value)


def terminal_actions(agent: Agent) -> frozenset[str]:
    return SEED_TERMINAL | {a["name"] for a in agent.allowed_actions if a.get("terminal")}


def task_state_for(agent: Agent, action: str) -> str:
    """The A2A 0.3 task state our reply stamps: the action's terminal state, else input-required."""
    for spec in agent.allowed_actions:
        if spec["name"] == action and spec.get("terminal"):
            return str(spec.get("state") or "rejected")
    return "input-required"


def local_today(agent: Agent, now: datetime | None = None) -> date:
    """Today in the agent's timezone at ``now`` (timezone-aware; default :func:`django.utils.timezone.now`).

    Raises :class:`NegotiatorError` for a timezone name the system does not know.
    """
    moment = now if now is not None else timezone.now()
    try:
        zone = ZoneInfo(agent.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise NegotiatorError(f"the agent's timezone {agent.timezone!r} is unknown") from exc
    return moment.astimezone(zone).date()


def resolve_relative_date(text: str, today: date) -> str | None:
    """YYYY-MM-DD for "today", "tomorrow" or "next <weekday>" (any case; "next Sat" too), else None.

    "next <weekday>" is the first such day strictly after ``today``.
    """
    words = " ".join(text.lower().split())
    if words == "today":
        return today.isoformat()
    if words == "tomorrow":
        return (today + timedelta(days=1)).isoformat()
    match = _NEXT_WEEKDAY.fullmatch(words)
    day = match.group(1) if match else ""
    weekday = next((i for i, name in enumerate(_WEEKDAYS) if day in (name, name[:3])), None)
    if weekday is None:
        return None
    return (today + timedelta(days=(weekday - today.weekday() - 1) % 7 + 1)).isoformat()


def parse_guards(
    raw: object, *, today: date, where: str = "term guard", declared: tuple[TermSpec, ...] | None = None
) -> tuple[Guard, ...]:
    """The guards in ``raw`` (a list of guard dicts, see the module docstring), relative dates resolved.

    A currency is an ISO 4217 code, three capital letters (``agents.models.currency_validator``,
    the model endpoints' rule). With ``declared``, the terms the agent's description declares
    (:func:`negotiations.rules.declared_terms`; None or () when it declares none), a guard must
    limit one of them: a guard on a term no move is checked for would never hold. The
    configuration's check passes them; a negotiation does not, so a guard saved before the
    description changed still holds.

    Raises :class:`NegotiatorError` when ``raw`` is not a list, and :class:`GuardError` naming the
    first malformed guard, e.g. "term guard 2 has op '<'; use one of <=, >=, ==, in", "term guard
    1 has currency 'euros!!'; a currency is its ISO 4217 code, three capital letters: EUR, USD,
    GBP", "term guard 1 names term 'banana', which the terms description does not declare
    (amount, currency)".
    """
    if not isinstance(raw, list):
        raise NegotiatorError(f"{where}s must be a list of {{term, op, value}} objects")
    guards = []
    for index, item in enumerate(raw, start=1):
        name = f"{where} {index}"
        if not isinstance(item, Mapping):
            raise _guard_error(name, index, "", "must be an object {term, op, value}")
        term, op, value = item.get("term"), item.get("op"), item.get("value")
        if not isinstance(term, str) or not term:
            raise _guard_error(name, index, "term", "names no term")
        if declared and term not in (names := [t.name for t in declared]):
            problem = (
                f"names term {term!r}, which the terms description does not declare ({', '.join(names)})"
            )
            raise _guard_error(name, index, "term", problem)
        if not isinstance(op, str) or op not in _GUARD_OPS:  # a list or object is no op (nor hashable)
            raise _guard_error(name, index, "op", f"has op {op!r}; use one of <=, >=, ==, in")
        currency = item.get("currency") or ""
        if not isinstance(currency, str):
            raise _guard_error(name, index, "currency", "has a currency that is not a string")
        if currency and not _is_currency(currency):
            problem = (
                f"has currency {currency!r}; a currency is its ISO 4217 code, three capital letters: "
                "EUR, USD, GBP"
            )
            raise _guard_error(name, index, "currency", problem)
        if op == "in":
            if not isinstance(value, list) or not value or not all(_scalar(v) for v in value):
                raise _guard_error(name, index, "value", "needs a non-empty list of values for 'in'")
            value = tuple(_resolved(v, today) for v in value)
        elif op == "==":
            if not _scalar(value):
                raise _guard_error(name, index, "value", "needs one value for '=='")
            value = _resolved(value, today)
        else:
            value = _resolved(value, today)
            if not offline.is_number(value) and not (isinstance(value, str) and iso_date(value)):
                raise _guard_error(name, index, "value", f"needs a number or a date for {op!r}")
        aspiration = item.get("aspiration")
        if aspiration is not None and not offline.is_number(aspiration):
            raise _guard_error(name, index, "aspiration", "has an aspiration that is not a number")
        guards.append(
            Guard(term, _GUARD_OPS[op], value, currency, None if aspiration is None else float(aspiration))
        )
    return tuple(guards)


def _is_currency(code: str) -> bool:
    """Whether ``code`` is written as an ISO 4217 code, the model endpoints' rule
    (``agents.models.currency_validator``)."""
    try:
        currency_validator(code)
    except ValidationError:
        return False
    return True


def _guard_error(name: str, index: int, field: str, problem: str) -> GuardError:
    return GuardError(f"{name} {problem}", index=index, field=field, problem=problem)


def effective_guards(agent: Agent, intent: Intent | None = None, *, today: date) -> tuple[Guard, ...]:
    """The agent's guards, then the intent's, resolved on ``today``; raises as :func:`parse_guards`."""
    guards = parse_guards(agent.term_guards, today=today, where="agent term guard")
    if intent is not None:
        guards += parse_guards(intent.term_guards, today=today, where="intent term guard")
    return guards


def guard_violations(guards: tuple[Guard, ...], move: Move) -> tuple[Violation, ...]:
    """Every guard ``move``'s terms break, in guard order; () for a move without terms."""
    if move.terms is None:
        return ()
    found = (guard.broken_by(move.action, move.terms) for guard in guards)
    return tuple(v for v in found if v is not None)


def check_guards(
    agent: Agent, move: Move, *, intent: Intent | None = None, now: datetime | None = None
) -> None:
    """Raise :class:`GuardViolation` when ``move`` breaks a guard of the agent or the intent.

    Relative dates resolve at ``now`` (default: the current time) in the agent's timezone.
    """
    violations = guard_violations(effective_guards(agent, intent, today=local_today(agent, now)), move)
    if violations:
        raise GuardViolation(violations)


def numeric_term(agent: Agent, guards: tuple[Guard, ...] = ()) -> tuple[str, str, str]:
    """(term, currency, unit) the offline negotiator bargains over.

    From the terms the description declares (:func:`negotiations.rules.declared_terms`):
    "amount (number, EUR per day), currency" gives ("amount", "EUR", "EUR per day") — the
    first term typed number or integer (else the first term), the first currency a term's
    unit names, and that term's unit. Without declared terms (none, or prose), the term
    of the first bound in ``guards`` (else "amount"). A guard's currency on that term,
    or a fixed ``currency`` guard, overrides the description's: guards are the party's
    hard limits.
    """
    bounds = [g for g in guards if not g.fixed and not g.on_dates]
    declared = declared_terms(agent.terms) or ()
    if declared:
        spec = next((t for t in declared if t.type in ("number", "integer")), declared[0])
        term, unit = spec.name, spec.unit
        currency = next((t.currency for t in declared if t.currency), "")
    else:
        term, unit, currency = (bounds[0].term if bounds else "amount"), "", ""
    guarded = [g.currency for g in guards if g.term == term and g.currency]
    fixed = [g.allowed[0] for g in guards if g.term == "currency" and g.fixed]
    currency = guarded[0] if guarded else str(fixed[0]) if fixed else currency
    return term, currency, unit


def move_rules(agent: Agent) -> MoveRules:
    """What a counterparty's move must be for ``agent``: an action of its ``allowed_actions``, and
    the terms its description declares typed as declared (:mod:`negotiations.rules`). Its card
    publishes them; the gateway checks every inbound move against them."""
    return rules_for(agent.allowed_actions, agent.terms)


def decide(
    *,
    agent: Agent,
    record: TaskRecord,
    our_role: Literal["user", "agent"],
    guidance: list[str],
    max_moves: int,
    intent: Intent | None = None,
    objective: str = "",
    answers: tuple[model_negotiator.Answer, ...] = (),
    now: datetime | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Decision:
    """Decide, check and stamp our next move on the task ``record``.

    ``intent``'s guards are added to the agent's; relative dates in them
    resolve at ``now`` (default: the current time) in the agent's timezone. A
    move that breaks a guard is decided again with the violations as
    feedback; after :data:`GUARD_ATTEMPTS` failures the result is an ``ask``
    naming the limits or, for an agent with nobody to ask, the agent's reject.
    ``objective`` is the per-negotiation objective ``negotiate`` gave, shown
    to a chat model with ``guidance`` and the ``answers`` the party gave to
    questions asked here (see :class:`model_negotiator.Brief`); ``stopped`` is
    polled while a chat model decides, and stops it once True (the negotiation
    was cancelled).

    Only an agent with a principal may ``ask`` (:func:`agents.selectors.can_ask_party`):
    without one, the ``offline`` strategy declines where it would ask for a limit, and a
    chat model is not offered ``ask``, so no decision ever waits on a party nobody answers for.

    The move's message passes the agent's output guardrails before it can
    leave over A2A (redacted, or blocked).

    Raises :class:`NegotiatorError` when the agent's model or strategy cannot
    negotiate, a guard is malformed, the move is not allowed, a chat model
    fails, times out, is stopped or twice answers no valid move, or an output
    guardrail blocks it; its ``usage`` says what the attempt cost.
    """
    guards = effective_guards(agent, intent, today=local_today(agent, now))
    can_ask = can_ask_party(agent)
    if agent.model != OFFLINE:
        brief = decision_brief(
            agent=agent,
            record=record,
            our_role=our_role,
            guidance=guidance,
            max_moves=max_moves,
            intent=intent,
            objective=objective,
            answers=answers,
            now=now,
        )
        return _decide_on_model(agent, brief, guards, can_ask=can_ask, stopped=stopped)
    return Decision(_decide_offline(agent, record, our_role, guidance, guards, can_ask, max_moves))


def decision_brief(
    *,
    agent: Agent,
    record: TaskRecord,
    our_role: Literal["user", "agent"],
    guidance: list[str],
    max_moves: int,
    intent: Intent | None = None,
    objective: str = "",
    answers: tuple[model_negotiator.Answer, ...] = (),
    now: datetime | None = None,
) -> model_negotiator.Brief:
    """What a chat model is shown to decide our next move on ``record`` (arguments as :func:`decide`).

    Raises :class:`NegotiatorError` for a malformed guard or an unknown timezone.
    """
    today = local_today(agent, now)
    guards = effective_guards(agent, intent, today=today)
    ours = sum(1 for e in record.history if e.role == our_role and e.move is not None)
    return model_negotiator.Brief(
        party=agent.name,
        objective=model_negotiator.objective_parts(
            system_prompt=agent.system_prompt,
            intent=intent.statement if intent is not None else "",
            objective=objective,
            guidance=guidance,
            answers=answers,
        ),
        today=today,
        timezone=agent.timezone,
        terms=agent.terms,
        record=record,
        our_role=our_role,
        actions=model_negotiator.actions_for(agent.allowed_actions, can_ask=can_ask_party(agent)),
        limits=tuple(dict.fromkeys(g.describe() for g in guards)),
        moves_left=max(max_moves - ours, 1),
        answers=answers,
    )


def _decide_offline(
    agent: Agent,
    record: TaskRecord,
    our_role: Literal["user", "agent"],
    guidance: list[str],
    guards: tuple[Guard, ...],
    can_ask: bool,
    max_moves: int,
) -> Move:
    """The ``offline`` strategy's move, checked and stamped (see :func:`decide`)."""
    if agent.strategy not in offline.STRATEGIES:
        raise NegotiatorError(f"strategy {agent.strategy!r} is not one of {sorted(offline.STRATEGIES)}")
    term, currency, unit = numeric_term(agent, guards)
    try:
        vocabulary = offline.Vocabulary.from_actions(agent.allowed_actions)
    except ValueError as exc:
        raise NegotiatorError(str(exc)) from exc
    reading = _guidance_reading(agent, guards, guidance)
    situation = offline.Situation(
        record=record,
        our_role=our_role,
        vocabulary=vocabulary,
        term=term,
        currency=currency,
        structured=bool(agent.terms.strip()),
        limit=_limit(guards, term, reading),
        # An answer that gave no usable limit is what the next ask explains.
        unread=reading if reading is not None and reading.limit is None else None,
        max_moves=max_moves,
        can_ask=can_ask,
        unit=unit,
        strategy=agent.strategy,
        guards=guards,
    )
    feedback: tuple[Violation, ...] = ()
    for _attempt in range(GUARD_ATTEMPTS):
        move = _admissible(agent, offline.decide(replace(situation, feedback=feedback)), can_ask=can_ask)
        broken = guard_violations(guards, move)
        if not broken:
            return _guarded(agent, _stamped(move))
        feedback = (*feedback, *broken)
    return _guarded(agent, _park(agent, feedback, can_ask=can_ask))


def limit_reading(
    *, agent: Agent, guidance: list[str], intent: Intent | None = None, now: datetime | None = None
) -> limits.Reading | None:
    """What the ``offline`` negotiator reads of the party's limit from ``guidance`` (oldest first),
    as :func:`decide` would read it now (relative dates resolve at ``now``).

    None when it reads no limit from guidance: the agent is on a chat model (which reads its
    guidance itself), a term guard gives the limit, or the term is fixed. Else the
    :class:`negotiations.limits.Reading` of the line that decides (or, with no guidance at all,
    None too: the plain question is asked). Raises :class:`NegotiatorError` as :func:`decide` does
    for a malformed guard or an unknown timezone.
    """
    if agent.model != OFFLINE:
        return None
    return _guidance_reading(agent, effective_guards(agent, intent, today=local_today(agent, now)), guidance)


@dataclass(frozen=True)
class Bargain:
    """What the party bargains over and by: the numeric ``term`` with its ``currency`` ("" for none)
    (:func:`numeric_term`), and its ``limit`` on it, None when none is known."""

    term: str
    currency: str
    limit: limits.Limit | None


def bargain(
    *, agent: Agent, guidance: list[str], intent: Intent | None = None, now: datetime | None = None
) -> Bargain:
    """The numeric term and the party's limit on it as the ``offline`` negotiator bargains by them
    now: a term guard's bound, else the limit its standing ``guidance`` (oldest first) states, read
    by :func:`negotiations.limits.limit_from_guidance` — the rule :func:`decide` uses. No limit for
    a fixed term, nor where neither states one.

    For an agent on a chat model the same reading is returned (its model is shown the guards and
    the guidance themselves), so what it bargained within can be weighed alike. Raises
    :class:`NegotiatorError` as :func:`decide` does for a malformed guard or an unknown timezone.
    """
    guards = effective_guards(agent, intent, today=local_today(agent, now))
    term, currency, _unit = numeric_term(agent, guards)
    return Bargain(term, currency, _limit(guards, term, _guidance_reading(agent, guards, guidance)))


def _limit(guards: tuple[Guard, ...], term: str, reading: limits.Reading | None) -> limits.Limit | None:
    """The limit the ``offline`` strategy bargains by: the guidance's ``reading`` where it needs one
    from there (:func:`_guidance_reading`), else the guards' bound on ``term``."""
    return reading.limit if reading is not None else _guard_limit(guards, term)


def _guidance_reading(agent: Agent, guards: tuple[Guard, ...], guidance: list[str]) -> limits.Reading | None:
    """The limit the party's ``guidance`` gives the ``offline`` negotiator, where it needs one from
    there (see :func:`limit_reading`)."""
    term, currency, unit = numeric_term(agent, guards)
    firm = any(g.term == term and g.fixed for g in guards)
    if firm or _guard_limit(guards, term) is not None:
        return None
    return limits.limit_from_guidance(guidance, term=term, currency=currency, unit=unit)


def _decide_on_model(
    agent: Agent,
    brief: model_negotiator.Brief,
    guards: tuple[Guard, ...],
    *,
    can_ask: bool,
    stopped: Callable[[], bool],
) -> Decision:
    """The agent's chat model's move: one tool call, handed back once if invalid (see :func:`decide`)."""
    try:
        model = model_for(agent)
    except ModelError as exc:
        raise NegotiatorError(str(exc)) from exc
    messages = model_negotiator.prompt(brief)
    tool = model_negotiator.move_tool(brief)
    ends = time.monotonic() + agent.turn_timeout

    def timed_out() -> bool:
        return time.monotonic() > ends

    # The turn's whole decision, retries and fallbacks included, within the answer contract.
    deadline = timezone.now() + timedelta(seconds=agent.turn_timeout)
    usage, refusals, broke, warned = Usage(), 0, 0, False
    feedback: tuple[Violation, ...] = ()
    while True:
        try:
            with telemetry.model_call_span(model=agent.model) as call:
                reply = _complete_until(
                    model, messages, [tool], deadline=deadline, give_up=lambda: timed_out() or stopped()
                )
                call.record(reply.model, reply.input_tokens, reply.output_tokens)
        except ModelError as exc:
            # Past the turn's deadline the client fails or is cancelled; either way it is the timeout.
            if timed_out():
                why = f"the model did not decide within the turn timeout of {agent.turn_timeout:g} s"
            elif isinstance(exc, ModelCancelled):
                why = "the negotiation was stopped while its model decided"
            else:
                why = f"the model could not decide: {exc}"
            raise NegotiatorError(why, usage=usage) from exc
        usage = usage.plus(reply)
        try:
            move = model_negotiator.read_move(reply, brief)
        except model_negotiator.ReplyRefused as exc:
            refusals += 1
            if refusals > 1:
                raise NegotiatorError(f"the model answered no valid move twice: {exc}", usage=usage) from exc
            messages = [*messages, *model_negotiator.handed_back(reply, str(exc))]
            continue
        broken = guard_violations(guards, move)
        if not broken:
            walked = None if warned else walks_away(agent, brief, guards, move)
            if walked is None:
                return Decision(_guarded(agent, _stamped(move), usage=usage), usage)
            warned = True
            messages = [*messages, *model_negotiator.handed_back(reply, walked)]
            continue
        feedback, broke = (*feedback, *broken), broke + 1
        if broke >= GUARD_ATTEMPTS:
            parked = _park(agent, feedback, can_ask=can_ask)
            return Decision(_guarded(agent, parked, usage=usage), usage)
        reasons = "; ".join(v.reason for v in broken)
        messages = [
            *messages,
            *model_negotiator.handed_back(reply, f"it breaks the party's limits: {reasons}"),
        ]


def walks_away(
    agent: Agent, brief: model_negotiator.Brief, guards: tuple[Guard, ...], move: Move
) -> str | None:
    """Why ``move`` walks away from a deal on the table, or None when it does not.

    It does on our last move (``brief.moves_left`` is 1) when it accepts nothing (its action is
    none that accepts: with terms off an accept names no offer) while the counterparty's latest
    offer is one the party's guards allow: accepting it breaks no guard, and a guard limits the
    term bargained over (:func:`numeric_term`) and the offer names it (without one, what it
    offers is not ours to judge: a guard on the currency alone says nothing of the price), and it
    names no term beyond that one, the currency and terms a guard limits (a penalty clause no guard
    weighs is the model's to judge, as the ``offline`` strategy takes no such offer). The chat
    negotiator hands such a move back once with this reason; a model that insists has a
    reason beyond the guards (its objective), and its move stands.
    """
    accepts = [a.name for a in brief.actions if a.accepts]
    if brief.moves_left > 1 or move.accepts_offer_id or move.action in (ASK, *accepts):
        return None
    theirs = [e.move for e in brief.record.history if e.role != brief.our_role and e.move is not None]
    offer = theirs[-1] if theirs else None
    if offer is None or offer.terms is None or not offer.offer_id or offer.action in terminal_actions(agent):
        return None
    term, _currency, _unit = numeric_term(agent, guards)
    if not accepts or term not in offer.terms or not any(g.term == term for g in guards):
        return None
    if set(offer.terms) - {term, "currency", *(g.term for g in guards)}:
        return None
    taken = Move(accepts[0], "", dict(offer.terms), "", offer.offer_id)
    if guard_violations(guards, taken):
        return None
    how = f" (acceptsOfferId {offer.offer_id})" if brief.structured else ""
    return (
        f"this is your last move, and their offer {offer.offer_id} ({canonical_terms(offer.terms)}) is "
        f"within the party's hard limits: {move.action} walks away from that deal. Accept it{how} unless "
        "the objective rules it out"
    )


def _complete_until(
    model: ChatModel,
    messages: list[ChatMessage],
    tools: list[ToolSpec],
    *,
    deadline: datetime,
    give_up: Callable[[], bool],
) -> ModelReply:
    """``model``'s reply to ``messages`` by ``deadline``, or :class:`ModelCancelled` as soon as
    ``give_up()`` is True.

    The call runs in a daemon thread of its own while this thread looks at
    ``give_up`` every :data:`GIVE_UP_POLL_SECONDS`. The chat-completions client
    looks at its ``cancelled`` hook only between tries and while an answer
    streams, so a model slow to begin answering would otherwise hold the turn,
    and the worker's thread, past a stop (the deadline it does keep). A call
    given up is told so through that hook and ends on its own, by the deadline
    at the latest; whatever it answers is dropped. ``give_up`` is only called
    on this thread (it may read the database). Raises what ``model.complete`` raises.
    """
    if give_up():
        raise ModelCancelled("the decision was given up before the model was asked")
    abandoned, done = threading.Event(), threading.Event()
    outcome: list[ModelReply | Exception] = []

    def call() -> None:
        try:
            options = CallOptions(cancelled=abandoned.is_set, deadline=deadline)
            outcome.append(model.complete(messages=messages, tools=tools, options=options))
        except Exception as exc:  # handed to the caller as it is, below
            outcome.append(exc)
        finally:
            done.set()

    # The context goes along, so the call's spans and logs stay under this turn's.
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(call,), name="negotiation-model-call", daemon=True).start()
    while not done.wait(GIVE_UP_POLL_SECONDS):
        if give_up():
            abandoned.set()
            raise ModelCancelled("the decision was given up while the model was asked")
    [result] = outcome
    if isinstance(result, Exception):
        raise result
    return result


def _stamped(move: Move) -> Move:
    """``move`` with an ``offerId`` of the platform's when it carries terms (never the model's)."""
    return replace(move, offer_id=str(uuid.uuid4())) if move.terms else move


def _guarded(agent: Agent, move: Move, *, usage: Usage | None = None) -> Move:
    """``move`` with the agent's output guardrails applied to its message."""
    try:
        return replace(move, message=guardrails.check(agent.guardrails, stage="output", text=move.message))
    except guardrails.GuardrailTripped as exc:
        raise NegotiatorError(str(exc), usage=usage) from exc


def _admissible(agent: Agent, move: Move, *, can_ask: bool) -> Move:
    """``move`` if its action is the agent's (or an allowed ask); prose only when terms are off."""
    allowed = {a["name"] for a in agent.allowed_actions} | ({ASK} if can_ask else set())
    if move.action not in allowed:
        raise NegotiatorError(f"action {move.action!r} is not one of {sorted(allowed)}")
    # Terms off: the move carries prose only, so it cannot bind to an offer by id either.
    return replace(move, terms=None, accepts_offer_id="") if not agent.terms.strip() else move


def _park(agent: Agent, feedback: tuple[Violation, ...], *, can_ask: bool) -> Move:
    """The move after the last failed attempt: ask the party about the limits broken, or reject.

    An ask never reaches the wire — outbound it is intercepted before it, inbound
    the counterparty gets a holding reply — so it names each limit ("amount: at
    most €1,100"). The reject is the agent's first action that ends the task
    otherwise than completed.
    """
    guards = list(dict.fromkeys(v.guard for v in feedback))
    if not can_ask:
        reject = next(
            (a["name"] for a in agent.allowed_actions if a.get("terminal") and a.get("state") != "completed"),
            None,
        )
        if reject is None:
            raise NegotiatorError("every move breaks a limit and the agent has no action that declines")
        return Move(reject, "I cannot agree to terms within my instructions, so I must decline.")
    limits = "; ".join(g.describe() for g in guards)
    return Move(ASK, f"Every move I could make breaks one of your limits ({limits}). How should I go on?")


def _guard_limit(guards: tuple[Guard, ...], term: str) -> limits.Limit | None:
    """The reservation on ``term`` from its numeric bounds, or None.

    The first bound's op says whether it is a ceiling (``<=``) or a floor
    (``>=``); the tightest bound of that op is the value, the first aspiration
    given on one of them the opening. Bounds the other way are left to the
    guard check.
    """
    bounds = [g for g in guards if g.term == term and not g.fixed and not g.on_dates]
    if not bounds:
        return None
    op = bounds[0].op
    same = [g for g in bounds if g.op == op]
    values = [float(g.value) for g in same]
    aspiration = next((g.aspiration for g in same if g.aspiration is not None), None)
    if op == "<=":
        return limits.Limit(term, min(values), "ceiling", aspiration)
    return limits.Limit(term, max(values), "floor", aspiration)


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float)


def _resolved(value: Any, today: date) -> Any:
    """``value`` with a relative date resolved to YYYY-MM-DD; anything else unchanged."""
    if isinstance(value, str):
        return resolve_relative_date(value, today) or value
    return value


def _same(a: object, b: object) -> bool:
    """JSON equality for guards: strings ignore case and surrounding space; a bool is no number."""
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b
