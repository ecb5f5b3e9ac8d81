"""Checks of the agent and intent fields the negotiator reads, run by ``Agent.clean`` and
``Intent.clean`` (see :func:`agents.models.register_agent_check`), so the admin, the operator's
editor and the host API refuse what a negotiation would later fail on, with the field named."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.models import Agent, Intent, entry_error
from negotiations.negotiator import GuardError, NegotiatorError, parse_guards
from negotiations.offline import Vocabulary


def check_timezone(agent: Agent) -> None:
    """Raises ``ValidationError`` on ``timezone`` unless it names an IANA time zone the system knows."""
    try:
        ZoneInfo(agent.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationError(
            {"timezone": f"{agent.timezone!r} is not a known time zone (e.g. Europe/Berlin)."}
        ) from exc


def check_term_guards(agent: Agent) -> None:
    """Raises ``ValidationError`` on ``term_guards`` naming the first malformed guard (as the negotiator
    would, see :func:`negotiations.negotiator.parse_guards`), as an :func:`agents.models.entry_error`."""
    _check_guards(agent.term_guards, where="term guard")


def check_intent_term_guards(intent: Intent) -> None:
    """Raises ``ValidationError`` on ``term_guards`` naming the intent's first malformed guard, as
    :func:`check_term_guards` does for the agent's (registered with ``register_intent_check``)."""
    _check_guards(intent.term_guards, where="intent term guard")


def _check_guards(guards: object, *, where: str) -> None:
    try:
        parse_guards(guards, today=timezone.now().date(), where=where)
    except GuardError as exc:
        error = entry_error(str(exc), index=exc.index - 1, field=exc.field, problem=exc.problem)
        raise ValidationError({"term_guards": error}) from exc
    except NegotiatorError as exc:
        raise ValidationError({"term_guards": str(exc)}) from exc


def check_allowed_actions(agent: Agent) -> None:
    """Raises ``ValidationError`` on ``allowed_actions`` unless it is a list of ``{name, description,
    terminal, state}`` objects with unique names that the negotiator can play (an open action, one that
    ends completed, one that ends otherwise)."""
    actions = agent.allowed_actions
    if not isinstance(actions, list) or not all(
        isinstance(a, dict) and isinstance(a.get("name"), str) and a["name"] for a in actions
    ):
        raise ValidationError({"allowed_actions": "Give a list of actions, each an object with a name."})
    names = [a["name"] for a in actions]
    if len(set(names)) != len(names):
        raise ValidationError({"allowed_actions": "Each action needs a name of its own."})
    try:
        Vocabulary.from_actions(actions)
    except ValueError as exc:
        raise ValidationError({"allowed_actions": f"Unusable actions: {exc}."}) from exc
