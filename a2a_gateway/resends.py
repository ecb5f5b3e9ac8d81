"""A message sent again gets its Task as it stands, and is applied once.

A counterparty that lost our answer (its worker died, its connection dropped)
sends the same message again: the same ``messageId``, the same move, and, for
a first message, the same ``contextId``. Which messages count as sent again is
the negotiation's rule (:func:`negotiations.services.inbound.inbound_resent`); here the
gateway answers one, before the SDK sees it, with the Task the message was
applied on — from the caller's own partition only, so another caller's reuse
of the ids reaches nothing of it. The rate limit counts it as any message
(:func:`a2a_gateway.caps.message_screen`); nothing else is admitted or written.

The SDK could not do it: it would refuse the message (a used ``messageId``; a
finished Task), or, for a first message, start a new Task and apply the move
there a second time. A message sent again while the first is still being
answered, by this web process or another, waits for that answer
(:mod:`a2a_gateway.claims`), then gets it. Its Task is given once it carries
the reply; one whose answering process stopped after the turn committed is
answered from the record first (:func:`a2a_gateway.abandoned.answer_left`).
"""

from __future__ import annotations

import asyncio
import time

from a2a.server.context import ServerCallContext
from a2a.types import Message, Task, TaskState
from asgiref.sync import sync_to_async
from google.protobuf.json_format import MessageToDict, SerializeToJsonError

from a2a_gateway import abandoned, caps
from a2a_gateway.claims import CLAIM
from a2a_gateway.events import publish_task
from a2a_gateway.store import DjangoTaskStore, call_agent, id_problem
from negotiations.services import inbound

# Seconds between two looks at a Task whose message is applied but whose reply is still being
# written to it.
REPLY_POLL_SECONDS = 0.1
# Seconds the reply of a turn that has ended may take to be written to its Task: with the
# message's claim held no turn of it runs, so a reply still missing after that was left unwritten.
REPLY_WRITE_SECONDS = 2.0


async def resent_task(store: DjangoTaskStore, context: ServerCallContext, message: Message) -> Task | None:
    """The Task ``message`` was already applied on, when it is sent again and that Task is in the
    caller's partition; None otherwise (the SDK then takes it as any message).

    The Task is read once it carries our reply to the message, if it is still
    under way (one answered with the try-again text never gets it). While another
    process may still be answering the message (the caller went on without its
    claim, :class:`a2a_gateway.claims.MessageClaims`), that reply is waited for
    up to the agent's ``turn_timeout``; with the claim held, no turn of it runs,
    so only the write of one that ended is waited for, up to
    :data:`REPLY_WRITE_SECONDS`, after which a Task still
    under way was left by a process that stopped, and is answered from the
    record (:func:`a2a_gateway.abandoned.answer_left`) and published.
    Else the Task is given as it stands. Raises
    :class:`a2a_gateway.errors.Refused` when the rate limit or the size cap
    refuses the message (:func:`a2a_gateway.caps.message_screen`).
    """
    if not (message.task_id or message.context_id):
        return None  # a first message without a contextId is never one sent again (inbound_resent)
    if id_problem(message.task_id) or id_problem(message.context_id):
        return None
    try:
        incoming = MessageToDict(message)
    except SerializeToJsonError:
        return None  # a number JSON cannot hold (NaN, Infinity): the SDK's way refuses it
    agent = call_agent(context)
    found = await sync_to_async(inbound.inbound_resent)(
        agent=agent, task_id=message.task_id, incoming=incoming
    )
    if found is None:
        return None
    task = await store.get(found.task_id, context)
    if task is None:
        return None
    claim = context.state.get(CLAIM)
    claimed = claim is not None and claim.held
    deadline = time.monotonic() + (REPLY_WRITE_SECONDS if claimed else agent.turn_timeout)
    while _awaits_reply(task, found) and time.monotonic() < deadline:
        await asyncio.sleep(REPLY_POLL_SECONDS)
        task = await store.get(found.task_id, context) or task
    if claimed and _awaits_reply(task, found):
        answered = await sync_to_async(abandoned.answer_left)(task.id)
        if answered is not None:
            task = answered
            # Its caller is the counterparty that registers push configs: it has the answer.
            publish_task(task)
    await caps.message_screen(context, message)
    return task


def _awaits_reply(task: Task, found: inbound.Resent) -> bool:
    """Whether the Task, still under way, lacks our recorded reply (a Task answered another way,
    with the try-again text, never gets it)."""
    under_way = TaskState.Name(task.status.state) in abandoned.UNANSWERED
    return under_way and bool(found.reply_id) and found.reply_id not in _message_ids(task)


def _message_ids(task: Task) -> set[str]:
    return {m.message_id for m in task.history} | {task.status.message.message_id}
