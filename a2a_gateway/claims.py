"""One message at a time per caller and Task, across every web process: a message's claim.

A message sent again while the first is still being answered, by this web process or another,
must wait for that answer and then get it (:mod:`a2a_gateway.resends`), not be applied a second
time. So the gateway answers each message under its claim (:class:`MessageClaims`): one per caller
and Task, or per caller and context for a first message. The claim is held until the request that
took it and the turn it started have both let it go (:class:`Claim`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from a2a.server.context import ServerCallContext
from a2a.types import Message
from asgiref.sync import sync_to_async

from a2a_gateway.store import call_agent, owner_of
from parley import locks

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds between two tries at a message's claim that another process holds.
CLAIM_POLL_SECONDS = 0.1
# Seconds a message waits for its claim beyond the agent's turn_timeout: the time to store the
# answer of a turn that ran out of time.
CLAIM_GRACE_SECONDS = 10.0
# Where the gateway leaves a message's Claim, in the call context's state, for the turn to keep.
CLAIM = "message_claim"


class KeyedLocks:
    """asyncio locks by key, each kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    async def acquire(self, key: Hashable) -> None:
        """Wait for the lock of ``key`` and take it."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._drop(key)
            raise

    def release(self, key: Hashable) -> None:
        """Release the lock of ``key``, which the caller took."""
        self._locks[key][0].release()
        self._drop(key)

    def _drop(self, key: Hashable) -> None:
        lock, users = self._locks[key]
        if users == 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)


class Claim:
    """A message's claim, held while the request that took it and the turn it started both hold it.

    The request holds it from :meth:`MessageClaims.take`; the turn keeps it (:meth:`keep`) before its
    first event, so a request answered early (``returnImmediately``, a stream whose client left)
    cannot free it while the turn runs. Each holder calls :meth:`let_go` once; the last frees it.
    """

    def __init__(self, release: Callable[[], Awaitable[None]], *, held: bool) -> None:
        self._holders = 1
        self._release = release
        # Whether every process is kept out (False: the message went on without the claim).
        self.held = held

    def keep(self) -> None:
        """One more holder: the turn, while it runs."""
        self._holders += 1

    async def let_go(self) -> None:
        """This holder is done; the last one frees the claim. Freeing runs to its end as a task of
        its own even when the caller is being cancelled (a stream whose client left), so no claim
        stays held on a connection that outlives the request."""
        self._holders -= 1
        if self._holders == 0:
            await asyncio.shield(in_background(self._release()))


@asynccontextmanager
async def claim_kept(state: MutableMapping[str, Any]) -> AsyncIterator[Claim | None]:
    """Keep the message's claim, if the call context's ``state`` carries one, for the block."""
    claim = state.get(CLAIM)
    if claim is None:
        yield None
        return
    claim.keep()
    try:
        yield claim
    finally:
        await claim.let_go()


# Work that must finish though its caller was cancelled, referenced until it ends.
_background: set[asyncio.Future[Any]] = set()


def in_background(work: Awaitable[T]) -> asyncio.Future[T]:
    """``work`` as a task that runs to its end whoever awaits it (in the current context, so on the
    request's gateway lane); a failure is logged."""
    future = asyncio.ensure_future(work)
    _background.add(future)

    def ended(done: asyncio.Future[Any]) -> None:
        _background.discard(done)
        if not done.cancelled() and done.exception() is not None:
            logger.error("a message claim could not be freed", exc_info=done.exception())

    future.add_done_callback(ended)
    return future


class MessageClaims:
    """One message at a time per claim (:func:`claim_name`), in this web process and across all.

    In this process a :class:`KeyedLocks`; across processes a lock of :func:`parley.locks.try_take`
    (on Postgres a session advisory lock on the request's gateway lane connection), tried every
    :data:`CLAIM_POLL_SECONDS` while another process holds it. Postgres frees that lock when its
    holder's connection ends, so a web process killed mid-turn holds up no one. A message that
    has waited the agent's ``turn_timeout`` + :data:`CLAIM_GRACE_SECONDS` goes on without the
    claim (logged): the turn's own checks under the negotiation's row lock still refuse a used
    ``messageId`` on its Task.
    """

    def __init__(self) -> None:
        self._here = KeyedLocks()

    @asynccontextmanager
    async def hold(self, context: ServerCallContext, message: Message) -> AsyncIterator[None]:
        """Answer ``message`` under its claim (none for a first message without a ``contextId``):
        taken for the block, and left in ``context``'s state (:data:`CLAIM`) for the turn to keep
        (:func:`claim_kept`)."""
        name = claim_name(context, message)
        if name is None:
            yield
            return
        claim = await self.take(name, wait_seconds=call_agent(context).turn_timeout + CLAIM_GRACE_SECONDS)
        context.state[CLAIM] = claim
        try:
            yield
        finally:
            await claim.let_go()

    async def take(self, name: str, *, wait_seconds: float) -> Claim:
        """The claim ``name``, once this process's holder and any other process's have let it go,
        or ``wait_seconds`` have passed (a claim not ``held``, which keeps no one out)."""
        deadline = time.monotonic() + wait_seconds
        try:
            await asyncio.wait_for(self._here.acquire(name), timeout=wait_seconds)
        except TimeoutError:
            logger.warning("went on without the claim %s after %.0f s", name, wait_seconds)
            return Claim(_nothing, held=False)
        try:
            held = await _claim(name, deadline)
        except BaseException:
            self._here.release(name)
            raise

        async def release() -> None:
            try:
                if held:
                    await sync_to_async(locks.give_back)(name)
            finally:
                self._here.release(name)

        return Claim(release, held=held)


async def _nothing() -> None:
    """The release of a claim that was not taken."""


async def _claim(name: str, deadline: float) -> bool:
    """Take the lock ``name``, trying until the ``time.monotonic()`` ``deadline``; whether taken. A
    try the caller's cancellation cut short is finished, and what it took given back."""
    while True:
        attempt = in_background(sync_to_async(locks.try_take)(name))
        try:
            if await asyncio.shield(attempt):
                return True
        except asyncio.CancelledError:
            in_background(_give_back_if_taken(attempt, name))
            raise
        if time.monotonic() >= deadline:
            logger.warning("went on without the claim %s: another process holds it", name)
            return False
        await asyncio.sleep(CLAIM_POLL_SECONDS)


async def _give_back_if_taken(attempt: asyncio.Future[bool], name: str) -> None:
    if await attempt:
        await sync_to_async(locks.give_back)(name)


def claim_name(context: ServerCallContext, message: Message) -> str | None:
    """The claim ``message`` is answered under (:class:`MessageClaims`): its caller's partition and
    its Task, or, for a first message, its context; None for a first message without a
    ``contextId``, which cannot be told from another."""
    return _name(owner_of(context), task_id=message.task_id, context_id=message.context_id)


def task_claimed(*, owner: str, task_id: str, context_id: str) -> bool:
    """Whether some web process answers a message of the Task ``task_id`` (of the partition
    ``owner``, in the context ``context_id``) now: a follow-up's claim or a first message's."""
    names = [_name(owner, task_id=task_id), _name(owner, context_id=context_id)]
    return any(locks.holder_exists(name) for name in names if name is not None)


def _name(owner: str, *, task_id: str = "", context_id: str = "") -> str | None:
    if task_id:
        return f"a2a-message|{owner}|task|{task_id}"
    if context_id:
        return f"a2a-message|{owner}|context|{context_id}"
    return None
