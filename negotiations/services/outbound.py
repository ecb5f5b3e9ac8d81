"""Outbound turns: the pump.

One Celery task per negotiation "pumps" turns until an event (settled, waiting
on the party, out of turns, failed) and reports it to its batch
(:func:`negotiations.services.batches.report`). A turn's move is stored before
it is sent, so a pump that takes over sends that same move, or records it from
the counterparty's Task, and never decides another.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.selectors import can_ask_party
from agents.services import steps
from negotiations import client, negotiator, selectors
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.rules import check_move
from negotiations.selectors import move_of, turns_record
from negotiations.services import batches, parking, recording, signatures
from negotiations.wire import Entry, Move, MoveError, parse_move, task_record_from_json
from parley.locks import alone

logger = logging.getLogger(__name__)


NAME_LIMIT: int = Negotiation._meta.get_field("counterparty_name").max_length or 200


# What a turn reads besides the negotiation, loaded with it (:func:`_reload`): who decides, under
# which intent, and the run whose budget it spends.
WITH_TURN = ("agent", "intent", "batch__run")

# Seconds between two looks at whether a negotiation was stopped while its model decides.
STOPPED_POLL_SECONDS = 0.5


# What an outbound negotiation parks on when their reply carries no move (their holding reply, say).
HELD_QUESTION = (
    "They replied without a move, so there is nothing to answer yet (they may be consulting the party "
    "they act for). Tell me when to send them my next move, and anything to change in it."
)

# Why an outbound negotiation of an agent without a principal stops on such a reply: there is nobody
# to tell it when to go on.
HELD_WITHOUT_PRINCIPAL = (
    "they replied without a move (they may be consulting the party they act for), and this agent has "
    "no principal to ask when to send its next move"
)


def negotiation_pump(*, negotiation_id: Any, tenant_id: int) -> None:
    """Take outbound turns until an event, then report it to the negotiation's batch.

    One pump of a negotiation runs at a time (:func:`negotiation_pump_alone`). A turn's
    move is stored before it is sent (:func:`_outbound_turn`), so a pump that
    finds one stored sends that same move, or records it from the
    counterparty's Task, and never decides another. A negotiation that left
    ``open`` without reporting its event (its pump died in between) reports it
    now. Quietly does nothing for a negotiation that is gone or not outbound.
    """
    negotiation = (
        Negotiation.objects.for_tenant(tenant_id).select_related(*WITH_TURN).filter(pk=negotiation_id).first()
    )
    if negotiation is None or negotiation.direction != Negotiation.Direction.OUTBOUND:
        return
    if negotiation.status == Negotiation.Status.OPEN:
        timeout = min(negotiation.agent.turn_timeout, settings.A2A_SEND_TIMEOUT)
        # One session for all the turns: their card is read once, the connection kept open.
        with client.Session(
            url=negotiation.counterparty_url, agent=negotiation.agent, timeout=timeout
        ) as session:
            while negotiation.status == Negotiation.Status.OPEN:
                try:
                    event = _outbound_turn(negotiation, session)
                except Exception:
                    # Whatever broke, the batch must hear of it, or the run waits forever.
                    logger.exception("negotiation %s failed taking a turn", negotiation.pk)
                    event = _fail(negotiation, "an internal error stopped this negotiation")
                if event is not None:
                    batches.report(negotiation, event)
                    return
                _reload(negotiation)
    if negotiation.event is None and negotiation.batch_id is not None:
        batches.report(negotiation, batches.event_of(negotiation))


@dataclass(frozen=True)
class _Decided:
    """Our next outbound move as decided: the A2A message to send, what deciding it cost, and the
    number of turns recorded when the record was read for it."""

    message: dict[str, Any]
    usage: negotiator.Usage
    seen: int


def negotiation_pump_alone(*, negotiation_id: Any, tenant_id: int) -> None:
    """:func:`negotiation_pump`, unless a pump of the same negotiation is running: then nothing.

    What the pump's task runs. Its message can come twice — the sweep sends
    it again while the first still waits in a busy queue, or the broker hands
    it out again — and two pumps of one negotiation at once would each send a
    move. The running pump holds :func:`parley.locks.alone` on the negotiation;
    a copy that comes after it ended finds the negotiation no longer open.
    """
    with alone(f"negotiation-pump:{negotiation_id}") as mine:
        if mine:
            negotiation_pump(negotiation_id=negotiation_id, tenant_id=tenant_id)
        else:
            logger.warning("negotiation %s is being pumped already: this copy does nothing", negotiation_id)


def _outbound_turn(negotiation: Negotiation, session: client.Session) -> dict[str, Any] | None:
    """One turn: our move — the stored one, else a newly decided one, stored first — sent and
    recorded over ``session`` (to the negotiation's counterparty). Returns the event it reached,
    or None to go on."""
    reconcile = negotiation.outbound_move is not None
    if not reconcile:
        decided = _outbound_decide(negotiation)
        if not isinstance(decided, _Decided):
            return decided
        # A move another pump stored instead may have reached them already: reconcile it too.
        reconcile = not _move_store(negotiation, decided)
        if negotiation.outbound_move is None or negotiation.status != Negotiation.Status.OPEN:
            return None  # a turn was recorded since the record was read (decide again), or it stopped
    return _outbound_deliver(negotiation, session, reconcile=reconcile)


def _outbound_decide(negotiation: Negotiation) -> _Decided | dict[str, Any] | None:
    """Decide our next move, or end the turns: the move decided, the event reached (out of turns,
    failed, asking), or None when the negotiation stopped meanwhile."""
    agent = negotiation.agent
    record = turns_record(negotiation)
    if negotiation.turn_count >= negotiation.max_turns:
        negotiation.status = Negotiation.Status.OUT_OF_TURNS
        negotiation.save(update_fields=["status", "updated_at"])
        return batches.event_of(negotiation)
    run = negotiation.batch.run if negotiation.batch else None
    if run is not None and (spent := steps.run_budget_spent(run)):
        return _fail(negotiation, f"the run it serves can spend no more: {spent}")
    try:
        decision = negotiator.decide(
            agent=agent,
            record=record,
            our_role="user",
            guidance=negotiation.guidance,
            max_moves=negotiation.max_turns,
            intent=negotiation.intent,
            objective=negotiation.objective,
            answers=selectors.answers_of(negotiation),
            stopped=_stopped_check(negotiation),
        )
    except negotiator.NegotiatorError as exc:
        recording.spend(negotiation, exc.usage, run)
        if not _still_open(negotiation):
            return None  # stopped meanwhile (its run was cancelled): the pump sees it and ends
        return _fail(negotiation, str(exc))
    recording.spend(negotiation, decision.usage, run)
    if not _still_open(negotiation):
        # Stopped while the model decided, after its last look (a cancel as it answered): the
        # move was decided for a negotiation that is over, so it must not reach the wire.
        return None
    move = decision.move
    if move.action == negotiator.ASK:
        return _asking(negotiation, move.message)
    if not record.history and move.action in negotiator.terminal_actions(agent):
        # Opening with a move that ends the exchange tells them nothing but our reason: keep it ours.
        return _fail(negotiation, f"nothing was sent: {move.message}")
    message = client.move_message(move=move, task_id=negotiation.task_id, context_id=negotiation.context_id)
    message = signatures.outbound_signed(negotiation, move, message)
    return _Decided(message=message, usage=decision.usage, seen=len(record.history))


def _move_store(negotiation: Negotiation, decided: _Decided) -> bool:
    """Store ``decided`` as the outbound move of ``negotiation`` — the message to send and what
    deciding it cost — then reload ``negotiation``; whether it was stored.

    A compare-and-set under the row's lock: stored only while the negotiation is
    open, has no move stored and still has the turns the decision read. A pump
    that loses finds the move another stored (which it adopts) or, when a turn
    was recorded since, none (it decides again).
    """
    with transaction.atomic():
        locked = (
            Negotiation.objects.for_tenant(negotiation.tenant_id).select_for_update().get(pk=negotiation.pk)
        )
        stored = (
            locked.outbound_move is None
            and locked.status == Negotiation.Status.OPEN
            and locked.turns.count() == decided.seen
        )
        if stored:
            locked.outbound_move = {"message": decided.message, "usage": _usage_json(decided.usage)}
            locked.save(update_fields=["outbound_move", "updated_at"])
    _reload(negotiation)
    return stored


def _outbound_deliver(
    negotiation: Negotiation, session: client.Session, *, reconcile: bool
) -> dict[str, Any] | None:
    """Get the stored outbound move of ``negotiation`` to the counterparty over ``session`` and record
    it with their reply. Returns the event it reached, or None to go on.

    ``reconcile``: the move may have reached them already (a pump that died after sending it, or
    another pump's), so their Task is read first (:func:`_reconciled`); when it carries the move
    and their reply, that is recorded and nothing is sent. Otherwise the very message stored is
    sent, ids and all. A send they refused (:attr:`client.CounterpartyError.refused`) fails the
    negotiation and drops the move (an answer decides anew); one that may have reached them fails
    it and keeps the move, for a retry to reconcile or send again.
    """
    agent = negotiation.agent
    assert negotiation.outbound_move is not None
    message = negotiation.outbound_move["message"]
    try:
        exchange = _reconciled(negotiation, message, session) if reconcile else None
        if exchange is None:
            exchange = session.send_message(message)
    except client.CounterpartyError as exc:
        return _fail(negotiation, str(exc), drop_move=exc.refused)
    try:
        recorded = _record_exchange(negotiation, exchange)
    except client.CounterpartyError as exc:
        return _fail(negotiation, str(exc))
    if recorded is None:
        return None  # another pump recorded it: the pump sees where that left the negotiation
    settlement, turns = recorded
    if settlement is not None:
        _reload(negotiation)
        signatures.settlement_countersign(negotiation)
    recording.evaluate(agent, negotiation, turns)
    _reload(negotiation)
    if settlement is not None:
        return batches.event_of(negotiation)
    if not turns[-1].action:
        # An open task and a reply without a move (a Parley agent consulting its party, a try-again
        # text): there is nothing to answer, and moving again at once would only spend turns.
        if not can_ask_party(agent):
            return _fail(negotiation, HELD_WITHOUT_PRINCIPAL)
        return _asking(negotiation, HELD_QUESTION)
    return None


def _reconciled(
    negotiation: Negotiation, message: dict[str, Any], session: client.Session
) -> client.Exchange | None:
    """The exchange of our ``message`` as the counterparty's Task already carries it — the message,
    then what follows it — read with GetTask; None when it does not carry it, or cannot be read
    so: an opening move (no Task id yet), a peer that speaks A2A 0.3 only (an Index peer has no
    ``tasks/get``), or a read that failed (logged)."""
    if not negotiation.task_id:
        return None
    try:
        exchange = session.task_get(task_id=negotiation.task_id, sent=message)
    except client.CounterpartyError as exc:
        logger.warning("negotiation %s: reading their Task to reconcile: %s", negotiation.pk, exc)
        return None
    if exchange is None:
        return None
    ids = [m.get("messageId") for m in exchange.task["history"]]
    carried = message["messageId"] in ids and ids.index(message["messageId"]) < len(ids) - 1
    return exchange if carried else None


def _asking(negotiation: Negotiation, question: str) -> dict[str, Any]:
    """Park the outbound ``negotiation`` on our party with ``question``: the event its batch hears."""
    parking.park(negotiation, question)
    negotiation.save(update_fields=["status", "parked_question", "updated_at"])
    return batches.event_of(negotiation)


def _record_exchange(
    negotiation: Negotiation, exchange: client.Exchange
) -> tuple[Settlement | None, list[Turn]] | None:
    """Record our stored outbound move, sent as ``exchange.sent`` (with what deciding it cost, as
    stored), and their reply, the Task's ids and state, and the settlement if it ended; the
    stored move is cleared in the same transaction.

    Returns the settlement the exchange reached (None while no side has closed)
    and the turns written, ours first; None, writing nothing, when the move is
    no longer the one stored (another pump recorded it). The returned Task must
    carry our record unchanged — every earlier message by id, then the message
    we sent — followed by their reply, a move within the rules their card
    publishes if it publishes any (:func:`negotiations.rules.check_move`, the
    rule their own gateway holds our moves to); anything else is refused with
    :class:`client.CounterpartyError` and nothing is written. The verdict is
    computed over our own record, never theirs.
    """
    task = exchange.task
    returned = task_record_from_json(task)
    history = task["history"]
    with transaction.atomic():
        # Only the negotiation's row is locked: its agent is read with it, not locked (pumps of one
        # agent's other negotiations record at the same time).
        negotiation = (
            Negotiation.objects.for_tenant(negotiation.tenant_id)
            .select_for_update(of=("self",))
            .select_related("agent")
            .get(pk=negotiation.pk)
        )
        stored = negotiation.outbound_move
        if stored is None or stored["message"]["messageId"] != exchange.sent["messageId"]:
            return None
        move = _stored_move(stored)
        recorded = list(negotiation.turns.order_by("seq"))
        expected = [*(t.raw.get("messageId") for t in recorded), exchange.sent["messageId"]]
        ours = [*(move_of(t) for t in recorded), move]
        carried = [e.move for e in returned.history[: len(expected)]]
        # Same messages by id, and the same moves in them: a peer may not rewrite either side's words.
        if [m.get("messageId") for m in history[: len(expected)]] != expected or carried != ours:
            raise client.CounterpartyError("its Task does not carry our record of this negotiation")
        replies = list(zip(history, returned.history, strict=True))[len(expected) :]
        # Exactly one reply per move, as the seed's server appends: more would let it make an
        # offer and accept it itself in one answer.
        if len(replies) != 1 or replies[0][1].role != "agent":
            raise client.CounterpartyError("its Task does not carry exactly one reply of its own to our move")
        reply = replies[0][1].move
        if reply is not None and exchange.rules is not None:
            try:
                check_move(reply, exchange.rules)
            except MoveError as exc:
                raise client.CounterpartyError(
                    f"its reply breaks the move rules its card publishes: {exc}"
                ) from exc
        used = {t.offer_id for t in recorded if t.offer_id} | {move.offer_id}
        if reply is not None and reply.offer_id and reply.offer_id in used:
            raise client.CounterpartyError(f"its reply reuses the offer id {reply.offer_id!r}")
        turns = [
            recording.add_turn(
                negotiation,
                len(expected),
                Entry(role="user", move=move),
                exchange.sent,
                our_role="user",
                state=returned.state,
                usage=_usage_of(stored["usage"]),
            )
        ]
        for seq, (raw, entry) in enumerate(replies, start=len(expected) + 1):
            turns.append(
                recording.add_turn(negotiation, seq, entry, raw, our_role="user", state=returned.state)
            )
        negotiation.task_id = task.get("id", negotiation.task_id)
        negotiation.context_id = task.get("contextId", negotiation.context_id)
        negotiation.counterparty_name = exchange.counterparty_name[:NAME_LIMIT]
        negotiation.counterparty_identity = exchange.identity
        negotiation.task_state = returned.state
        negotiation.turn_count = sum(t.side == Turn.Side.OURS for t in [*recorded, *turns])
        negotiation.outbound_move = None
        settlement = recording.settlement_save(negotiation, turns_record(negotiation), our_role="user")
        negotiation.save()
    return settlement, turns


def _stored_move(stored: dict[str, Any]) -> Move:
    """The move in the stored outbound message ``stored["message"]`` (its one data part)."""
    return parse_move(stored["message"]["parts"][0]["data"])


def _usage_json(usage: negotiator.Usage) -> dict[str, Any]:
    return {
        "model": usage.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost": str(usage.cost),
    }


def _usage_of(data: dict[str, Any]) -> negotiator.Usage:
    return negotiator.Usage(
        model=data["model"],
        input_tokens=data["input_tokens"],
        output_tokens=data["output_tokens"],
        cost=Decimal(data["cost"]),
    )


def _stopped_check(negotiation: Negotiation) -> Callable[[], bool]:
    """Whether ``negotiation`` stopped being open (its run was cancelled), read at most every
    :data:`STOPPED_POLL_SECONDS`: polled while its model decides."""
    looked_at, stopped = 0.0, False

    def stopped_now() -> bool:
        nonlocal looked_at, stopped
        if not stopped and time.monotonic() - looked_at >= STOPPED_POLL_SECONDS:
            looked_at = time.monotonic()
            stopped = not _still_open(negotiation)
        return stopped

    return stopped_now


def _reload(negotiation: Negotiation) -> None:
    """Read ``negotiation`` again from the database, with what a turn reads besides
    (:data:`WITH_TURN`) in the same query: a bare refresh forgets them, and each is read again
    on its first use."""
    negotiation.refresh_from_db(
        from_queryset=Negotiation.objects.for_tenant(negotiation.tenant_id).select_related(*WITH_TURN)
    )


def _still_open(negotiation: Negotiation) -> bool:
    return (
        Negotiation.objects.for_tenant(negotiation.tenant_id)
        .filter(pk=negotiation.pk, status=Negotiation.Status.OPEN)
        .exists()
    )


def _fail(negotiation: Negotiation, error: str, *, drop_move: bool = False) -> dict[str, Any]:
    """Mark the negotiation failed, dropping its stored outbound move if ``drop_move`` (it was
    refused); the event its batch hears."""
    negotiation.status, negotiation.error = Negotiation.Status.FAILED, error
    fields = ["status", "error", "updated_at"]
    if drop_move:
        negotiation.outbound_move = None
        fields.append("outbound_move")
    negotiation.save(update_fields=fields)
    return batches.event_of(negotiation)
