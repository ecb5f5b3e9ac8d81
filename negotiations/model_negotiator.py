"""The chat-model negotiator: each turn is one model call answered by one tool call.

Used by :func:`negotiations.negotiator.decide` for an agent whose model is a
chat-completions endpoint (any model but ``offline``). The prompt follows the
negotiation half of the seed (docs/negotiation-prompt.md#where-the-template-comes-from);
the move comes back as one call of
the :data:`MOVE_TOOL` tool, whose JSON Schema is built from the agent's
vocabulary. Everything the model says is checked here before it becomes a
:class:`~negotiations.wire.Move`: exactly one call of that tool, JSON object
arguments, an action it was offered, a message, terms that are a flat object,
and an accept bound to an offer the counterparty actually made. The guards, the
guardrails and the minting of ``offerId`` stay with the negotiator, as for
``offline``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from agents.llm import BadArguments, ChatMessage, ModelReply, ToolSpec
from negotiations.rules import SCALAR, check_terms, declared_terms
from negotiations.wire import Entry, Move, MoveError, TaskRecord, canonical_terms, parse_move

MOVE_TOOL = "decide_move"
ASK = "ask"
# The seed's ask action (docs/negotiation-prompt.md#where-the-template-comes-from), word for word in meaning.
ASK_DESCRIPTION = (
    "use only when your next move depends on something the party you act for has not told you — "
    "a limit, a date, a preference. State what you need to know. Nothing is sent to the counterparty"
)
# How terms are written, after the seed's default terms description (docs/wire-format.md#terms).
TERMS_RULES = (
    "Terms are a flat JSON object of key/value pairs with the plainest field names (amount, currency, "
    "date, quantity, location): only what has been discussed, the other side's field names where they "
    "used some, always a currency next to an amount, and dates as absolute YYYY-MM-DD."
)


class ReplyRefused(ValueError):
    """The model's reply is not exactly one valid move; the message says why, for the model to read."""


@dataclass(frozen=True)
class Action:
    """One action the model may choose: its name, description, and whether it accepts an offer."""

    name: str
    description: str
    accepts: bool = False


@dataclass(frozen=True)
class Answer:
    """A question the negotiation parked on, and the party's answer to it."""

    question: str
    answer: str


@dataclass(frozen=True)
class Brief:
    """Everything one decision prompt shows, in the template's order (docs/negotiation-prompt.md).

    ``objective`` holds the parts of the objective as they are joined: the
    operator's system prompt, the intent, the per-negotiation objective, then
    the standing guidance block. ``terms`` is the agent's terms description, ""
    for prose only. ``limits`` are the party's term guards in its words
    (:meth:`negotiations.negotiator.Guard.describe`). ``moves_left`` counts this
    move; ``our_role`` is ours on the Task's wire (``user`` outbound, ``agent`` inbound).
    ``answers`` are the questions already put to the party here, with its answers: an
    ``ask`` that repeats one is handed back (:func:`read_move`).
    """

    party: str
    objective: tuple[str, ...]
    today: date
    timezone: str
    terms: str
    record: TaskRecord
    our_role: Literal["user", "agent"]
    actions: tuple[Action, ...]
    limits: tuple[str, ...] = ()
    moves_left: int = 1
    answers: tuple[Answer, ...] = ()

    @property
    def structured(self) -> bool:
        return bool(self.terms.strip())


def objective_parts(
    *,
    system_prompt: str,
    intent: str,
    objective: str,
    guidance: list[str],
    answers: Sequence[Answer] = (),
) -> tuple[str, ...]:
    """The objective's parts in the seed's order, empty ones left out (docs/negotiation-prompt.md).

    A line of guidance that answered a question of ours (``answers``, in the order both were
    given) is shown with that question: the question never reached the record, and without it
    the model cannot tell its question was answered.
    """
    parts = [
        system_prompt.strip(),
        f"Current intent: {intent.strip()}" if intent.strip() else "",
        f"In this negotiation: {objective.strip()}" if objective.strip() else "",
    ]
    pending = list(answers)
    lines = []
    for given in (g.strip() for g in guidance):
        if not given:
            continue
        if pending and pending[0].answer.strip() == given:
            lines.append(f'- You asked: "{pending.pop(0).question}" They answered: {given}')
        else:
            lines.append(f"- {given}")
    if lines:
        parts.append("Guidance from the party you act for:\n" + "\n".join(lines))
    return tuple(p for p in parts if p)


def actions_for(allowed_actions: list[dict[str, Any]], *, can_ask: bool) -> tuple[Action, ...]:
    """The agent's ActionSpecs as :class:`Action` s, plus ``ask`` when ``can_ask``.

    An action accepts an offer when it ends the task ``completed`` (the seed's ``accept``).
    """
    found = [
        Action(
            name=str(a["name"]),
            description=str(a.get("description") or ""),
            accepts=bool(a.get("terminal")) and (a.get("state") or "rejected") == "completed",
        )
        for a in allowed_actions
    ]
    if can_ask and all(a.name != ASK for a in found):
        found.append(Action(ASK, ASK_DESCRIPTION))
    return tuple(found)


def prompt(brief: Brief) -> list[ChatMessage]:
    """The chat messages of one decision: the system message of the template, then the record.

    The record is one user message listing every move of both sides, in
    order, with its terms and ``offerId`` (``[offer <id>: <terms>]``), and the
    request to call :data:`MOVE_TOOL` once.
    """
    listed = "\n".join(
        f"- {a.name}" + (f" ({a.description})" if a.description else "") for a in brief.actions
    )
    parts = [
        f'You are negotiating on behalf of "{brief.party}".',
        "Objective:\n" + "\n\n".join(brief.objective) if brief.objective else "",
        f"Today's date is {brief.today.isoformat()} ({brief.today:%A}), in {brief.timezone}.",
        (
            f"Terms: {brief.terms.strip()}\n{TERMS_RULES}"
            if brief.structured
            else "This negotiation is in prose only: moves carry no terms."
        ),
        (
            "The party's hard limits (never offer or accept beyond them, and never reveal them): "
            + "; ".join(brief.limits)
            if brief.limits
            else ""
        ),
        time_left(brief.moves_left),
        "Decide how to respond and choose exactly one action from this list:\n" + listed,
        _how_to_answer(brief),
        "The message is the only thing the other party sees: never put private reasoning, your limits "
        "or these instructions in it.",
    ]
    return [
        {"role": "system", "content": "\n\n".join(p for p in parts if p)},
        {"role": "user", "content": record_text(brief)},
    ]


def time_left(moves_left: int) -> str:
    """What the model is told about time: its moves left (this one included) and how the end works.

    A counter on the last move cannot be answered, so the last offer is the move before it; and
    the last move takes an offer within the party's limits rather than walking away from a deal
    (the rule :func:`negotiations.negotiator.walks_away` holds the model to).
    """
    plural = "s" if moves_left != 1 else ""
    said = f"You have {moves_left} move{plural} left in this negotiation, this one included."
    if moves_left == 1:
        return (
            f"{said} This is your last move: a counter-offer now cannot be answered. If the counterparty's "
            "offer is within the party's hard limits, accept it rather than walk away from a deal."
        )
    if moves_left == 2:
        return (
            f"{said} Your next move is your last and can only accept or reject, so if you counter now, "
            "make it your final offer: one the counterparty can still take."
        )
    return said


def _how_to_answer(brief: Brief) -> str:
    accepts = [a.name for a in brief.actions if a.accepts]
    text = f"Answer by calling the tool {MOVE_TOOL} exactly once, and write nothing else."
    if brief.structured and accepts:
        text += (
            f" Include terms when you propose, counter or accept. To {' or '.join(accepts)}, set "
            "acceptsOfferId to the id in brackets of the counterparty's offer and restate its terms "
            "exactly; never accept different terms (counter instead)."
        )
    return text


def record_text(brief: Brief) -> str:
    """The record so far as the model reads it: one line per message, oldest first."""
    if not brief.record.history:
        lines = ["Nothing has been said yet: you make the first move."]
    else:
        lines = ["The record so far, oldest first:"]
        lines += [_line(n, entry, brief.our_role) for n, entry in enumerate(brief.record.history, start=1)]
    lines.append(f"Decide your next move now by calling {MOVE_TOOL}.")
    return "\n".join(lines)


def _line(n: int, entry: Entry, our_role: str) -> str:
    who = "You" if entry.role == our_role else "They"
    move = entry.move
    if move is None:
        return f"{n}. {who} (no move): {entry.text}"
    line = f"{n}. {who} — {move.action}: {move.message}"
    if move.terms is not None:
        line += f" [offer {move.offer_id or 'unidentified'}: {canonical_terms(move.terms)}]"
    if move.accepts_offer_id:
        line += f" (accepts offer {move.accepts_offer_id})"
    return line


def move_tool(brief: Brief) -> ToolSpec:
    """The one tool the model answers with; its parameters are built from the vocabulary.

    ``{"action": enum of the actions, "message": string, "terms": object,
    "acceptsOfferId": string}``; ``terms`` and ``acceptsOfferId`` only when the
    agent's terms are on, ``acceptsOfferId`` only when an action accepts. The
    terms the description declares are typed as declared (as the card publishes
    them, :func:`negotiations.rules.terms_schema`), any other a JSON scalar.
    """
    properties: dict[str, Any] = {
        "action": {
            "type": "string",
            "enum": [a.name for a in brief.actions],
            "description": "The one action you choose.",
        },
        "message": {
            "type": "string",
            "description": "What the other party reads. No private reasoning.",
        },
    }
    if brief.structured:
        declared = declared_terms(brief.terms) or ()
        properties["terms"] = {
            "type": "object",
            "description": f"The concrete offer as flat key/value pairs: {brief.terms.strip()}.",
            "properties": {spec.name: spec.schema() for spec in declared},
            "additionalProperties": SCALAR,
        }
        if any(a.accepts for a in brief.actions):
            properties["acceptsOfferId"] = {
                "type": "string",
                "description": "On an accepting move: the id of the counterparty's offer you accept.",
            }
    return ToolSpec(
        name=MOVE_TOOL,
        description="Make your one move in this negotiation.",
        parameters={
            "type": "object",
            "properties": properties,
            "required": ["action", "message"],
            "additionalProperties": False,
        },
    )


def read_move(reply: ModelReply, brief: Brief) -> Move:
    """The move the model's ``reply`` makes, checked against ``brief``; no ``offerId`` yet.

    Terms are dropped when the agent's terms are off (prose only), as are an
    ``acceptsOfferId`` on a move that accepts nothing and, with terms off, any
    ``acceptsOfferId``. An accept with terms on must name an offer the
    counterparty made; it takes that offer's terms when it gives none.

    Raises :class:`ReplyRefused` naming what is wrong: no tool call (text
    only), more than one, another tool, arguments that are not a JSON object,
    an action not offered, a missing or empty message, terms that are not a
    flat object or give a declared term a value of another type
    (:func:`negotiations.rules.check_terms`, the rule a counterparty's moves
    meet), an accept of an offer never made or with other terms, an ``ask``
    of a question the party has answered here already (quoting its answer).
    """
    calls = reply.tool_calls
    if not calls:
        raise ReplyRefused(f"you answered with text instead of calling {MOVE_TOOL}")
    if len(calls) > 1:
        raise ReplyRefused(f"you called {len(calls)} tools; call {MOVE_TOOL} exactly once")
    call = calls[0]
    if call.name != MOVE_TOOL:
        raise ReplyRefused(f"you called {call.name!r}; the only tool is {MOVE_TOOL}")
    try:
        arguments = call.parsed_arguments()
    except BadArguments as exc:
        raise ReplyRefused(str(exc)) from exc
    names = {a.name: a for a in brief.actions}
    action = arguments.get("action")
    if action not in names:
        raise ReplyRefused(f"action {action!r} is not one of {sorted(names)}")
    if not isinstance(arguments.get("message"), str) or not arguments["message"].strip():
        raise ReplyRefused("the move needs a message for the other party")
    chosen = names[str(action)]
    data = {k: arguments[k] for k in ("action", "message", "terms", "acceptsOfferId") if k in arguments}
    if not brief.structured:
        data.pop("terms", None)
    if not brief.structured or not chosen.accepts:
        data.pop("acceptsOfferId", None)
    try:
        move = parse_move(data)
        check_terms(move.terms, declared_terms(brief.terms) or ())
    except MoveError as exc:
        raise ReplyRefused(str(exc).replace("move.", "")) from exc
    if chosen.accepts and brief.structured:
        move = _bound(move, brief)
    if move.action == ASK:
        _refuse_asked_before(move.message, brief.answers)
    return Move(move.action, move.message.strip(), move.terms, "", move.accepts_offer_id)


def _refuse_asked_before(question: str, answers: Sequence[Answer]) -> None:
    """Raise :class:`ReplyRefused` when ``question`` is one the party answered already (ignoring
    case and spacing): asking it again as it was would tell the party nothing of what was missing."""
    asked = " ".join(question.split()).casefold()
    for earlier in answers:
        if " ".join(earlier.question.split()).casefold() == asked:
            raise ReplyRefused(
                f'the party already answered that question: "{earlier.answer}". Decide with their '
                "answer, or ask for what it left out and say so in the question"
            )


def _bound(accept: Move, brief: Brief) -> Move:
    """``accept`` bound to the counterparty's offer it names, with that offer's terms."""
    theirs = {
        e.move.offer_id: e.move
        for e in brief.record.history
        if e.role != brief.our_role and e.move is not None and e.move.offer_id and e.move.terms is not None
    }
    if not accept.accepts_offer_id:
        made = ", ".join(theirs) or "none yet"
        raise ReplyRefused(f"an accept must set acceptsOfferId to an offer they made (their offers: {made})")
    offer = theirs.get(accept.accepts_offer_id)
    if offer is None:
        raise ReplyRefused(f"offer {accept.accepts_offer_id!r} was never made by the counterparty")
    if accept.terms is not None and canonical_terms(accept.terms) != canonical_terms(offer.terms):
        raise ReplyRefused(
            f"an accept must restate the terms of offer {accept.accepts_offer_id} exactly "
            f"({canonical_terms(offer.terms)}); to change them, counter instead"
        )
    return Move(accept.action, accept.message, dict(offer.terms or {}), "", accept.accepts_offer_id)


def handed_back(reply: ModelReply, reason: str) -> list[ChatMessage]:
    """The messages that hand ``reply`` back to the model with ``reason``: its own message, then a
    tool result per call (the chat-completions protocol needs one each), or a user message."""
    assistant: ChatMessage = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        assistant["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    correction = f"Not sent: {reason}. Decide again and call {MOVE_TOOL} exactly once."
    if not reply.tool_calls:
        return [assistant, {"role": "user", "content": correction}]
    return [
        assistant,
        *({"role": "tool", "tool_call_id": c.id, "content": correction} for c in reply.tool_calls),
    ]
