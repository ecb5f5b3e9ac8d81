"""Writes of the negotiation engine: open batches, take turns, answer inbound moves, settle, report.

Outbound, one Celery task per negotiation "pumps" turns until an event
(settled, waiting on the party, out of turns, failed) and reports it to its
batch; the last report of a batch hands the digest to the waiting run. Inbound,
the A2A gateway calls :func:`inbound_turn` once per counterparty move.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from agents import tools
from agents.models import Agent, Run
from agents.services import tool_call_complete
from negotiations import client, digest, negotiator
from negotiations.models import Batch, Negotiation, Settlement, Turn
from negotiations.verdict import settle
from negotiations.wire import Entry, Move, MoveError, Role, TaskRecord, parse_move, task_record_from_json
from parley.live import publish_on_commit

logger = logging.getLogger(__name__)

NAME_LIMIT: int = Negotiation._meta.get_field("counterparty_name").max_length or 200


class NegotiationClosed(Exception):
    """A move arrived for a negotiation that is settled; a new one must be opened."""


@dataclass(frozen=True)
class InboundReply:
    """Our answer to one inbound move: the A2A 1.0 JSON Message and the state it stamps."""

    message: dict[str, Any]
    state: str
    settlement: Settlement | None


# Opening and answering, from the agent loop's tools.


def batch_open(*, run: Run, tool_call_id: str, targets: list[dict[str, str]]) -> tools.Outcome:
    """Open a negotiation per target ``{url, objective}`` and pump them all at once.

    A target that already has a binding negotiation under the run's intent is
    skipped with the reason. Returns the digest at once when nothing was opened,
    else :class:`agents.tools.Defer`.
    """
    batch = Batch.objects.create(tenant_id=run.tenant_id, run=run, tool_call_id=tool_call_id)
    agent = run.agent
    for target in targets:
        url = client.canonical_url(target["url"])
        binding = _binding(agent, run.intent_id)
        same_url = binding.filter(counterparty_url=url).first()
        inbound = binding.filter(direction=Negotiation.Direction.INBOUND).first()
        existing = same_url or inbound
        if existing is not None:
            why = (
                "with this counterparty is still binding"
                if same_url
                else "that another agent opened with you under this intent is still binding"
            )
            batch.events.append(
                {
                    "kind": "skipped",
                    "id": str(existing.pk),
                    "url": url,
                    "reason": f"negotiation {existing.pk} {why} ({existing.status}); answer it instead "
                    "of opening another",
                }
            )
            continue
        negotiation = Negotiation.objects.create(
            tenant_id=run.tenant_id,
            agent=agent,
            intent_id=run.intent_id,
            direction=Negotiation.Direction.OUTBOUND,
            counterparty_url=url,
            objective=target.get("objective", ""),
            max_turns=agent.max_turns,
            batch=batch,
        )
        _enqueue_pump(negotiation)
    batch.save(update_fields=["events", "updated_at"])
    return _deferred_or_digest(batch)


def batch_answer(*, run: Run, tool_call_id: str, ids: list[str], guidance: str) -> tools.Outcome:
    """Add ``guidance`` to each negotiation in ``ids`` as standing guidance and move them on.

    Outbound negotiations continue at once; inbound ones keep the guidance for
    the counterparty's next message (event ``recorded``). Unknown or ended ids
    are skipped with the reason.
    """
    batch = Batch.objects.create(tenant_id=run.tenant_id, run=run, tool_call_id=tool_call_id)
    for raw_id in dict.fromkeys(ids):
        negotiation = _by_public_id(run.agent, raw_id)
        if negotiation is None:
            batch.events.append(
                {"kind": "skipped", "id": raw_id, "reason": "no such negotiation of this agent"}
            )
            continue
        negotiation = Negotiation.objects.for_tenant(run.tenant_id).select_for_update().get(pk=negotiation.pk)
        if negotiation.status in (Negotiation.Status.SETTLED, Negotiation.Status.FAILED):
            batch.events.append(
                {
                    **_who(negotiation),
                    "kind": "skipped",
                    "reason": f"already ended ({negotiation.task_state or negotiation.status}) — open a new "
                    "negotiation if the terms need to change.",
                }
            )
            continue
        outbound = negotiation.direction == Negotiation.Direction.OUTBOUND
        if outbound and negotiation.status == Negotiation.Status.OPEN:
            # Its pump is still taking turns; a second pump would send moves twice.
            batch.events.append(
                {
                    **_who(negotiation),
                    "kind": "skipped",
                    "reason": "still in progress — its result comes with the call that started it",
                }
            )
            continue
        negotiation.guidance = [*negotiation.guidance, guidance]
        negotiation.parked_question = ""
        if not outbound:
            negotiation.status = Negotiation.Status.OPEN
            negotiation.save(update_fields=["guidance", "parked_question", "status", "updated_at"])
            batch.events.append(
                {
                    **_who(negotiation),
                    "kind": "recorded",
                    "reason": "guidance kept for their next message",
                }
            )
            continue
        negotiation.status, negotiation.batch, negotiation.event = (
            Negotiation.Status.OPEN,
            batch,
            None,
        )
        negotiation.save(
            update_fields=["guidance", "parked_question", "status", "batch", "event", "updated_at"]
        )
        _enqueue_pump(negotiation)
    batch.save(update_fields=["events", "updated_at"])
    return _deferred_or_digest(batch)


def _deferred_or_digest(batch: Batch) -> tools.Outcome:
    if batch.negotiations.exists():
        return tools.Defer()
    batch.reported_at = timezone.now()
    batch.save(update_fields=["reported_at", "updated_at"])
    return tools.Result(digest.render(batch.events))


# Outbound turns.


def negotiation_pump(*, negotiation_id: Any, tenant_id: int) -> None:
    """Take outbound turns until an event, then report it to the negotiation's batch.

    Quietly does nothing for a negotiation that is gone, not outbound, or not open.
    """
    negotiation = (
        Negotiation.objects.for_tenant(tenant_id).select_related("agent").filter(pk=negotiation_id).first()
    )
    if negotiation is None or negotiation.direction != Negotiation.Direction.OUTBOUND:
        return
    while negotiation.status == Negotiation.Status.OPEN:
        try:
            event = _outbound_turn(negotiation)
        except Exception:
            # Whatever broke, the batch must hear of it, or the run waits forever.
            logger.exception("negotiation %s failed taking a turn", negotiation.pk)
            event = _fail(negotiation, "an internal error stopped this negotiation")
        if event is not None:
            _report(negotiation, event)
            return
        negotiation.refresh_from_db()


def _outbound_turn(negotiation: Negotiation) -> dict[str, Any] | None:
    """One turn: decide, send, record. Returns the event it reached, or None to go on."""
    agent = negotiation.agent
    record = turns_record(negotiation)
    if negotiation.turn_count >= negotiation.max_turns:
        negotiation.status = Negotiation.Status.OUT_OF_TURNS
        negotiation.save(update_fields=["status", "updated_at"])
        return {
            **_who(negotiation),
            "kind": "budget",
            "turns": negotiation.turn_count,
            "last": _their_last(negotiation),
        }
    try:
        move = negotiator.decide(
            agent=agent,
            record=record,
            our_role="user",
            guidance=negotiation.guidance,
            can_ask=True,
            max_moves=negotiation.max_turns,
        )
    except negotiator.NegotiatorError as exc:
        return _fail(negotiation, str(exc))
    if move.action == negotiator.ASK:
        negotiation.status, negotiation.parked_question = Negotiation.Status.WAITING, move.message
        negotiation.save(update_fields=["status", "parked_question", "updated_at"])
        return {
            **_who(negotiation),
            "kind": "asking",
            "question": move.message,
            "last": _their_last(negotiation),
        }
    try:
        exchange = client.send_move(
            url=negotiation.counterparty_url,
            move=move,
            task_id=negotiation.task_id,
            context_id=negotiation.context_id,
            timeout=min(agent.turn_timeout, settings.A2A_SEND_TIMEOUT),
        )
    except client.CounterpartyError as exc:
        return _fail(negotiation, str(exc))
    try:
        settlement = _record_exchange(negotiation, move, exchange)
    except client.CounterpartyError as exc:
        return _fail(negotiation, str(exc))
    negotiation.refresh_from_db()
    if settlement is not None:
        return {
            **_who(negotiation),
            "kind": "settled",
            "state": negotiation.task_state,
            "settlement": _settlement_view(settlement),
        }
    return None


def _record_exchange(negotiation: Negotiation, move: Move, exchange: client.Exchange) -> Settlement | None:
    """Record our move and their reply, the Task's ids and state, and the settlement if it ended.

    The returned Task must carry our record unchanged — every earlier message
    by id, then the message we just sent — followed by their reply; anything
    else is refused with :class:`client.CounterpartyError` and nothing is
    written. The verdict is computed over our own record, never theirs.
    """
    task = exchange.task
    returned = task_record_from_json(task)
    history = task["history"]
    with transaction.atomic():
        negotiation = (
            Negotiation.objects.for_tenant(negotiation.tenant_id).select_for_update().get(pk=negotiation.pk)
        )
        known = [t.raw.get("messageId") for t in negotiation.turns.order_by("seq")]
        expected = [*known, exchange.sent["messageId"]]
        if [m.get("messageId") for m in history[: len(expected)]] != expected:
            raise client.CounterpartyError("its Task does not carry our record of this negotiation")
        replies = list(zip(history, returned.history, strict=True))[len(expected) :]
        if not replies or any(entry.role != "agent" for _, entry in replies):
            raise client.CounterpartyError("its Task carries no reply of its own to our move")
        _add_turn(
            negotiation,
            len(expected),
            Entry(role="user", move=move),
            exchange.sent,
            our_role="user",
            state=returned.state,
        )
        for seq, (raw, entry) in enumerate(replies, start=len(expected) + 1):
            _add_turn(negotiation, seq, entry, raw, our_role="user", state=returned.state)
        negotiation.task_id = task.get("id", negotiation.task_id)
        negotiation.context_id = task.get("contextId", negotiation.context_id)
        negotiation.counterparty_name = exchange.counterparty_name[:NAME_LIMIT]
        negotiation.task_state = returned.state
        negotiation.turn_count = negotiation.turns.filter(side=Turn.Side.OURS).count()
        settlement = _settle(negotiation, turns_record(negotiation), our_role="user")
        negotiation.save()
    return settlement


# Inbound turns.


def inbound_check(*, agent: Agent, task_id: str, incoming: dict[str, Any]) -> Move:
    """The move ``incoming`` (an A2A 1.0 JSON Message) carries, if ``agent`` can take it on ``task_id``.

    Reads only: the gateway calls it before the SDK sets up the task, so a
    refused message writes nothing. Raises :class:`MoveError` (no valid move in
    the first data part) or :class:`NegotiationClosed` (the negotiation is settled).
    """
    data = [p["data"] for p in incoming.get("parts", []) if "data" in p]
    if not data:
        raise MoveError("the message has no data part carrying a move {action, message, …}")
    move = parse_move(data[0])
    settled = (
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, direction=Negotiation.Direction.INBOUND, task_id=task_id)
        .filter(status=Negotiation.Status.SETTLED)
    )
    if task_id and settled.exists():
        raise NegotiationClosed(f"negotiation on task {task_id} is settled; open a new one")
    return move


def inbound_turn(
    *, agent: Agent, task_id: str, context_id: str, prior: TaskRecord, incoming: dict[str, Any]
) -> InboundReply:
    """Answer one inbound move ``incoming`` (an A2A 1.0 JSON Message) on the Task ``prior``.

    Raises :class:`negotiations.wire.MoveError` for a message without a valid
    move, :class:`NegotiationClosed` for a settled negotiation, and
    :class:`negotiations.negotiator.NegotiatorError` when no move can be made.
    Nothing is written unless the reply is decided.
    """
    their_move = inbound_check(agent=agent, task_id=task_id, incoming=incoming)
    negotiation = (
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, direction=Negotiation.Direction.INBOUND, task_id=task_id)
        .first()
    )
    record = TaskRecord(state="working", history=(*prior.history, Entry(role="user", move=their_move)))
    move = negotiator.decide(
        agent=agent,
        record=record,
        our_role="agent",
        guidance=negotiation.guidance if negotiation else [],
        can_ask=True,
        max_moves=agent.max_turns,
    )
    state = (
        "input-required" if move.action == negotiator.ASK else negotiator.task_state_for(agent, move.action)
    )
    reply = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_AGENT",
        "taskId": task_id,
        "contextId": context_id,
        "parts": [{"data": move.to_data()}],
    }
    final = TaskRecord(state=state, history=(*record.history, Entry(role="agent", move=move)))
    with transaction.atomic():
        negotiation, _ = (
            Negotiation.objects.for_tenant(agent.tenant_id)
            .select_for_update()
            .get_or_create(
                agent=agent,
                direction=Negotiation.Direction.INBOUND,
                task_id=task_id,
                defaults={
                    "tenant_id": agent.tenant_id,
                    "context_id": context_id,
                    "max_turns": agent.max_turns,
                    "intent": agent.intents.order_by("-created_at").first(),
                },
            )
        )
        known = negotiation.turns.count()
        _add_turn(negotiation, known + 1, record.history[-1], incoming, our_role="agent", state=state)
        _add_turn(negotiation, known + 2, final.history[-1], reply, our_role="agent", state=state)
        negotiation.task_state = state
        negotiation.turn_count = sum(1 for e in final.history if e.role == "agent")
        if move.action == negotiator.ASK:
            negotiation.status, negotiation.parked_question = (
                Negotiation.Status.WAITING,
                move.message,
            )
        elif negotiation.status == Negotiation.Status.WAITING:
            negotiation.status, negotiation.parked_question = Negotiation.Status.OPEN, ""
        settlement = _settle(negotiation, final, our_role="agent")
        negotiation.save()
    return InboundReply(message=reply, state=state, settlement=settlement)


# Shared pieces.


def turns_record(negotiation: Negotiation) -> TaskRecord:
    """The negotiation's Task as recorded in its turns (roles as on the wire)."""
    ours: Role = "user" if negotiation.direction == Negotiation.Direction.OUTBOUND else "agent"
    theirs: Role = "agent" if ours == "user" else "user"
    history = tuple(
        Entry(role=ours if t.side == Turn.Side.OURS else theirs, move=_move_of(t), text=t.message)
        for t in negotiation.turns.order_by("seq")
    )
    return TaskRecord(state=negotiation.task_state or "submitted", history=history)


def _move_of(turn: Turn) -> Move | None:
    if not turn.action:
        return None
    return Move(turn.action, turn.message, turn.terms, turn.offer_id, turn.accepts_offer_id)


def _add_turn(
    negotiation: Negotiation,
    seq: int,
    entry: Entry,
    raw: dict[str, Any],
    *,
    our_role: Literal["user", "agent"],
    state: str,
) -> Turn:
    move = entry.move
    turn = Turn.objects.create(
        tenant_id=negotiation.tenant_id,
        negotiation=negotiation,
        seq=seq,
        side=Turn.Side.OURS if entry.role == our_role else Turn.Side.THEIRS,
        action=move.action if move else "",
        message=move.message if move else entry.text,
        terms=move.terms if move else None,
        offer_id=move.offer_id if move else "",
        accepts_offer_id=move.accepts_offer_id if move else "",
        raw=raw,
        task_state=state,
    )
    publish_on_commit(
        event="negotiation.turn",
        tenant_id=negotiation.tenant_id,
        payload={
            "negotiation": str(negotiation.pk),
            "seq": seq,
            "side": turn.side,
            "action": turn.action,
        },
    )
    return turn


def _settle(
    negotiation: Negotiation, record: TaskRecord, *, our_role: Literal["user", "agent"]
) -> Settlement | None:
    """Create the settlement when the verdict function says the exchange ended; the caller saves."""
    verdict = settle(
        record, our_role=our_role, terminal_actions=negotiator.terminal_actions(negotiation.agent)
    )
    if verdict is None or hasattr(negotiation, "settlement"):
        return getattr(negotiation, "settlement", None)
    settlement = Settlement.objects.create(
        tenant_id=negotiation.tenant_id,
        negotiation=negotiation,
        outcome=verdict.outcome,
        basis=verdict.basis,
        terms=verdict.terms,
        reason=verdict.reason,
        ended_by=verdict.ended_by,
        disputed=verdict.disputed,
    )
    negotiation.status, negotiation.parked_question = Negotiation.Status.SETTLED, ""
    publish_on_commit(
        event="negotiation.settled",
        tenant_id=negotiation.tenant_id,
        payload={"negotiation": str(negotiation.pk), "outcome": settlement.outcome},
    )
    return settlement


def _report(negotiation: Negotiation, event: dict[str, Any]) -> None:
    """Store ``event`` on the negotiation; the batch's last report completes its tool call."""
    if negotiation.batch_id is None:
        return
    with transaction.atomic():
        batch = (
            Batch.objects.for_tenant(negotiation.tenant_id)
            .select_for_update()
            .select_related("run")
            .get(pk=negotiation.batch_id)
        )
        Negotiation.objects.for_tenant(negotiation.tenant_id).filter(pk=negotiation.pk).update(event=event)
        if batch.reported_at is not None or batch.negotiations.filter(event__isnull=True).exists():
            return
        events = [*batch.events, *(n.event for n in batch.negotiations.order_by("created_at"))]
        batch.reported_at = timezone.now()
        batch.save(update_fields=["reported_at", "updated_at"])
        tool_call_complete(run=batch.run, tool_call_id=batch.tool_call_id, result=digest.render(events))


def _fail(negotiation: Negotiation, error: str) -> dict[str, Any]:
    negotiation.status, negotiation.error = Negotiation.Status.FAILED, error
    negotiation.save(update_fields=["status", "error", "updated_at"])
    return {**_who(negotiation), "kind": "failed", "error": error}


def _binding(agent: Agent, intent_id: Any) -> QuerySet[Negotiation]:
    """Negotiations that hold the counterparty: going, waiting, or closed as a deal (seed §4)."""
    return (
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, intent_id=intent_id)
        .exclude(status=Negotiation.Status.FAILED)
        .exclude(settlement__outcome__in=[Settlement.Outcome.DECLINED, Settlement.Outcome.CONFLICT])
    )


def _by_public_id(agent: Agent, raw_id: str) -> Negotiation | None:
    try:
        pk = uuid.UUID(raw_id)
    except ValueError:
        return None
    return Negotiation.objects.for_tenant(agent.tenant_id).filter(agent=agent, pk=pk).first()


def _who(negotiation: Negotiation) -> dict[str, Any]:
    return {
        "id": str(negotiation.pk),
        "peer": negotiation.counterparty_name,
        "url": negotiation.counterparty_url,
    }


def _their_last(negotiation: Negotiation) -> dict[str, Any] | None:
    turn = negotiation.turns.filter(side=Turn.Side.THEIRS).order_by("-seq").first()
    return {"message": turn.message, "terms": turn.terms} if turn else None


def _settlement_view(settlement: Settlement) -> dict[str, Any]:
    return {
        "outcome": settlement.outcome,
        "basis": settlement.basis,
        "terms": settlement.terms,
        "reason": settlement.reason,
    }


def _enqueue_pump(negotiation: Negotiation) -> None:
    from negotiations.tasks import pump

    negotiation_id, tenant_id = str(negotiation.pk), negotiation.tenant_id
    transaction.on_commit(lambda: pump.delay(negotiation_id, tenant_id))
