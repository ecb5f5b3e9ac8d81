"""Writes of the negotiation engine: open batches, take turns, answer inbound moves, settle, report.

Outbound, one Celery task per negotiation "pumps" turns until an event
(settled, waiting on the party, out of turns, failed) and reports it to its
batch; the last report of a batch hands the digest to the waiting run. Inbound,
the A2A gateway calls :func:`inbound_turn` once per counterparty move
(:func:`inbound_turn_unless_canceled`).

Every turn and every settlement is published (and stored for webhooks) with the
transaction that writes it; the agent's evaluation hook, if it has one, is
asked about each turn after that transaction commits.

A settlement is final unless it is ``unanswered``: one side closed and the
other has not (yet) closed too. That exchange is still open, so it can be
answered and can take further turns; its settlement follows the record.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import tools
from agents.models import Agent, Intent, Run
from agents.selectors import can_ask_party
from agents.services import runs, steps, tool_calls
from negotiations import client, digest, evaluation, negotiator, selectors
from negotiations.models import Batch, Negotiation, Settlement, Turn
from negotiations.rules import check_move
from negotiations.selectors import move_of, turns_record
from negotiations.verdict import settle
from negotiations.wire import Entry, Move, MoveError, TaskRecord, parse_move, task_record_from_json
from parley.celery import SWEEP_BATCH, enqueue_on_commit, stalled_resend
from parley.live import publish_on_commit
from parley.locks import alone

logger = logging.getLogger(__name__)

NAME_LIMIT: int = Negotiation._meta.get_field("counterparty_name").max_length or 200


EVALUATION_ARTIFACT = "turn-evaluation"
# Seconds between two looks at whether a negotiation was stopped while its model decides.
STOPPED_POLL_SECONDS = 0.5

# Our reply to a move while the negotiation waits on our party: the seed's inbound ``ask`` kept off
# the wire (docs/wire-format.md#vocabulary). Text only, so it carries no move and both sides' verdicts
# pass over it (#verdict, step 2); a reader of history sees the text (#reading-a-move).
HOLDING_TEXT = (
    "I am consulting the party I act for before I answer. Send your next message on this task later, "
    "or register a push notification config on it to get my answer as soon as it is decided."
)
HOLDING = Entry(role="agent", move=None, text=HOLDING_TEXT)
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


class NegotiationBusy(Exception):
    """A counterparty opened a negotiation while the agent holds an unfinished one of its own under
    the intent: it may be taken once that one has settled (unless that settles as a deal)."""


class DealStands(Exception):
    """A counterparty opened a negotiation about what the agent has closed a deal on under the
    intent: a deal stands (docs/design.md#one-live-negotiation), so no new negotiation about it is
    ever taken."""


class NegotiationClosed(Exception):
    """A move arrived for a negotiation that is settled for good; a new one must be opened."""


@dataclass(frozen=True)
class InboundReply:
    """Our answer to one inbound move: the A2A 1.0 JSON Message and the state it stamps.

    ``settlement`` is the verdict the exchange reached, if any. ``artifacts``
    are what the agent's evaluation hook attached to their move and to ours,
    as A2A artifacts ``{"artifactId", "name", "data"}`` (one data part each).
    """

    message: dict[str, Any]
    state: str
    settlement: Settlement | None
    artifacts: list[dict[str, Any]] = field(default_factory=list)


# Opening and answering, from the agent loop's tools.


def batch_open(*, run: Run, tool_call_id: str, targets: list[dict[str, str]]) -> tools.Outcome:
    """Open a negotiation per target ``{url, objective}`` and pump them all at once.

    The one-live rule (docs/design.md#one-live-negotiation): a target is skipped, with the
    reason, while the agent has a binding negotiation under the run's intent —
    an outbound one to the same URL, or any inbound one (see :func:`_binding`).
    Returns the digest at once when nothing was opened, else
    :class:`agents.tools.Defer`.
    """
    with transaction.atomic():
        # Every batch under this intent waits here for the one before to commit, so each
        # check below and its claim (the create) have nothing in between.
        Intent.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.intent_id)
        batch = Batch.objects.create(tenant_id=run.tenant_id, run=run, tool_call_id=tool_call_id)
        agent = run.agent
        for target in targets:
            url = client.canonical_url(target["url"])
            binding = selectors.binding(agent, run.intent_id)
            existing = (
                binding.filter(counterparty_url=url).first()
                or binding.filter(direction=Negotiation.Direction.INBOUND).first()
            )
            if existing is not None:
                batch.events.append(
                    {
                        "kind": "skipped",
                        "id": str(existing.pk),
                        "peer": existing.counterparty_name,
                        "url": url,
                        "reason": _still_binding(existing),
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


def _still_binding(existing: Negotiation) -> str:
    """Why ``existing`` keeps a new negotiation from opening, and what to do instead."""
    inbound = existing.direction == Negotiation.Direction.INBOUND
    which = "that another agent opened with you under this intent" if inbound else "with this counterparty"
    outcome = _outcome(existing)
    if outcome in Settlement.DEALS:
        return f"negotiation {existing.pk} {which} closed as {outcome}, and that deal stands; report it"
    state = outcome or existing.status
    return (
        f"negotiation {existing.pk} {which} is still binding ({state}); answer it instead of opening another"
    )


def batch_answer(*, run: Run, tool_call_id: str, ids: list[str], guidance: str) -> tools.Outcome:
    """Add ``guidance`` to each negotiation in ``ids`` as standing guidance and move them on.

    Outbound negotiations continue at once — an ``unanswered`` one too, whose
    settlement then follows the exchange; inbound ones keep the guidance for
    the counterparty's next message (event ``recorded``), one parked on the
    party answered as :func:`negotiation_guidance_give` answers it. Unknown
    and finally settled ids are skipped with the reason, as are failed ones that
    reached nobody (no Task, no move stored) and an outbound one whose pump is
    still taking turns.
    """
    with transaction.atomic():
        batch = Batch.objects.create(tenant_id=run.tenant_id, run=run, tool_call_id=tool_call_id)
        for raw_id in dict.fromkeys(ids):
            event = _answer_one(run, batch, raw_id, guidance)
            if event is not None:
                batch.events.append(event)
        batch.save(update_fields=["events", "updated_at"])
        return _deferred_or_digest(batch)


def _answer_one(run: Run, batch: Batch, raw_id: str, guidance: str) -> dict[str, Any] | None:
    """Answer one negotiation of ``batch``: the event known now, or None when its pump will report."""
    found = _by_public_id(run.agent, raw_id)
    if found is None:
        return {"kind": "skipped", "id": raw_id, "reason": "no such negotiation of this agent"}
    negotiation = Negotiation.objects.for_tenant(run.tenant_id).select_for_update().get(pk=found.pk)
    reached_nobody = (
        negotiation.status == Negotiation.Status.FAILED
        and not negotiation.task_id
        and negotiation.outbound_move is None
    )
    if reached_nobody or _final_outcome(negotiation):
        return {
            **_who(negotiation),
            "kind": "skipped",
            "reason": f"already ended ({negotiation.task_state or negotiation.status}) — open a new "
            "negotiation if the terms need to change.",
        }
    outbound = negotiation.direction == Negotiation.Direction.OUTBOUND
    if outbound and negotiation.status == Negotiation.Status.OPEN:
        # Its pump is still taking turns; a second pump would send moves twice.
        return {
            **_who(negotiation),
            "kind": "skipped",
            "reason": "still in progress — its result comes with the call that started it",
        }
    if not outbound:
        _guidance_add(negotiation, guidance)
        return {**_who(negotiation), "kind": "recorded", "reason": "guidance kept for their next message"}
    _guidance_append(negotiation, guidance)
    # Waiting, out of turns, unanswered, or failed once a move may have reached them: it goes on (a
    # retry, which sends a stored move again or finds it on their Task).
    negotiation.status, negotiation.batch, negotiation.event = Negotiation.Status.OPEN, batch, None
    negotiation.error = ""
    negotiation.save(
        update_fields=[
            "guidance",
            "answers",
            "parked_question",
            "status",
            "batch",
            "event",
            "error",
            "updated_at",
        ]
    )
    _enqueue_pump(negotiation)
    return None


def _deferred_or_digest(batch: Batch) -> tools.Outcome:
    if batch.negotiations.exists():
        return tools.Defer()
    batch.reported_at = timezone.now()
    batch.save(update_fields=["reported_at", "updated_at"])
    return tools.Result(digest.render(batch.events))


def run_cancelled(run: Run) -> None:
    """Stop the negotiations ``run`` opened or answered that are still open or waiting on the party.

    The agent loop's cancel hook, called in the transaction that cancels the
    run. A pump in the middle of a turn records that turn (the counterparty
    has it) and stops there.
    """
    Negotiation.objects.for_tenant(run.tenant_id).filter(
        batch__run=run, status__in=(Negotiation.Status.OPEN, Negotiation.Status.WAITING)
    ).update(
        status=Negotiation.Status.FAILED, error="the run it served was cancelled", updated_at=timezone.now()
    )


# Outbound turns.


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
        Negotiation.objects.for_tenant(tenant_id)
        .select_related("agent", "intent")
        .filter(pk=negotiation_id)
        .first()
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
    if negotiation.event is None and negotiation.batch_id is not None:
        _report(negotiation, _event_of(negotiation))


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


def _outbound_turn(negotiation: Negotiation) -> dict[str, Any] | None:
    """One turn: our move — the stored one, else a newly decided one, stored first — sent and
    recorded. Returns the event it reached, or None to go on."""
    reconcile = negotiation.outbound_move is not None
    if not reconcile:
        decided = _outbound_decide(negotiation)
        if not isinstance(decided, _Decided):
            return decided
        # A move another pump stored instead may have reached them already: reconcile it too.
        reconcile = not _move_store(negotiation, decided)
        if negotiation.outbound_move is None or negotiation.status != Negotiation.Status.OPEN:
            return None  # a turn was recorded since the record was read (decide again), or it stopped
    return _outbound_deliver(negotiation, reconcile=reconcile)


def _outbound_decide(negotiation: Negotiation) -> _Decided | dict[str, Any] | None:
    """Decide our next move, or end the turns: the move decided, the event reached (out of turns,
    failed, asking), or None when the negotiation stopped meanwhile."""
    agent = negotiation.agent
    record = turns_record(negotiation)
    if negotiation.turn_count >= negotiation.max_turns:
        negotiation.status = Negotiation.Status.OUT_OF_TURNS
        negotiation.save(update_fields=["status", "updated_at"])
        return _event_of(negotiation)
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
        _spend(negotiation, exc.usage, run)
        if not _still_open(negotiation):
            return None  # stopped meanwhile (its run was cancelled): the pump sees it and ends
        return _fail(negotiation, str(exc))
    _spend(negotiation, decision.usage, run)
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
    negotiation.refresh_from_db()
    return stored


def _outbound_deliver(negotiation: Negotiation, *, reconcile: bool) -> dict[str, Any] | None:
    """Get the stored outbound move of ``negotiation`` to the counterparty and record it with their
    reply. Returns the event it reached, or None to go on.

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
    timeout = min(agent.turn_timeout, settings.A2A_SEND_TIMEOUT)
    try:
        exchange = _reconciled(negotiation, message, timeout) if reconcile else None
        if exchange is None:
            exchange = client.send_message(
                url=negotiation.counterparty_url, message=message, timeout=timeout, agent=agent
            )
    except client.CounterpartyError as exc:
        return _fail(negotiation, str(exc), drop_move=exc.refused)
    try:
        recorded = _record_exchange(negotiation, exchange)
    except client.CounterpartyError as exc:
        return _fail(negotiation, str(exc))
    if recorded is None:
        return None  # another pump recorded it: the pump sees where that left the negotiation
    settlement, turns = recorded
    _evaluate(agent, negotiation, turns)
    negotiation.refresh_from_db()
    if settlement is not None:
        return _event_of(negotiation)
    if not turns[-1].action:
        # An open task and a reply without a move (a Parley agent consulting its party, a try-again
        # text): there is nothing to answer, and moving again at once would only spend turns.
        if not can_ask_party(agent):
            return _fail(negotiation, HELD_WITHOUT_PRINCIPAL)
        return _asking(negotiation, HELD_QUESTION)
    return None


def _reconciled(negotiation: Negotiation, message: dict[str, Any], timeout: float) -> client.Exchange | None:
    """The exchange of our ``message`` as the counterparty's Task already carries it — the message,
    then what follows it — read with GetTask; None when it does not carry it, or cannot be read
    so: an opening move (no Task id yet), a peer that speaks A2A 0.3 only (an Index peer has no
    ``tasks/get``), or a read that failed (logged)."""
    if not negotiation.task_id:
        return None
    try:
        exchange = client.task_get(
            url=negotiation.counterparty_url,
            task_id=negotiation.task_id,
            sent=message,
            timeout=timeout,
            agent=negotiation.agent,
        )
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
    _park(negotiation, question)
    negotiation.save(update_fields=["status", "parked_question", "updated_at"])
    return _event_of(negotiation)


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
        negotiation = (
            Negotiation.objects.for_tenant(negotiation.tenant_id).select_for_update().get(pk=negotiation.pk)
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
        used = {t.offer_id for t in negotiation.turns.all() if t.offer_id} | {move.offer_id}
        if reply is not None and reply.offer_id and reply.offer_id in used:
            raise client.CounterpartyError(f"its reply reuses the offer id {reply.offer_id!r}")
        turns = [
            _add_turn(
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
            turns.append(_add_turn(negotiation, seq, entry, raw, our_role="user", state=returned.state))
        negotiation.task_id = task.get("id", negotiation.task_id)
        negotiation.context_id = task.get("contextId", negotiation.context_id)
        negotiation.counterparty_name = exchange.counterparty_name[:NAME_LIMIT]
        negotiation.task_state = returned.state
        negotiation.turn_count = negotiation.turns.filter(side=Turn.Side.OURS).count()
        negotiation.outbound_move = None
        settlement = _settle(negotiation, turns_record(negotiation), our_role="user")
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


def _still_open(negotiation: Negotiation) -> bool:
    return (
        Negotiation.objects.for_tenant(negotiation.tenant_id)
        .filter(pk=negotiation.pk, status=Negotiation.Status.OPEN)
        .exists()
    )


def _add_usage(negotiation: Negotiation, usage: negotiator.Usage) -> None:
    """Add ``usage`` to the totals of ``negotiation``, a row locked in the caller's transaction,
    which saves it."""
    negotiation.input_tokens += usage.input_tokens
    negotiation.output_tokens += usage.output_tokens
    negotiation.cost += usage.cost


def _spend(negotiation: Negotiation, usage: negotiator.Usage, run: Run | None) -> None:
    """Count what deciding one outbound move cost: on the negotiation, and on the run it serves
    (its token and cost budget; the tenant's monthly budget adds runs' costs)."""
    if not (usage.input_tokens or usage.output_tokens or usage.cost):
        return
    Negotiation.objects.for_tenant(negotiation.tenant_id).filter(pk=negotiation.pk).update(
        input_tokens=F("input_tokens") + usage.input_tokens,
        output_tokens=F("output_tokens") + usage.output_tokens,
        cost=F("cost") + usage.cost,
    )
    if run is not None:
        steps.run_usage_add(
            run=run, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost=usage.cost
        )


# Inbound turns.


def inbound_check(*, agent: Agent, task_id: str, incoming: dict[str, Any]) -> Move:
    """The move ``incoming`` (an A2A 1.0 JSON Message) carries, if ``agent`` can take it on ``task_id``.

    Reads only: the gateway calls it before the SDK sets up the task, so a
    refused message writes nothing. Raises :class:`MoveError` (no valid move in
    the first data part; an action outside the agent's vocabulary or a declared
    term of another type, :func:`negotiations.negotiator.move_rules`; a replayed
    message or offer id), :class:`NegotiationClosed` (the negotiation is settled
    for good; an ``unanswered`` one takes further moves), and for a first
    message — ``task_id`` empty or naming no inbound negotiation — under the
    intent inbound ones join, :class:`DealStands` or :class:`NegotiationBusy`
    (:func:`_refuse_if_bound`; :func:`inbound_turn` checks again under lock).
    """
    data = [p["data"] for p in incoming.get("parts", []) if "data" in p]
    if not data:
        raise MoveError("the message has no data part carrying a move {action, message, …}")
    move = parse_move(data[0])
    check_move(move, negotiator.move_rules(agent))
    negotiation = (
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, direction=Negotiation.Direction.INBOUND, task_id=task_id)
        .first()
        if task_id
        else None
    )
    if negotiation is None:
        _refuse_if_bound(agent, selectors.inbound_intent(agent))
    else:
        _refuse_if_closed(negotiation)
        _refuse_replays(negotiation, incoming.get("messageId", ""), move)
    return move


@dataclass(frozen=True)
class Resent:
    """An inbound message that was applied already, sent again: the Task it was applied on, and
    the ``messageId`` of our reply to it ("" when it has none)."""

    task_id: str
    reply_id: str


def inbound_resent(*, agent: Agent, task_id: str, incoming: dict[str, Any]) -> Resent | None:
    """Whether ``incoming`` (an A2A 1.0 JSON Message to ``agent``) is a message already applied,
    sent again — a counterparty retrying a send whose answer it lost.

    On the Task ``task_id``: ``incoming`` has the ``messageId`` and the move of
    the last message of theirs applied there. A first message (``task_id``
    ""): it has the ``messageId``, ``contextId`` and move of the first message
    of one of ``agent``'s inbound negotiations. Such a message is answered
    with that Task as it stands and applied no second time; anything else —
    a used ``messageId`` with another move, or an older one — is taken or
    refused as any message (:func:`inbound_check`). Reads only.
    """
    message_id = incoming.get("messageId")
    data = [p["data"] for p in incoming.get("parts", []) if "data" in p]
    if not isinstance(message_id, str) or not message_id or not data:
        return None
    try:
        move = parse_move(data[0])
    except MoveError:
        return None
    inbound = Negotiation.objects.for_tenant(agent.tenant_id).filter(
        agent=agent, direction=Negotiation.Direction.INBOUND
    )
    turns = Turn.objects.for_tenant(agent.tenant_id).select_related("negotiation")
    if task_id:
        theirs = (
            turns.filter(negotiation__in=inbound.filter(task_id=task_id), side=Turn.Side.THEIRS)
            .order_by("-seq")
            .first()
        )
    elif context_id := incoming.get("contextId"):
        theirs = turns.filter(
            negotiation__in=inbound.filter(context_id=context_id), seq=1, raw__messageId=message_id
        ).first()
    else:
        return None
    if theirs is None or theirs.raw.get("messageId") != message_id or move_of(theirs) != move:
        return None
    reply = turns.filter(negotiation=theirs.negotiation, seq=theirs.seq + 1).first()
    return Resent(
        task_id=theirs.negotiation.task_id, reply_id=reply.raw.get("messageId", "") if reply else ""
    )


def _refuse_if_bound(agent: Agent, intent: Intent | None) -> None:
    """Refuse a first inbound message while ``agent`` holds a binding outbound negotiation under
    ``intent`` (the one-live rule, docs/design.md#one-live-negotiation).

    Raises :class:`DealStands` when that negotiation closed as a deal (agreed or unconfirmed),
    which stands for good, and :class:`NegotiationBusy` while it is unfinished — going, waiting
    on the party, out of turns, ``unanswered``, or failed once a move may have reached them (its
    party may retry it) — which may still end without a deal and free the intent.
    """
    bound = selectors.binding_outbound(agent, intent)
    if bound is None:
        return
    if _outcome(bound) in Settlement.DEALS:
        raise DealStands(f"agent {agent.slug} closed negotiation {bound.pk} as a deal under this intent")
    raise NegotiationBusy(f"agent {agent.slug} already negotiates on its own under this intent")


def _refuse_replays(negotiation: Negotiation, message_id: str, move: Move) -> None:
    """Raise :class:`MoveError` for a message id or an offer id already in the negotiation.

    A replayed message id is dropped from the Task by the SDK while we would still answer it,
    and an offer id named twice makes "the offer it accepts" ambiguous; both would let the two
    sides' records, and so their verdicts, part.
    """
    turns = negotiation.turns.all()
    if message_id and any(t.raw.get("messageId") == message_id for t in turns):
        raise MoveError(f"message.messageId {message_id!r} was already used in this task")
    if move.offer_id and any(t.offer_id == move.offer_id for t in turns):
        raise MoveError(f"move.offerId {move.offer_id!r} was already used in this task")


def inbound_turn(
    *, agent: Agent, task_id: str, context_id: str, prior: TaskRecord, incoming: dict[str, Any]
) -> InboundReply:
    """Answer one inbound move ``incoming`` (an A2A 1.0 JSON Message) on the Task ``prior``.

    A negotiator's ``ask`` is for the party, never the wire: the negotiation
    parks waiting on the party with the question, and the counterparty gets
    the holding reply (:data:`HOLDING_TEXT` as one text part, no move, the task
    ``input-required``). While it waits, their further moves get the holding
    reply again, undecided; once the party answers, the next reply is decided
    with that guidance (:func:`negotiation_guidance_give`).

    Raises :class:`negotiations.wire.MoveError` for a message without a valid
    move or with a message or offer id already used on the task (checked again
    under the row's lock: the same message sent again to two web processes at
    once is applied by one, refused by the other), :class:`NegotiationClosed`
    for a negotiation settled for good, :class:`DealStands` or
    :class:`NegotiationBusy` for a first message while the agent holds a binding
    outbound negotiation under the intent (checked under lock), and
    :class:`negotiations.negotiator.NegotiatorError` when no move can be made.
    Nothing is written unless the reply is decided. The evaluation hook is asked
    about both moves after they are committed; a failing hook only costs their artifacts.
    """
    their_move = inbound_check(agent=agent, task_id=task_id, incoming=incoming)
    negotiation = _inbound_on(agent, task_id)
    intent = negotiation.intent if negotiation else selectors.inbound_intent(agent)
    record = TaskRecord(state="working", history=(*prior.history, Entry(role="user", move=their_move)))
    parked = negotiation is not None and negotiation.status == Negotiation.Status.WAITING
    decision = None if parked else _inbound_decide(agent, negotiation, record, intent)
    move = decision.move if decision is not None else None
    usage = decision.usage if decision is not None else negotiator.Usage()
    asked = move is not None and move.action == negotiator.ASK
    ours = HOLDING if move is None or asked else Entry(role="agent", move=move)
    state = _reply_state(agent, ours)
    reply = _reply_message(task_id, context_id, ours)
    final = TaskRecord(state=state, history=(*record.history, ours))
    with transaction.atomic():
        if negotiation is None and intent is not None:
            # The gateway refused this at admission; check again under the intent's lock, which
            # batch_open holds while it claims, so an outbound open at the same instant loses.
            Intent.objects.for_tenant(agent.tenant_id).select_for_update().get(pk=intent.pk)
            _refuse_if_bound(agent, intent)
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
                    "intent": intent,
                },
            )
        )
        # Another message on this task may have closed it since the check above, or applied this
        # very message (the same message sent again, to another web process).
        _refuse_if_closed(negotiation)
        _refuse_replays(negotiation, incoming.get("messageId", ""), their_move)
        known = negotiation.turns.count()
        turns = [
            _add_turn(negotiation, known + 1, record.history[-1], incoming, our_role="agent", state=state),
            _add_turn(
                negotiation, known + 2, final.history[-1], reply, our_role="agent", state=state, usage=usage
            ),
        ]
        _add_usage(negotiation, usage)
        negotiation.task_state = state
        negotiation.turn_count = _our_moves(final)
        # The status follows this exchange: our ask parks it, a decided move leaves it open until
        # _settle finds that a side closed, and a holding reply to a parked one leaves it as it
        # is (the party may have answered meanwhile).
        if asked:
            assert move is not None
            _park(negotiation, move.message)
        elif not parked:
            negotiation.status, negotiation.parked_question = Negotiation.Status.OPEN, ""
        settlement = _settle(negotiation, final, our_role="agent")
        negotiation.save()
    artifacts = _evaluate(agent, negotiation, turns)
    return InboundReply(message=reply, state=state, settlement=settlement, artifacts=artifacts)


def _inbound_on(agent: Agent, task_id: str) -> Negotiation | None:
    """``agent``'s inbound negotiation on the Task ``task_id``, if its first turn is recorded."""
    return (
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, direction=Negotiation.Direction.INBOUND, task_id=task_id)
        .first()
    )


def _inbound_decide(
    agent: Agent, negotiation: Negotiation | None, record: TaskRecord, intent: Intent | None
) -> negotiator.Decision:
    """Our next move on the inbound Task ``record``, with the negotiation's standing guidance; it may
    ask. A failed decision's spend is counted on the negotiation, when there is one yet."""
    try:
        return negotiator.decide(
            agent=agent,
            record=record,
            our_role="agent",
            guidance=negotiation.guidance if negotiation else [],
            max_moves=agent.max_turns,
            intent=intent,
            answers=selectors.answers_of(negotiation) if negotiation else (),
        )
    except negotiator.NegotiatorError as exc:
        if negotiation is not None:
            _spend(negotiation, exc.usage, None)
        raise


def _reply_state(agent: Agent, ours: Entry) -> str:
    """The state our reply ``ours`` stamps: its action's, or input-required for one without a move."""
    return "input-required" if ours.move is None else negotiator.task_state_for(agent, ours.move.action)


def _reply_message(task_id: str, context_id: str, ours: Entry) -> dict[str, Any]:
    """Our reply as an A2A 1.0 JSON Message: the move as one data part, or, without one, the text as
    one text part."""
    part: dict[str, Any] = {"data": ours.move.to_data()} if ours.move is not None else {"text": ours.text}
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_AGENT",
        "taskId": task_id,
        "contextId": context_id,
        "parts": [part],
    }


def _our_moves(record: TaskRecord) -> int:
    """The moves we (the agent role) made in ``record``: a reply without a move is none."""
    return sum(1 for e in record.history if e.role == "agent" and e.move is not None)


def _park(negotiation: Negotiation, question: str) -> None:
    """Park ``negotiation`` (locked) on its party with ``question``; the caller saves it."""
    negotiation.status, negotiation.parked_question = Negotiation.Status.WAITING, question
    publish_on_commit(
        event="negotiation.waiting",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload=_event_head(negotiation),
    )


def inbound_cancel(*, agent: Agent, task_id: str, delivered: frozenset[str]) -> None:
    """The counterparty canceled the A2A Task of ``agent``'s inbound negotiation on ``task_id``.

    The negotiation ends as the counterparty's own Task does: settled on the
    Task as canceled, which is declined (state) (docs/wire-format.md#verdict,
    step 1), over the turns whose message ids are in ``delivered`` (the
    canceled Task's messages). A reply of ours that was decided but never
    reached the Task (the cancel came while the turn ran) is not part of that
    record, so it ends nothing. The negotiation's ``task_state`` becomes
    ``canceled`` and a question parked for the party is dropped.

    Does nothing when ``agent`` has no inbound negotiation on the task (its
    first turn has not committed) or it is already canceled. A turn in flight
    commits after this and stamps its own state: the gateway calls this again
    once that turn is done, under the same row lock.
    """
    with transaction.atomic():
        negotiation = (
            Negotiation.objects.for_tenant(agent.tenant_id)
            .select_for_update()
            .filter(agent=agent, direction=Negotiation.Direction.INBOUND, task_id=task_id)
            .first()
        )
        if negotiation is None or negotiation.task_state == "canceled":
            return
        history = tuple(
            Entry(role="agent" if t.side == Turn.Side.OURS else "user", move=move_of(t), text=t.message)
            for t in negotiation.turns.order_by("seq")
            if t.raw.get("messageId") in delivered
        )
        negotiation.task_state = "canceled"
        negotiation.parked_question = ""
        _settle(negotiation, TaskRecord(state="canceled", history=history), our_role="agent")
        negotiation.save(update_fields=["task_state", "parked_question", "status", "updated_at"])


def inbound_turn_unless_canceled(
    *,
    agent: Agent,
    task_id: str,
    context_id: str,
    prior: TaskRecord,
    incoming: dict[str, Any],
    canceled_meanwhile: Callable[[], frozenset[str] | None],
) -> InboundReply | None:
    """:func:`inbound_turn`, then the cancel that landed while it ran: its reply, or None when the
    counterparty canceled the Task meanwhile.

    The turn cannot be interrupted. Once it has committed, ``canceled_meanwhile()``
    says whether the Task was canceled while it ran: None if not, else the ids of
    the messages the canceled Task holds (the gateway's stored Task). A cancel that
    came meanwhile is applied to the negotiation here (:func:`inbound_cancel` over
    those messages; the gateway applies it too, after cancelling: whichever comes
    second sees the turn committed), and the turn's reply reaches no one. Raises
    what :func:`inbound_turn` raises.
    """
    reply = inbound_turn(agent=agent, task_id=task_id, context_id=context_id, prior=prior, incoming=incoming)
    delivered = canceled_meanwhile()
    if delivered is None:
        return reply
    inbound_cancel(agent=agent, task_id=task_id, delivered=delivered)
    return None


# The party's answer to an inbound negotiation parked on it.


class GuidanceRefused(Exception):
    """An answer the negotiation does not take, nothing changed; ``code`` names why: ``outbound``
    (its run asks the party and answers it), ``not_waiting``, ``already_answered``."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class TaskMovedOn(Exception):
    """Raised by a ``put`` of :func:`inbound_reply_decided`: the Task no longer ends with our holding
    reply, so the reply decided for it is not kept."""


AnsweredHook = Callable[[Negotiation], None]
# Told of each inbound negotiation whose party has just answered, inside the transaction that records
# it: the A2A gateway sends the decided reply at once where the counterparty asked for push
# notifications, and nothing here imports the gateway (docs/design.md#layers).
_answered_hooks: list[AnsweredHook] = []


def register_answered_hook(hook: AnsweredHook) -> None:
    """Call ``hook(negotiation)`` whenever an inbound negotiation's party answers it. Idempotent."""
    if hook not in _answered_hooks:
        _answered_hooks.append(hook)


def negotiation_guidance_give(*, negotiation: Negotiation, answer: str, user: User | None) -> Negotiation:
    """Answer the question the inbound ``negotiation`` parked on: ``answer`` becomes standing guidance.

    The question is cleared and the negotiation open again: the counterparty's
    next message is answered with the guidance, and where they registered a
    push notification config on the Task, the reply is decided and sent at
    once (the registered hooks, after commit). ``user`` None is the host
    through its API. Returns the negotiation as saved.

    Raises :class:`agents.services.runs.NotAllowed` unless ``user`` may act for the
    agent (:func:`agents.services.runs.require_may_act`), ``ValidationError`` at
    ``answer`` for an empty one, and :class:`GuidanceRefused` for an outbound
    negotiation, one not waiting on its party, or one answered before whose
    reply has not gone out.
    """
    if user is not None:
        runs.require_may_act(
            user, negotiation.agent_id, negotiation.tenant_id, doing="answer its negotiations"
        )
    answer = answer.strip()
    if not answer:
        raise ValidationError({"answer": "The answer is empty."})
    with transaction.atomic():
        negotiation = (
            Negotiation.objects.for_tenant(negotiation.tenant_id)
            .select_for_update()
            .select_related("agent")
            .get(pk=negotiation.pk)
        )
        _refuse_unless_parked(negotiation)
        _guidance_add(negotiation, answer)
    return negotiation


def _refuse_unless_parked(negotiation: Negotiation) -> None:
    """Raise :class:`GuidanceRefused` unless ``negotiation`` is inbound and waiting on its party."""
    if negotiation.direction == Negotiation.Direction.OUTBOUND:
        raise GuidanceRefused(
            "This negotiation is outbound: the run that opened it asks its party and answers it.",
            code="outbound",
        )
    if negotiation.status == Negotiation.Status.WAITING:
        return
    if _holding_turn(negotiation) is not None:
        raise GuidanceRefused(
            "This negotiation's question was already answered; the answer goes out with the reply to "
            "their next message.",
            code="already_answered",
        )
    raise GuidanceRefused(
        f"This negotiation is not waiting on its party: it is {negotiation.get_status_display().lower()}.",
        code="not_waiting",
    )


def _guidance_add(negotiation: Negotiation, guidance: str) -> None:
    """Add ``guidance`` to the inbound ``negotiation`` (locked) and save it; one parked on its party is
    open again, and the answered hooks and event hear of it."""
    answered = negotiation.status == Negotiation.Status.WAITING
    _guidance_append(negotiation, guidance)
    if answered:
        negotiation.status = Negotiation.Status.OPEN
    negotiation.save(update_fields=["guidance", "answers", "parked_question", "status", "updated_at"])
    if not answered:
        return
    publish_on_commit(
        event="negotiation.answered",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload=_event_head(negotiation),
    )
    for hook in _answered_hooks:
        hook(negotiation)


def _guidance_append(negotiation: Negotiation, guidance: str) -> None:
    """Add ``guidance`` to the locked ``negotiation``'s standing guidance; when it was parked on a
    question, the guidance is the party's answer to it (kept in ``answers``), and the question is
    cleared. The caller saves the negotiation."""
    negotiation.guidance = [*negotiation.guidance, guidance]
    if negotiation.parked_question:
        answer = {"question": negotiation.parked_question, "answer": guidance}
        negotiation.answers = [*negotiation.answers, answer]
    negotiation.parked_question = ""


def _holding_turn(negotiation: Negotiation) -> Turn | None:
    """The holding reply that ends the open inbound ``negotiation``: its party answered and its reply
    is still to be decided. None otherwise."""
    if negotiation.status != Negotiation.Status.OPEN:
        return None
    last = negotiation.turns.order_by("-seq").first()
    return last if last is not None and last.side == Turn.Side.OURS and not last.action else None


def inbound_reply_decided(
    *, agent: Agent, task_id: str, prior: TaskRecord, put: Callable[[InboundReply], None]
) -> InboundReply | None:
    """Decide and record the reply to the counterparty's last move on ``task_id`` now, with the
    guidance its party gave, instead of at their next message.

    ``prior`` is the Task as stored, our holding reply last. Only for an
    inbound negotiation of ``agent`` that its party answered and whose last
    turn is still that holding reply (else None, nothing written: their next
    message got the answer first, or it was decided already). A decision that
    asks the party again parks the negotiation with the new question and writes
    no turn: the counterparty already holds our holding reply. Otherwise our
    move is recorded like :func:`inbound_turn`'s reply and ``put(reply)`` —
    which puts it on the Task — runs in the same transaction; when it raises
    :class:`TaskMovedOn`, nothing is kept and the result is None. The
    evaluation hook is asked after commit. Raises
    :class:`negotiations.negotiator.NegotiatorError` when no move can be made.
    """
    negotiation = _inbound_on(agent, task_id)
    holding = _holding_turn(negotiation) if negotiation is not None else None
    if negotiation is None or holding is None:
        return None
    record = TaskRecord(state="working", history=prior.history)
    decision = _inbound_decide(agent, negotiation, record, negotiation.intent)
    move = decision.move
    ours = Entry(role="agent", move=move)
    state = _reply_state(agent, ours)
    reply = _reply_message(task_id, negotiation.context_id, ours)
    try:
        with transaction.atomic():
            negotiation = (
                Negotiation.objects.for_tenant(agent.tenant_id)
                .select_for_update()
                .select_related("agent")
                .get(pk=negotiation.pk)
            )
            # Under the lock: a message of theirs may have been answered since the decision.
            if _holding_turn(negotiation) != holding:
                return None
            _add_usage(negotiation, decision.usage)
            if move.action == negotiator.ASK:
                _park(negotiation, move.message)
                negotiation.save(
                    update_fields=[
                        "status",
                        "parked_question",
                        "input_tokens",
                        "output_tokens",
                        "cost",
                        "updated_at",
                    ]
                )
                return None
            final = TaskRecord(state=state, history=(*record.history, ours))
            turn = _add_turn(
                negotiation,
                holding.seq + 1,
                ours,
                reply,
                our_role="agent",
                state=state,
                usage=decision.usage,
            )
            negotiation.task_state = state
            negotiation.turn_count = _our_moves(final)
            settlement = _settle(negotiation, final, our_role="agent")
            negotiation.save()
            put(InboundReply(message=reply, state=state, settlement=settlement))
    except TaskMovedOn:
        return None
    artifacts = _evaluate(agent, negotiation, [turn])
    return InboundReply(message=reply, state=state, settlement=settlement, artifacts=artifacts)


# Shared pieces.


def _add_turn(
    negotiation: Negotiation,
    seq: int,
    entry: Entry,
    raw: dict[str, Any],
    *,
    our_role: Literal["user", "agent"],
    state: str,
    usage: negotiator.Usage | None = None,
) -> Turn:
    move = entry.move
    usage = usage or negotiator.Usage()
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
        model=usage.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost=usage.cost,
    )
    publish_on_commit(
        event="negotiation.turn",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload={
            **_event_head(negotiation),
            "seq": seq,
            "side": turn.side,
            "action": turn.action,
            "terms": turn.terms,
            "offerId": turn.offer_id,
            "acceptsOfferId": turn.accepts_offer_id,
            "taskState": state,
        },
    )
    return turn


def _settle(
    negotiation: Negotiation, record: TaskRecord, *, our_role: Literal["user", "agent"]
) -> Settlement | None:
    """Make the negotiation's settlement the verdict on ``record``; the caller saves the negotiation.

    Returns the settlement, or None while no side has closed. A settlement is
    one-to-one with its negotiation: a provisional (``unanswered``) one is
    updated to the next verdict, or deleted once the exchange goes on without
    one, as the seed reads the settlement off the Task each time. A settlement
    for good is never passed here: inbound moves meet :func:`_refuse_if_closed`
    first, and only open negotiations are pumped. A verdict settles the
    negotiation, except that an ``unanswered`` one leaves it waiting when our
    reply was a question for the party.
    """
    verdict = settle(
        record, our_role=our_role, terminal_actions=negotiator.terminal_actions(negotiation.agent)
    )
    if verdict is None:
        Settlement.objects.for_tenant(negotiation.tenant_id).filter(negotiation=negotiation).delete()
        return None
    settlement, _ = Settlement.objects.for_tenant(negotiation.tenant_id).update_or_create(
        negotiation=negotiation,
        defaults={
            "tenant_id": negotiation.tenant_id,
            "outcome": verdict.outcome,
            "basis": verdict.basis,
            "terms": verdict.terms,
            "reason": verdict.reason,
            "ended_by": verdict.ended_by,
            "disputed": verdict.disputed,
        },
    )
    if verdict.outcome != Settlement.Outcome.UNANSWERED or negotiation.status != Negotiation.Status.WAITING:
        negotiation.status, negotiation.parked_question = Negotiation.Status.SETTLED, ""
    publish_on_commit(
        event="negotiation.settled",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload={
            **_event_head(negotiation),
            "outcome": settlement.outcome,
            "basis": settlement.basis,
            "terms": settlement.terms,
            "reason": settlement.reason,
            "endedBy": settlement.ended_by,
        },
    )
    return settlement


def _event_head(negotiation: Negotiation) -> dict[str, Any]:
    """What every negotiation event names: the negotiation, its agent and its direction."""
    return {
        "negotiation": str(negotiation.pk),
        "agent": str(negotiation.agent_id),
        "direction": negotiation.direction,
    }


def _outcome(negotiation: Negotiation) -> str | None:
    """The outcome of the negotiation's settlement, None if it has none."""
    outcome: str | None = (
        Settlement.objects.for_tenant(negotiation.tenant_id)
        .filter(negotiation=negotiation)
        .values_list("outcome", flat=True)
        .first()
    )
    return outcome


def _final_outcome(negotiation: Negotiation) -> str | None:
    """The outcome that settled the negotiation for good; None while it can go on (``unanswered``)."""
    outcome = _outcome(negotiation)
    return None if outcome == Settlement.Outcome.UNANSWERED else outcome


def _refuse_if_closed(negotiation: Negotiation) -> None:
    """Raise :class:`NegotiationClosed` if ``negotiation`` is settled for good."""
    if _final_outcome(negotiation):
        raise NegotiationClosed(f"negotiation on task {negotiation.task_id} is settled; open a new one")


def _evaluate(agent: Agent, negotiation: Negotiation, turns: list[Turn]) -> list[dict[str, Any]]:
    """Ask ``agent``'s evaluation hook about each of ``turns``, in order, and store what it attaches.

    Call it outside any transaction, once the turns are committed: the hook is
    a remote call of up to :data:`evaluation.TIMEOUT` seconds and reads what we
    recorded. A failing hook is logged and leaves the turn's artifact null.
    Returns the artifacts as A2A artifacts ``{"artifactId", "name", "data"}``.
    """
    if not agent.evaluation_url:
        return []
    artifacts = []
    for turn in turns:
        request: evaluation.Request = {
            "negotiation": str(negotiation.pk),
            "agent": str(agent.pk),
            "direction": negotiation.direction,
            "turn": {
                "seq": turn.seq,
                "side": turn.side,
                "action": turn.action,
                "message": turn.message,
                "terms": turn.terms,
                "offerId": turn.offer_id,
                "acceptsOfferId": turn.accepts_offer_id,
            },
            "taskState": turn.task_state,
        }
        try:
            result = evaluation.evaluate(agent.evaluation_url, request)
        except evaluation.EvaluationError as exc:
            logger.warning("evaluating turn %s of negotiation %s: %s", turn.seq, negotiation.pk, exc)
            continue
        Turn.objects.for_tenant(turn.tenant_id).filter(pk=turn.pk).update(
            artifact=result.artifact, updated_at=timezone.now()
        )
        artifacts.append(
            {
                "artifactId": f"{EVALUATION_ARTIFACT}:{turn.seq}",
                "name": EVALUATION_ARTIFACT,
                "data": result.artifact,
            }
        )
    return artifacts


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
        tool_calls.tool_call_complete(
            run=batch.run, tool_call_id=batch.tool_call_id, result=digest.render(events)
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
    return _event_of(negotiation)


def _event_of(negotiation: Negotiation) -> dict[str, Any]:
    """The event the outbound ``negotiation``'s pump reports for the status its turns stopped in:
    ``settled`` (with the settlement), ``asking`` (waiting on the party: the question and their
    last move), ``budget`` (out of turns) or ``failed`` — once a move may have reached them (their
    Task exists, or our opening is stored unanswered), the error says how to retry
    (docs/design.md#one-live-negotiation)."""
    status = negotiation.status
    if status == Negotiation.Status.SETTLED:
        settlement = Settlement.objects.for_tenant(negotiation.tenant_id).get(negotiation=negotiation)
        return {
            **_who(negotiation),
            "kind": "settled",
            "state": negotiation.task_state,
            "settlement": _settlement_view(settlement),
        }
    if status == Negotiation.Status.WAITING:
        return {
            **_who(negotiation),
            "kind": "asking",
            "question": negotiation.parked_question,
            "last": _their_last(negotiation),
        }
    if status == Negotiation.Status.OUT_OF_TURNS:
        return {
            **_who(negotiation),
            "kind": "budget",
            "turns": negotiation.turn_count,
            "last": _their_last(negotiation),
        }
    # Once a move may have reached them: their Task, or our opening sent without an answer.
    reached = negotiation.task_id or negotiation.outbound_move is not None
    retry = " — the exchange stays with them; answer this id to try again" if reached else ""
    return {**_who(negotiation), "kind": "failed", "error": negotiation.error + retry}


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

    enqueue_on_commit(pump, str(negotiation.pk), negotiation.tenant_id)


# Pumps whose broker message was lost.


def stalled_pumps(*, before: datetime) -> list[tuple[str, int]]:
    """``(negotiation id, tenant id)`` of each outbound negotiation whose pump should be taking turns
    and has not moved since ``before``, across tenants, at most :data:`parley.celery.SWEEP_BATCH`,
    stalled longest first.

    That is one with nothing reported to its batch yet, whose run waits on it
    (a run that ended or was cancelled wants no more turns), and whose
    ``updated_at`` — written at every turn — is older than ``before``: one
    still open, or one that stopped (settled, waiting on the party, out of
    turns, failed) while its pump died before reporting it, which the pump sent
    again reports. A pump in the middle of a turn writes nothing until the turn
    is recorded, so ``before`` must be further back than a turn takes (a move's
    model call, then up to ``A2A_SEND_TIMEOUT`` for their answer).

    The rows returned are locked (``FOR UPDATE SKIP LOCKED``): call it in a
    transaction, and a sweep running at the same time skips them.
    """
    rows = (
        Negotiation.across_tenants.filter(
            direction=Negotiation.Direction.OUTBOUND,
            event__isnull=True,
            batch__run__status__in=Run.AWAITING,
            updated_at__lt=before,
        )
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("updated_at")
        .values_list("pk", "tenant_id")[:SWEEP_BATCH]
    )
    return [(str(pk), tenant_id) for pk, tenant_id in rows]


def stalled_pumps_resend() -> list[tuple[str, int]]:
    """Pump again the negotiations whose pump's message was lost (a Redis restart or flush): the
    periodic sweep (Celery beat, every ``SWEEP_INTERVAL`` seconds).

    Sends a pump for each of :func:`stalled_pumps` not moved for
    ``SWEEP_STALLED_AFTER`` seconds and stamps its ``updated_at``, so the next
    sweep waits another bound before sending it again (:func:`parley.celery.stalled_resend`).
    Returns what it found.
    """
    from negotiations.tasks import pump

    return stalled_resend(
        find=lambda before: stalled_pumps(before=before),
        task=pump,
        model=Negotiation,
        what="negotiations' pumps",
    )
