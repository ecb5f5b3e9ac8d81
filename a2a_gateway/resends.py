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
(:class:`MessageClaims`: one message at a time per caller and Task, or per caller
and context for a first message), then gets it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

from a2a.server.context import ServerCallContext
from a2a.types import Message, Task
from asgiref.sync import sync_to_async
from google.protobuf.json_format import MessageToDict, SerializeToJsonError

from a2a_gateway import caps
from a2a_gateway.store import DjangoTaskStore, call_agent, id_problem, owner_of
from negotiations.services import inbound
from parley import locks

logger = logging.getLogger(__name__)

# Seconds between two looks at a Task whose message is applied but whose reply another process
# is still writing to it, and between two tries at a message's claim that another process holds.
REPLY_POLL_SECONDS = 0.1
# Seconds a message waits for its claim beyond the agent's turn_timeout: the time to store the
# answer of a turn that ran out of time.
CLAIM_GRACE_SECONDS = 10.0


class KeyedLocks:
    """asyncio locks by key, each kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable | None) -> AsyncIterator[None]:
        """Hold the lock of ``key`` for the block (no lock at all for None)."""
        if key is None:
            yield
            return
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class MessageClaims:
    """One message at a time per claim (:func:`claim_name`), in this web process and across all.

    In this process a :class:`KeyedLocks`; across processes, on Postgres, a session advisory lock
    on the request's gateway lane connection (:func:`parley.locks.try_take`), tried every
    :data:`REPLY_POLL_SECONDS` while another process holds it. Postgres frees that lock when its
    holder's connection ends, so a web process killed mid-turn holds up no one. A message that
    has waited the agent's ``turn_timeout`` + :data:`CLAIM_GRACE_SECONDS` goes on without the
    claim (logged): the turn's own checks under the negotiation's row lock still refuse a used
    ``messageId`` on its Task.
    """

    def __init__(self) -> None:
        self._here = KeyedLocks()

    @asynccontextmanager
    async def hold(self, name: str | None, *, wait_seconds: float) -> AsyncIterator[None]:
        """Hold the claim ``name`` for the block (none at all for None), waiting at most
        ``wait_seconds`` for another process's holder."""
        async with self._here.hold(name):
            if name is None or not locks.shared():
                yield
                return
            held = await _claim(name, wait_seconds)
            try:
                yield
            finally:
                if held:
                    await sync_to_async(locks.give_back)(name)


async def _claim(name: str, wait_seconds: float) -> bool:
    """Take the advisory lock ``name``, trying until ``wait_seconds`` have passed; whether taken."""
    deadline = time.monotonic() + wait_seconds
    while not await sync_to_async(locks.try_take)(name):
        if time.monotonic() >= deadline:
            logger.warning("went on without the claim %s after %.0f s", name, wait_seconds)
            return False
        await asyncio.sleep(REPLY_POLL_SECONDS)
    return True


def claim_name(context: ServerCallContext, message: Message) -> str | None:
    """The claim ``message`` is answered under (:class:`MessageClaims`): its caller's partition and
    its Task, or, for a first message, its context; None for a first message without a
    ``contextId``, which cannot be told from another."""
    if message.task_id:
        return f"a2a-message|{owner_of(context)}|task|{message.task_id}"
    if message.context_id:
        return f"a2a-message|{owner_of(context)}|context|{message.context_id}"
    return None


def claim_wait_seconds(context: ServerCallContext) -> float:
    """How long a message waits for its claim: the longest another process's answer to it can take."""
    return call_agent(context).turn_timeout + CLAIM_GRACE_SECONDS


async def resent_task(store: DjangoTaskStore, context: ServerCallContext, message: Message) -> Task | None:
    """The Task ``message`` was already applied on, when it is sent again and that Task is in the
    caller's partition; None otherwise (the SDK then takes it as any message).

    The Task is read once it carries our reply to the message: a reply another
    web process is still writing is waited for, up to the agent's
    ``turn_timeout``, after which the Task is given as it stands. Raises
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
    deadline = time.monotonic() + agent.turn_timeout
    while found.reply_id and found.reply_id not in _message_ids(task) and time.monotonic() < deadline:
        await asyncio.sleep(REPLY_POLL_SECONDS)
        task = await store.get(found.task_id, context) or task
    await caps.message_screen(context, message)
    return task


def _message_ids(task: Task) -> set[str]:
    return {m.message_id for m in task.history} | {task.status.message.message_id}
