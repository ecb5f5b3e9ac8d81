"""Decides one move per turn for an agent, whatever model it runs on, and checks it.

Whatever decides, the same rules hold before a move may reach the wire: its
action is in the agent's vocabulary, it carries terms only when the agent's
terms are on, it breaks no term guard (DESIGN.md §5), and the platform — never
the model — mints the ``offerId`` of every move with terms.
"""

from __future__ import annotations

import operator
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from agents.models import Agent
from negotiations import offline
from negotiations.wire import Move, TaskRecord

ASK = "ask"
# Actions that end a task in the seed's default vocabulary, whatever an agent's own says.
SEED_TERMINAL = frozenset({"accept", "reject", "decline", "withdraw"})
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
}
_TYPE_WORDS = frozenset({"number", "integer", "string", "text", "boolean", "date"})
_CURRENCY = re.compile(r"\b(EUR|USD|GBP|CHF|JPY|CAD|AUD)\b")


class NegotiatorError(Exception):
    """No acceptable move could be decided; the message says why."""


class GuardViolation(NegotiatorError):
    """A move broke one of the party's term guards; it was not sent."""


def terminal_actions(agent: Agent) -> frozenset[str]:
    return SEED_TERMINAL | {a["name"] for a in agent.allowed_actions if a.get("terminal")}


def task_state_for(agent: Agent, action: str) -> str:
    """The A2A 0.3 task state our reply stamps: the action's terminal state, else input-required."""
    for spec in agent.allowed_actions:
        if spec["name"] == action and spec.get("terminal"):
            return str(spec.get("state") or "rejected")
    return "input-required"


def numeric_term(agent: Agent) -> tuple[str, str, str]:
    """(term, currency, unit) the offline negotiator bargains over.

    From the terms description — "amount (number, EUR per day), currency" gives
    ("amount", "EUR", "EUR per day"): the first field, a currency code in it and
    its description less the type word — else from the first term guard.
    """
    guard = agent.term_guards[0] if agent.term_guards else {}
    description = agent.terms.strip()
    if not description:
        return str(guard.get("term", "amount")), str(guard.get("currency", "")), ""
    term = re.split(r"[\s(,]", description, maxsplit=1)[0]
    found = _CURRENCY.search(description)
    currency = found.group() if found else str(guard.get("currency", ""))
    detail = re.match(rf"{re.escape(term)}\s*\(([^)]*)\)", description)
    words = [w.strip() for w in detail.group(1).split(",")] if detail else []
    unit = ", ".join(w for w in words if w and w not in _TYPE_WORDS)
    return term, currency, unit


def check_guards(agent: Agent, move: Move) -> None:
    """Raise :class:`GuardViolation` when ``move`` offers terms beyond a guard of the agent."""
    terms = move.terms or {}
    for guard in agent.term_guards:
        if guard["term"] not in terms:
            continue
        value = terms[guard["term"]]
        rule = f"{guard['term']} {guard['op']} {guard['value']}"
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if guard["op"] != "==" and not numeric:
            raise GuardViolation(f"{move.action} puts {value!r} where the guard {rule} needs a number")
        if guard.get("currency") and terms.get("currency", guard["currency"]) != guard["currency"]:
            raise GuardViolation(
                f"{move.action} is in {terms['currency']}; the guard {rule} is in {guard['currency']}"
            )
        if not _OPS[guard["op"]](value, guard["value"]):
            raise GuardViolation(f"{move.action} with {guard['term']}={value} breaks the guard {rule}")


def decide(
    *,
    agent: Agent,
    record: TaskRecord,
    our_role: Literal["user", "agent"],
    guidance: list[str],
    can_ask: bool,
    max_moves: int,
) -> Move:
    """Decide, check and stamp our next move on the task ``record``.

    Raises :class:`NegotiatorError` when the agent's model cannot negotiate or
    the move is not allowed, and :class:`GuardViolation` when it breaks a guard.
    """
    if agent.model != "offline":
        raise NegotiatorError(f"model {agent.model!r} cannot negotiate in this deployment; use 'offline'")
    term, currency, unit = numeric_term(agent)
    try:
        vocabulary = offline.Vocabulary.from_actions(agent.allowed_actions)
    except ValueError as exc:
        raise NegotiatorError(str(exc)) from exc
    situation = offline.Situation(
        record=record,
        our_role=our_role,
        vocabulary=vocabulary,
        term=term,
        currency=currency,
        structured=bool(agent.terms.strip()),
        limit=_guard_limit(agent, term),
        max_moves=max_moves,
        can_ask=can_ask,
        unit=unit,
    )
    if situation.limit is None:
        offered = offline.their_offer(situation)
        limit = offline.limit_from_guidance(guidance, term, offered[1] if offered else None)
        situation = replace(situation, limit=limit)
    move = offline.decide(situation)
    return stamp(agent, move, can_ask=can_ask)


def stamp(agent: Agent, move: Move, *, can_ask: bool) -> Move:
    """Check ``move`` against the agent's rules and mint its ``offerId``."""
    allowed = {a["name"] for a in agent.allowed_actions} | ({ASK} if can_ask else set())
    if move.action not in allowed:
        raise NegotiatorError(f"action {move.action!r} is not one of {sorted(allowed)}")
    if not agent.terms.strip():
        move = replace(move, terms=None)
    check_guards(agent, move)
    return replace(move, offer_id=str(uuid.uuid4())) if move.terms else move


def _guard_limit(agent: Agent, term: str) -> offline.Limit | None:
    for guard in agent.term_guards:
        if guard["term"] == term and guard["op"] in ("<=", ">="):
            kind: Literal["ceiling", "floor"] = "ceiling" if guard["op"] == "<=" else "floor"
            return offline.Limit(term=term, value=float(guard["value"]), kind=kind)
    return None
