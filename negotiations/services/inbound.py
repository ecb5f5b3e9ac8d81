"""Inbound turns: the counterparty's moves on our agent's Tasks, as the A2A gateway hands them over.

The gateway asks :func:`inbound_resent` and :func:`inbound_check` before the
SDK sets up a task, then calls :func:`inbound_turn` once per counterparty move.
:func:`inbound_cancel` settles the negotiation when they cancel the Task, and
:func:`inbound_reply_decided` decides our reply as soon as our party answered a
negotiation parked on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from agents.models import Agent, Intent
from negotiations import negotiator, selectors
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.rules import check_move
from negotiations.selectors import move_of
from negotiations.services import parking, recording, signatures
from negotiations.wire import Entry, Move, MoveError, TaskRecord, parse_move

# Our reply to a move while the negotiation waits on our party: the seed's inbound ``ask`` kept off
# the wire (docs/wire-format.md#vocabulary). Text only, so it carries no move and both sides' verdicts
# pass over it (#verdict, step 2); a reader of history sees the text (#reading-a-move).
HOLDING_TEXT = (
    "I am consulting the party I act for before I answer. Send your next message on this task later, "
    "or register a push notification config on it to get my answer as soon as it is decided."
)
HOLDING = Entry(role="agent", move=None, text=HOLDING_TEXT)


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
    if recording.outcome_of(bound) in Settlement.DEALS:
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
    *,
    agent: Agent,
    task_id: str,
    context_id: str,
    prior: TaskRecord,
    incoming: dict[str, Any],
    activated: bool = False,
) -> InboundReply:
    """Answer one inbound move ``incoming`` (an A2A 1.0 JSON Message) on the Task ``prior``.

    A negotiator's ``ask`` is for the party, never the wire: the negotiation
    parks waiting on the party with the question, and the counterparty gets
    the holding reply (:data:`HOLDING_TEXT` as one text part, no move, the task
    ``input-required``). While it waits, their further moves get the holding
    reply again, undecided; once the party answers, the next reply is decided
    with that guidance (:func:`parking.negotiation_guidance_give`).

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

    ``activated``: the request activated the settlement-signature extension (the edge read its
    ``A2A-Extensions`` header and ``incoming``'s extensions). Then a reply that closes the Task
    agreed is signed (:func:`signatures.inbound_sealed`), and once the turn is committed the
    settlement records whether both sides signed it (:func:`signatures.settlement_countersign`).
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
    sealed = signatures.inbound_sealed(
        agent, final=final, ids=(task_id, context_id), reply=reply, incoming=incoming, activated=activated
    )
    reply = sealed.reply
    with transaction.atomic():
        if negotiation is None and intent is not None:
            # The gateway refused this at admission; check again under the intent's lock, which
            # batches.batch_open holds while it claims, so an outbound open at the same instant loses.
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
        negotiation.agent = agent  # the row names this agent: spare each turn's event a query for it
        # Another message on this task may have closed it since the check above, or applied this
        # very message (the same message sent again, to another web process).
        _refuse_if_closed(negotiation)
        _refuse_replays(negotiation, incoming.get("messageId", ""), their_move)
        known = negotiation.turns.count()
        turns = [
            recording.add_turn(
                negotiation, known + 1, record.history[-1], incoming, our_role="agent", state=state
            ),
            recording.add_turn(
                negotiation, known + 2, final.history[-1], reply, our_role="agent", state=state, usage=usage
            ),
        ]
        recording.add_usage(negotiation, usage)
        negotiation.task_state = state
        negotiation.turn_count = _our_moves(final)
        # The status follows this exchange: our ask parks it, a decided move leaves it open until
        # recording.settlement_save finds that a side closed, and a holding reply to a parked one
        # leaves it as it is (the party may have answered meanwhile).
        if asked:
            assert move is not None
            parking.park(negotiation, move.message)
        elif not parked:
            negotiation.status, negotiation.parked_question = Negotiation.Status.OPEN, ""
        negotiation.counterparty_identity = sealed.identity
        settlement = recording.settlement_save(negotiation, final, our_role="agent")
        negotiation.save()
    if settlement is not None:
        signatures.settlement_countersign(negotiation)
    artifacts = recording.evaluate(agent, negotiation, turns)
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
            recording.spend(negotiation, exc.usage, None)
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
        recording.settlement_save(
            negotiation, TaskRecord(state="canceled", history=history), our_role="agent"
        )
        negotiation.save(update_fields=["task_state", "parked_question", "status", "updated_at"])


def inbound_turn_unless_canceled(
    *,
    agent: Agent,
    task_id: str,
    context_id: str,
    prior: TaskRecord,
    incoming: dict[str, Any],
    canceled_meanwhile: Callable[[], frozenset[str] | None],
    activated: bool = False,
) -> InboundReply | None:
    """:func:`inbound_turn`, then the cancel that landed while it ran: its reply, or None when the
    counterparty canceled the Task meanwhile.

    The turn cannot be interrupted. Once it has committed, ``canceled_meanwhile()``
    says whether the Task was canceled while it ran: None if not, else the ids of
    the messages the canceled Task holds (the gateway's stored Task). A cancel that
    came meanwhile is applied to the negotiation here (:func:`inbound_cancel` over
    those messages; the gateway applies it too, after cancelling: whichever comes
    second sees the turn committed), and the turn's reply reaches no one. Raises
    what :func:`inbound_turn` raises; ``activated`` is its own.
    """
    reply = inbound_turn(
        agent=agent,
        task_id=task_id,
        context_id=context_id,
        prior=prior,
        incoming=incoming,
        activated=activated,
    )
    delivered = canceled_meanwhile()
    if delivered is None:
        return reply
    inbound_cancel(agent=agent, task_id=task_id, delivered=delivered)
    return None


class TaskMovedOn(Exception):
    """Raised by a ``put`` of :func:`inbound_reply_decided`: the Task no longer ends with our holding
    reply, so the reply decided for it is not kept."""


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
    holding = parking.holding_turn(negotiation) if negotiation is not None else None
    if negotiation is None or holding is None:
        return None
    record = TaskRecord(state="working", history=prior.history)
    decision = _inbound_decide(agent, negotiation, record, negotiation.intent)
    move = decision.move
    ours = Entry(role="agent", move=move)
    state = _reply_state(agent, ours)
    reply = _reply_message(task_id, negotiation.context_id, ours)
    # Their message was taken when the holding reply went out; it activated the extension then.
    theirs = negotiation.turns.filter(side=Turn.Side.THEIRS).order_by("-seq").first()
    incoming = theirs.raw if theirs is not None else {}
    sealed = signatures.inbound_sealed(
        agent,
        final=TaskRecord(state=state, history=(*record.history, ours)),
        ids=(task_id, negotiation.context_id),
        reply=reply,
        incoming=incoming,
        activated=signatures.activated_in(incoming),
    )
    reply = sealed.reply
    try:
        with transaction.atomic():
            negotiation = (
                Negotiation.objects.for_tenant(agent.tenant_id)
                .select_for_update()
                .select_related("agent")
                .get(pk=negotiation.pk)
            )
            # Under the lock: a message of theirs may have been answered since the decision.
            if parking.holding_turn(negotiation) != holding:
                return None
            recording.add_usage(negotiation, decision.usage)
            if move.action == negotiator.ASK:
                parking.park(negotiation, move.message)
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
            turn = recording.add_turn(
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
            negotiation.counterparty_identity = sealed.identity
            settlement = recording.settlement_save(negotiation, final, our_role="agent")
            negotiation.save()
            put(InboundReply(message=reply, state=state, settlement=settlement))
    except TaskMovedOn:
        return None
    if settlement is not None:
        signatures.settlement_countersign(negotiation)
    artifacts = recording.evaluate(agent, negotiation, [turn])
    return InboundReply(message=reply, state=state, settlement=settlement, artifacts=artifacts)


def _refuse_if_closed(negotiation: Negotiation) -> None:
    """Raise :class:`NegotiationClosed` if ``negotiation`` is settled for good."""
    if recording.final_outcome(negotiation):
        raise NegotiationClosed(f"negotiation on task {negotiation.task_id} is settled; open a new one")
