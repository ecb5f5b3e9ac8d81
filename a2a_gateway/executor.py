"""The AgentExecutor: an inbound move is answered by the agent's negotiator.

Replies follow the Index wire (index-wire-protocol.md §1): the reply is the
last entry of the Task's history — emitted as a WORKING status message, which
the SDK moves into history (a2a-sdk-brief.md §9) — and the final state is the
one our own action stamps. A terminal reply also carries the outcome artifact.

Whatever ``execute`` raises, a2a-sdk 1.3.0 then stores the task as FAILED —
creating it as FAILED if it was new (``EventConsumer._write_failed_status``).
So a message we refuse is refused before the SDK starts the task, by the
gateway's request context builder with :func:`admit`. ``execute`` still maps
the same errors from ``inbound_turn``: a second message can settle the
negotiation between the check and the turn.
"""

from __future__ import annotations

from a2a.helpers import new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, TaskState
from a2a.utils.errors import InternalError, InvalidParamsError, UnsupportedOperationError
from asgiref.sync import sync_to_async
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a_gateway.store import call_agent
from agents.models import Agent
from negotiations import services
from negotiations.negotiator import NegotiatorError
from negotiations.wire import MoveError, TaskRecord, task_record_from_proto

OUTCOME_ARTIFACT_ID = "negotiator:negotiation-outcome"
_STATES = {
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


async def admit(agent: Agent, message: Message, task_id: str | None) -> None:
    """Refuse ``message`` (to the task ``task_id``, None if new) if ``agent`` cannot take it.

    The rules are :func:`negotiations.services.inbound_turn`'s, checked without writing.

    Raises:
        InvalidParamsError: (-32602) no data part, or the first one is not a valid move:
            "Invalid negotiation move: move.action is required".
        UnsupportedOperationError: (-32004) the task's negotiation is settled (it can be while
            the task is open, e.g. "unanswered"): "negotiation on task <id> is settled; …".
    """
    try:
        await sync_to_async(services.inbound_check)(
            agent=agent, task_id=task_id or "", incoming=MessageToDict(message)
        )
    except MoveError as exc:
        raise InvalidParamsError(message=f"Invalid negotiation move: {exc}") from exc
    except services.NegotiationClosed as exc:
        raise UnsupportedOperationError(message=str(exc)) from exc


class NegotiationExecutor(AgentExecutor):
    """Routes each call to the agent the gateway resolved and lets its negotiator answer."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        agent = call_agent(context.call_context)
        if context.message is None or not context.task_id or not context.context_id:
            raise InvalidParamsError(message="The request carries no message.")
        incoming = MessageToDict(context.message)
        try:
            reply = await sync_to_async(services.inbound_turn)(
                agent=agent,
                task_id=context.task_id,
                context_id=context.context_id,
                prior=_prior(context),
                incoming=incoming,
            )
        except MoveError as exc:
            raise InvalidParamsError(message=f"Invalid negotiation move: {exc}") from exc
        except services.NegotiationClosed as exc:
            raise UnsupportedOperationError(message=str(exc)) from exc
        except NegotiatorError as exc:
            raise InternalError(message=f"The agent could not decide a move: {exc}") from exc

        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.update_status(TaskState.TASK_STATE_WORKING, message=ParseDict(reply.message, Message()))
        state = _STATES[reply.state]
        # On terminal replies only, as the Index peer does (index-wire-protocol.md §1, step 7): an
        # open task can carry a settlement ("unanswered"), but its verdict is still "open".
        if reply.settlement is not None and state in FINISHED:
            s = reply.settlement
            outcome = {
                "state": reply.state,
                "status": s.outcome,
                "basis": s.basis,
                "reason": s.reason,
            }
            if s.terms:
                outcome["terms"] = s.terms
            await updater.add_artifact(
                [new_data_part(outcome)],
                artifact_id=OUTCOME_ARTIFACT_ID,
                name="negotiation-outcome",
            )
        await updater.update_status(state)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if not context.task_id or not context.context_id:
            raise InvalidParamsError(message="The request names no task.")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


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
