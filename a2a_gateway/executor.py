"""The AgentExecutor: an inbound move is answered by the agent's negotiator.

A message without a move (no data part: plain text) is a visitor's question
or request, answered by the agent's representative face instead, when the
agent has one (:func:`a2a_gateway.routing.takes` has the rule).

Replies follow the Index wire (docs/wire-format.md#history): the reply is the
last entry of the Task's history — emitted as a WORKING status message, which
the SDK moves into history — and the final state is the
one our own action stamps. The reply is also the :data:`REPLY_ARTIFACT_ID`
artifact (a client reading either sees it); a terminal reply also carries the
outcome artifact. A new Task is emitted before the turn runs, then WORKING, so
a stream shows the task at once and CancelTask can reach it while the turn
runs; a cancel that lands then leaves the task canceled and the turn's reply
out of it (:func:`_turn`, :func:`cancel_negotiation`).

Whatever ``execute`` raises, a2a-sdk 1.3.0 then stores the task as FAILED —
creating it as FAILED if it was new (``EventConsumer._write_failed_status``).
So a message we refuse is refused before the SDK starts the task, by the
gateway's request context builder with :func:`admit`. ``execute`` still maps
the same errors from ``inbound_turn``: a second message can settle the
negotiation between the check and the turn.

``admit`` and ``execute`` are the public boundary: the SDK would send any
other exception's text to the counterparty, so anything else they raise — a
negotiator error too, whose text can name the party's hidden limit — is logged
here and answered with :data:`COULD_NOT_ANSWER`.

Two refusals follow the Index wire on the 0.3 wire rather than the SDK, which
can give neither their HTTP status nor their code: :class:`Refused` carries
both, and the gateway's edge answers it (``a2a_gateway.app``). They are 409
with -32010 :data:`BUSY`, and 409/-32002 for a task that takes no more messages
(docs/wire-format.md#refusals). On the 1.0 wire the same two come as
the SDK answers every error, with HTTP 200 (a2a-sdk's client reads a JSON-RPC
error only from a 2xx answer): -32010 :data:`BUSY`, and the SDK's own -32004.
A first message about what the agent has closed a deal on is refused -32004
:data:`DEAL_STANDS` on both wires: no retry can succeed, and the Index wire has
no refusal of its own for it (its -32010 says to retry).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from a2a.helpers import get_message_text, new_data_part, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Artifact, Message, Role, Task, TaskState
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, UnsupportedOperationError
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a_gateway import agent_exchange
from a2a_gateway.caps import TURN_RELEASE
from a2a_gateway.claims import CLAIM, Claim, claim_kept, in_background
from a2a_gateway.errors import BUSY_CODE, HTTP_CONFLICT, HTTP_OK, Refused
from a2a_gateway.models import A2ATask
from a2a_gateway.routing import takes
from a2a_gateway.store import call_agent, id_problem, owner_of, stored_task, visitor_history
from agents.models import Agent
from exchange import wire as exchange_wire
from negotiations import receipts
from negotiations.services import inbound
from negotiations.wire import (
    MoveError,
    TaskRecord,
    non_finite,
    nul_path,
    number_text,
    state_name,
    struct_of,
    task_record_from_proto,
    value_of,
)
from representative import answers

logger = logging.getLogger(__name__)
R = TypeVar("R")

COULD_NOT_ANSWER = "The agent could not answer this move."
BUSY = (
    "This agent already has an unfinished negotiation of its own about the same thing; "
    "try again once it has settled."
)
DEAL_STANDS = (
    "This agent has already closed a deal about the same thing, and that deal stands: it takes no new "
    "negotiation about it, so sending again will not help. To discuss the deal, contact the party it "
    "acts for or its host directly."
)
# An Index server refuses a message to a finished task with 409/-32002 (docs/wire-format.md#index-peers).
FINISHED_CODE = -32002
OUTCOME_ARTIFACT_ID = "negotiator:negotiation-outcome"
# The turn's answer (its message's parts), one artifact per task, replaced each turn.
REPLY_ARTIFACT_ID = "negotiator:reply"
# The answer to a turn that runs out of time when the agent's own text is blank.
TRY_AGAIN = str(Agent._meta.get_field("try_again_text").default)
# Where the gateway leaves admit's verdict, in the call context's state: the message is a visitor's.
FOR_VISITOR = "for_visitor"
# The state a reply stamps (negotiations name it in A2A 0.3 words) as a2a-sdk's enum.
STATES = {
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "rejected": TaskState.TASK_STATE_REJECTED,
    "canceled": TaskState.TASK_STATE_CANCELED,
    "failed": TaskState.TASK_STATE_FAILED,
}
FINISHED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


def finished(task_id: str, state: int, *, wire_0_3: bool) -> A2AError:
    """The refusal of a message to the finished task ``task_id``.

    On the 0.3 wire, an Index server's: :class:`Refused` 409/-32002 'Task "<id>" is
    completed and cannot accept further messages. Start a new task to negotiate
    again.'; on 1.0, the SDK's own: UnsupportedOperationError (-32004) "Task <id>
    is in terminal state: TASK_STATE_COMPLETED".
    """
    name = TaskState.Name(state)
    if not wire_0_3:
        return UnsupportedOperationError(message=f"Task {task_id} is in terminal state: {name}")
    return Refused(
        f'Task "{task_id}" is {state_name(name)} and cannot accept further messages. '
        "Start a new task to negotiate again.",
        code=FINISHED_CODE,
    )


async def admit(agent: Agent, message: Message, task_id: str | None, *, wire_0_3: bool = False) -> bool:
    """Refuse ``message`` (to the task ``task_id``, None if new) if ``agent`` cannot take it;
    return whether it is a visitor's (for the representative face) rather than a move.

    The move's rules are :func:`negotiations.services.inbound.inbound_check`'s, checked
    without writing; the rest are what the task's rows can hold. The SDK has
    already looked ``task_id`` up, so it names a stored task. ``wire_0_3``: the
    message came as 0.3 ``message/send`` or ``message/stream``. The gateway
    leaves the verdict in the call context's state under :data:`FOR_VISITOR`,
    where :class:`NegotiationExecutor` reads it: decided once, it cannot change
    between admission and the turn.

    Raises:
        InvalidParamsError: (-32602) "message.role must be user"; the contextId cannot be
            stored: "message.contextId must be at most 200 characters" (or "must not contain
            a NUL character"); no data part, or the first one is not a valid move: "Invalid
            negotiation move: move.action is required"; a NUL anywhere else in the message:
            "message.parts[1].text must not contain a NUL character".
        UnsupportedOperationError: (-32004) the task's negotiation is settled (it can be while
            the task is open, e.g. "unanswered"): "negotiation on task <id> is settled; …";
            on the 0.3 wire :class:`Refused` 409/-32002 with the same message instead.
            :data:`DEAL_STANDS` on either wire, a first message while the agent has closed a
            deal under the intent inbound ones join (``DealStands``).
        Refused: -32010 :data:`BUSY` (HTTP 200 on the 1.0 wire, 409 on 0.3), a first message
            while the agent has an unfinished outbound negotiation under that intent
            (``NegotiationBusy``; both from :func:`negotiations.services.inbound.inbound_check`).
        InternalError: (-32603) :data:`COULD_NOT_ANSWER`, on anything unexpected (logged).

    A message without a negotiation move that :func:`a2a_gateway.routing.takes` is a
    visitor's, checked by that rule instead of the move's (-32602 for a move sent on a
    representative's task).
    """
    # Replies are ours to write; an agent-role message would reach the negotiation as the
    # counterparty's move, and the SDK refuses it only once the turns are written.
    if message.role != Role.ROLE_USER:
        raise InvalidParamsError(message="message.role must be user")
    if problem := id_problem(message.context_id):
        raise InvalidParamsError(message=f"message.contextId {problem}")
    incoming = MessageToDict(message)
    async with _refusals(agent, task_id, wire_0_3=wire_0_3):
        for_visitor = await sync_to_async(_admission)(agent, message, task_id, incoming)
    # The whole message is stored (the turn's raw JSON, the Task), and jsonb holds no NUL.
    if where := nul_path(incoming, "message"):
        raise InvalidParamsError(message=f"{where} must not contain a NUL character")
    return for_visitor


def _admission(agent: Agent, message: Message, task_id: str | None, incoming: dict[str, Any]) -> bool:
    """:func:`admit`'s reads, in one call to the database's thread: whether ``message`` is a
    visitor's (no move, for the representative face: :func:`a2a_gateway.routing.takes`), else its
    move's check (:func:`negotiations.services.inbound.inbound_check`)."""
    if takes(agent=agent, message=message, task_id=task_id):
        return True
    inbound.inbound_check(agent=agent, task_id=task_id or "", incoming=incoming)
    return False


def refuse_non_finite(message: Message) -> None:
    """Refuse ``message`` when a number in it is not finite (NaN, ±Infinity), before anything writes
    it out as JSON, which protobuf refuses to do for such a number.

    Python's JSON reader, and so a2a-sdk's on either protocol version, takes ``NaN``,
    ``Infinity`` and ``-Infinity`` (and ``1e400`` as infinity), which JSON has no words for
    (RFC 8259 §6); the host API refuses the same input as a parse error.

    Raises:
        InvalidParamsError: (-32602) in the move (the first data part of a message that is no
            Agent Exchange message, as :func:`negotiations.services.inbound.inbound_check` reads it):
            "Invalid negotiation move: move.terms.amount must be a finite number, got
            Infinity"; anywhere else: "message.metadata.score must be a finite number, got NaN".
    """
    data_parts = [index for index, part in enumerate(message.parts) if part.HasField("data")]
    move_at = data_parts[0] if data_parts and exchange_wire.EXTENSION_URI not in message.extensions else None
    found = [
        non_finite(value_of(part.data), "move" if index == move_at else f"message.parts[{index}].data")
        or non_finite(struct_of(part.metadata), f"message.parts[{index}].metadata")
        for index, part in enumerate(message.parts)
    ]
    first = next((f for f in found if f), None) or non_finite(struct_of(message.metadata), "message.metadata")
    if first is None:
        return
    where, number = first
    problem = f"{where} must be a finite number, got {number_text(number)}"
    if where.startswith("move"):
        raise InvalidParamsError(message=f"Invalid negotiation move: {problem}")
    raise InvalidParamsError(message=problem)


@asynccontextmanager
async def _refusals(agent: Agent, task_id: str | None, *, wire_0_3: bool = False) -> AsyncIterator[None]:
    """The public boundary: what the negotiation raises, as the A2A error the counterparty gets.

    ``MoveError`` is -32602 "Invalid negotiation move: <why>", ``NegotiationClosed`` -32004
    (409/-32002 on the 0.3 wire), ``DealStands`` -32004 :data:`DEAL_STANDS`,
    ``NegotiationBusy`` -32010 :data:`BUSY` (HTTP 409 on the 0.3 wire, as an Index server
    answers; 200 on 1.0, as the SDK answers), A2A errors pass as they are; anything else (a
    ``NegotiatorError`` too) is logged with the agent and task and answered -32603
    :data:`COULD_NOT_ANSWER`, its text withheld.
    """
    try:
        yield
    except MoveError as exc:
        raise InvalidParamsError(message=f"Invalid negotiation move: {exc}") from exc
    except inbound.DealStands as exc:
        raise UnsupportedOperationError(message=DEAL_STANDS) from exc
    except inbound.NegotiationBusy as exc:
        raise Refused(BUSY, code=BUSY_CODE, status=HTTP_CONFLICT if wire_0_3 else HTTP_OK) from exc
    except inbound.NegotiationClosed as exc:
        if wire_0_3:
            raise Refused(str(exc), code=FINISHED_CODE) from exc
        raise UnsupportedOperationError(message=str(exc)) from exc
    except A2AError:
        raise
    except Exception as exc:
        logger.exception(
            "Agent %s/%s could not answer a move on task %s",
            agent.tenant.slug,
            agent.slug,
            task_id or "(new)",
        )
        raise InternalError(message=COULD_NOT_ANSWER) from exc


class NegotiationExecutor(AgentExecutor):
    """Routes each call to the agent the gateway resolved and lets its negotiator answer."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer the move; -32603 :data:`COULD_NOT_ANSWER` if it cannot (see the module)."""
        agent = call_agent(context.call_context)
        # The message's claim stays held until its turn ends (a2a_gateway.claims.Claim).
        async with claim_kept(context.call_context.state), _refusals(agent, context.task_id):
            reference = context.call_context.state.get(agent_exchange.FOR_EXCHANGE)
            if reference is not None:
                await agent_exchange.answer(agent, context, event_queue, reference)
            else:
                await _answer(agent, context, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if not context.task_id or not context.context_id:
            raise InvalidParamsError(message="The request names no task.")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def _answer(agent: Agent, context: RequestContext, event_queue: EventQueue) -> None:
    """Let ``agent``'s negotiator answer the message and emit the reply and final state."""
    if context.message is None or not context.task_id or not context.context_id:
        raise InvalidParamsError(message="The request carries no message.")
    # The representative face: a visitor's message without a move, as admit found it.
    if context.call_context.state.get(FOR_VISITOR):
        await _answer_visitor(
            agent, context, event_queue, message=context.message, ids=(context.task_id, context.context_id)
        )
        return
    prior, incoming = _prior(context), MessageToDict(context.message)
    # The Task first: it then exists while the turn runs, for GetTask, CancelTask and a stream.
    if context.current_task is None:
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
    updater = TaskUpdater(event_queue, context.task_id, context.context_id)
    await updater.start_work()
    turn = _in_turn_thread(_turn)(
        agent=agent,
        task_id=context.task_id,
        context_id=context.context_id,
        prior=prior,
        incoming=incoming,
        activated=settlement_signatures_activated(context),
    )
    reply = await _answered_in_time(agent, context, updater, turn)
    if reply is None:
        return
    message = ParseDict(reply.message, Message())
    await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
    for artifact in [*reply_artifacts(reply, message), *evaluation_artifacts(reply)]:
        await updater.add_artifact(list(artifact.parts), artifact_id=artifact.artifact_id, name=artifact.name)
    await updater.update_status(STATES[reply.state])


def settlement_signatures_activated(context: RequestContext) -> bool:
    """Whether the request activates the settlement-signature extension as A2A activates one: named
    in the ``A2A-Extensions`` header and listed in ``message.extensions``
    (docs/settlement-signatures.md)."""
    uri = receipts.SETTLEMENT_EXTENSION
    return (
        context.message is not None
        and uri in context.call_context.requested_extensions
        and uri in context.message.extensions
    )


def reply_artifacts(reply: inbound.InboundReply, message: Message) -> list[Artifact]:
    """The artifacts our reply ``message`` puts on its Task: itself as :data:`REPLY_ARTIFACT_ID`,
    replaced each turn, for clients that read only artifacts; and, when it ends the Task, the
    outcome as :data:`OUTCOME_ARTIFACT_ID` ``{state, status, basis, reason, terms?}``."""
    artifacts = [Artifact(artifact_id=REPLY_ARTIFACT_ID, name="reply", parts=list(message.parts))]
    # On terminal replies only, as the Index peer does (docs/wire-format.md#artifacts): an
    # open task can carry a settlement ("unanswered"), but its verdict is still "open".
    if reply.settlement is not None and STATES[reply.state] in FINISHED:
        s = reply.settlement
        outcome = {"state": reply.state, "status": s.outcome, "basis": s.basis, "reason": s.reason}
        if s.terms:
            outcome["terms"] = s.terms
        artifacts.append(
            Artifact(
                artifact_id=OUTCOME_ARTIFACT_ID, name="negotiation-outcome", parts=[new_data_part(outcome)]
            )
        )
    return artifacts


def evaluation_artifacts(reply: inbound.InboundReply) -> list[Artifact]:
    """What the agent's evaluation hook attached to the turn's moves, one data part each."""
    return [
        Artifact(artifact_id=a["artifactId"], name=a["name"], parts=[new_data_part(a["data"])])
        for a in reply.artifacts
    ]


async def _answer_visitor(
    agent: Agent, context: RequestContext, event_queue: EventQueue, *, message: Message, ids: tuple[str, str]
) -> None:
    """Let ``agent``'s representative answer a visitor's message (:mod:`representative.answers`).

    The answer contract and the reply's shape are a move's: one reply in time
    (else the try-again text), as the last history entry and the
    :data:`REPLY_ARTIFACT_ID` artifact. The task then ends COMPLETED: a further
    question is a new task in the same context, which sees this one as history.
    The turn's model usage is ``reply.usage``. ``message`` and ``ids`` (task id, context id)
    are ``context``'s, checked present.
    """
    task_id, context_id = ids
    if context.current_task is None:
        await event_queue.enqueue_event(new_task_from_user_message(message))
    updater = TaskUpdater(event_queue, task_id, context_id)
    await updater.start_work()
    turn = _in_turn_thread(_visitor_turn)(
        agent=agent,
        text=get_message_text(message),
        caller=owner_of(context.call_context),
        context_id=context_id,
        task_id=task_id,
    )
    reply = await _answered_in_time(agent, context, updater, turn)
    if reply is None:
        return
    answer = updater.new_agent_message([new_text_part(reply.text)])
    await updater.update_status(TaskState.TASK_STATE_WORKING, message=answer)
    await updater.add_artifact(list(answer.parts), artifact_id=REPLY_ARTIFACT_ID, name="reply")
    await updater.complete()


def _visitor_turn(
    *, agent: Agent, text: str, caller: str, context_id: str, task_id: str
) -> answers.Reply | None:
    """:func:`representative.answers.visitor_turn`, given the caller's earlier exchanges of the context
    (:func:`a2a_gateway.store.visitor_history`); None if the task was canceled while it ran.
    Runs in a thread of :func:`turn_pool`, whose database connection it closes."""
    try:
        history = visitor_history(agent=agent, caller=caller, context_id=context_id, task_id=task_id)
        reply = answers.visitor_turn(agent=agent, text=text, caller=caller, history=history)
        tasks = A2ATask.objects.for_tenant(agent.tenant_id).filter(task_id=task_id, agent=agent)
        if tasks.filter(state=TaskState.Name(TaskState.TASK_STATE_CANCELED)).exists():
            return None
        return reply
    finally:
        connections.close_all()


@functools.cache
def turn_pool() -> ThreadPoolExecutor:
    """This process's threads for turns, ``settings.A2A_TURN_THREADS`` of them (made on first use).

    A turn is mostly waiting on its model (seconds to minutes), so it gets a thread of its
    own, and enough of them that turns at once do not wait for each other: not asgiref's one
    thread that every ORM call of the gateway waits for (a CancelTask is answered while the
    turn runs), nor asyncio's default executor, which has min(32, cores + 4) threads — 6 on
    two cores, where the seventh turn at once waited a whole model call for a thread. A turn
    that finds every thread taken waits for one, on its ``turn_timeout``.
    """
    return ThreadPoolExecutor(max_workers=settings.A2A_TURN_THREADS, thread_name_prefix="turn")


def _in_turn_thread(work: Callable[..., R]) -> Callable[..., Awaitable[R]]:
    """``work`` as a coroutine function run in :func:`turn_pool`; ``work`` closes its thread's
    database connection before it returns (threads outlive turns)."""
    return sync_to_async(work, thread_sensitive=False, executor=turn_pool())


async def _answered_in_time(
    agent: Agent, context: RequestContext, updater: TaskUpdater, turn: Awaitable[R | None]
) -> R | None:
    """``turn``'s reply, or None once the task has had its answer another way: the try-again
    text when the turn ran out of time (the answer contract), or canceled when the turn found
    its task canceled by a call to another web process (end as that process wrote it)."""
    try:
        reply = await _in_time(
            agent,
            turn,
            release=context.call_context.state.pop(TURN_RELEASE, None),
            claim=context.call_context.state.get(CLAIM),
        )
    except TimeoutError:
        await _try_again(agent, updater)
        return None
    if reply is None:
        await updater.cancel()
    return reply


async def _in_time(
    agent: Agent,
    turn: Awaitable[R],
    *,
    release: Callable[[], Awaitable[None]] | None,
    claim: Claim | None = None,
) -> R:
    """``turn``'s result, awaited at most ``agent.turn_timeout`` seconds (the answer contract);
    ``release`` (the turn's concurrency slot, :mod:`a2a_gateway.caps`) once its work ends.

    Raises TimeoutError after that time. The turn cannot be interrupted: it goes
    on, keeps its slot and its message's ``claim`` until it ends, and its late failure is logged.
    """

    async def whole() -> R:
        try:
            return await turn
        finally:
            if release is not None:
                await release()

    work = asyncio.ensure_future(whole())
    try:
        return await asyncio.wait_for(asyncio.shield(work), timeout=agent.turn_timeout)
    except (TimeoutError, asyncio.CancelledError):
        _outlive(work, agent, claim)
        raise


# Turns that outlasted their answer, referenced until they end.
_overrunning: set[asyncio.Future[Any]] = set()


def _outlive(work: asyncio.Future[Any], agent: Agent, claim: Claim | None) -> None:
    _overrunning.add(work)
    if claim is not None:
        claim.keep()

    def ended(future: asyncio.Future[Any]) -> None:
        _overrunning.discard(future)
        if claim is not None:
            in_background(claim.let_go())
        if not future.cancelled() and (exc := future.exception()) is not None:
            logger.warning(
                "A turn of agent %s/%s that outlasted its answer failed",
                agent.tenant.slug,
                agent.slug,
                exc_info=exc,
            )

    work.add_done_callback(ended)


def try_again_text(agent: Agent) -> str:
    """What ``agent`` answers a message whose turn did not end in time: its own text, or :data:`TRY_AGAIN`."""
    return agent.try_again_text.strip() or TRY_AGAIN


async def _try_again(agent: Agent, updater: TaskUpdater) -> None:
    """The answer to a turn that outlasts ``agent.turn_timeout``: the agent's try-again text as
    the reply (history and artifact, like any reply), input-required, so the counterparty may
    send again on the same task."""
    message = updater.new_agent_message([new_text_part(try_again_text(agent))])
    await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
    await updater.add_artifact(list(message.parts), artifact_id=REPLY_ARTIFACT_ID, name="reply")
    await updater.update_status(TaskState.TASK_STATE_INPUT_REQUIRED)


def _turn(
    *,
    agent: Agent,
    task_id: str,
    context_id: str,
    prior: TaskRecord,
    incoming: dict[str, Any],
    activated: bool,
) -> inbound.InboundReply | None:
    """:func:`negotiations.inbound.inbound_turn_unless_canceled`, told of a cancel by the stored
    Task; None if the task was canceled while it ran (:func:`cancel_negotiation` is the other
    half). Runs in a thread of :func:`turn_pool`, whose database connection it closes.
    """

    def canceled_meanwhile() -> frozenset[str] | None:
        canceled = (
            A2ATask.objects.for_tenant(agent.tenant_id)
            .filter(task_id=task_id, agent=agent, state=TaskState.Name(TaskState.TASK_STATE_CANCELED))
            .first()
        )
        return None if canceled is None else _message_ids(stored_task(canceled))

    try:
        return inbound.inbound_turn_unless_canceled(
            agent=agent,
            task_id=task_id,
            context_id=context_id,
            prior=prior,
            incoming=incoming,
            canceled_meanwhile=canceled_meanwhile,
            activated=activated,
        )
    finally:
        connections.close_all()


async def cancel_negotiation(agent: Agent, task: Task) -> None:
    """End the negotiation of ``task``, which a caller has just canceled (CancelTask), as ``task`` shows it.

    :func:`negotiations.services.inbound.inbound_cancel` over the canceled Task's messages.
    """
    await sync_to_async(inbound.inbound_cancel)(agent=agent, task_id=task.id, delivered=_message_ids(task))


def _message_ids(task: Task) -> frozenset[str]:
    """The ids of the messages ``task`` holds: its history and its status message."""
    ids = {m.message_id for m in task.history}
    if task.status.HasField("message"):
        ids.add(task.status.message.message_id)
    return frozenset(ids)


def _prior(context: RequestContext) -> TaskRecord:
    """The Task as it stood before this message (the SDK may already have appended it)."""
    task = context.current_task
    if task is None:
        return TaskRecord(state="submitted", history=())
    record = task_record_from_proto(task)
    history = list(task.history)
    if history and context.message is not None and history[-1].message_id == context.message.message_id:
        return TaskRecord(state=record.state, history=record.history[:-1])
    return record
