"""Checks of the agent and intent fields the negotiator reads, run by the configuration's
:func:`agents.configuration.full_clean` (see :func:`agents.configuration.register_agent_check`), so
the admin, the operator's editor and the host API refuse what a negotiation would later fail on,
with the field named."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.models import Agent, Intent, entry_error
from negotiations.negotiator import GuardError, NegotiatorError, parse_guards
from negotiations.offline import Vocabulary
from negotiations.rules import TermSpec, declared_terms, description_problem


def check_timezone(agent: Agent) -> None:
    """Raises ``ValidationError`` on ``timezone`` unless it names an IANA time zone the system knows."""
    try:
        ZoneInfo(agent.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationError(
            {"timezone": f"{agent.timezone!r} is not a known time zone (e.g. Europe/Berlin)."}
        ) from exc


def check_terms_description(agent: Agent) -> None:
    """Raises ``ValidationError`` on ``terms`` when the description uses the description format
    but says something the reading would silently drop or misread: a term declared twice, a word
    where the type goes that is no type, a part that breaks the format
    (:func:`negotiations.rules.description_problem`). Prose stays allowed."""
    if problem := description_problem(agent.terms):
        raise ValidationError({"terms": problem})


def check_term_guards(agent: Agent) -> None:
    """Raises ``ValidationError`` on ``term_guards`` naming the first malformed guard (as the negotiator
    would, see :func:`negotiations.negotiator.parse_guards`), as an :func:`agents.models.entry_error`;
    a guard must limit a term the agent's description declares, when it declares any."""
    _check_guards(agent.term_guards, where="term guard", declared=declared_terms(agent.terms))


def check_intent_term_guards(intent: Intent) -> None:
    """Raises ``ValidationError`` on ``term_guards`` naming the intent's first malformed guard, as
    :func:`check_term_guards` does for the agent's (registered with ``register_intent_check``)."""
    declared = declared_terms(intent.agent.terms) if intent.agent_id is not None else None
    _check_guards(intent.term_guards, where="intent term guard", declared=declared)


def _check_guards(guards: object, *, where: str, declared: tuple[TermSpec, ...] | None) -> None:
    try:
        parse_guards(guards, today=timezone.now().date(), where=where, declared=declared)
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
