"""Caps on an agent's public endpoint, checked when a message is admitted.

The gateway's request context builder (``a2a_gateway.app.InboundContextBuilder``)
calls :func:`message_screen` first and :func:`turn_admit` last, both before
the SDK starts the task, so a refused message writes no Task, negotiation or
turn. In order:

==========================  =====  ======  ==========================================  =======
cap                         HTTP   code    refusal                                     counted
==========================  =====  ======  ==========================================  =======
``rate_limit`` per caller   429    -32010  ``Retry-After``: when the oldest counted    no
                                           message leaves the window
``max_input_chars``         200    -32602  the message's size and the limit            yes
``Tenant.model_budget``     429    -32010  ``Retry-After``: the next month (UTC)       yes
``max_concurrency``         503    -32010  ``Retry-After``: :data:`BUSY_RETRY_AFTER`   no
``max_turns_per_context``   200    -32004  the context takes no more messages          yes
==========================  =====  ======  ==========================================  =======

"counted": whether the refused message counts against the caller's ``rate_limit``
(see **Counters**). Every other refusal after the first check counts too (a
malformed move, a message to a finished task, the gateway's or the SDK's).

-32010 is the code an Index server gives for "busy, try again later"
(docs/wire-format.md#index-peers) and the one of :data:`a2a_gateway.executor.BUSY`:
every refusal that passes with time carries it, the HTTP status says why, and
``Retry-After`` (RFC 9110 §10.2.3) when. A2A 1.0 has no code of its own for
them. The other two are the spec's: invalid params, and -32004 as for a
message to a task that takes no more (A2A 1.0 §3.1.1). ``max_contexts`` refuses
nothing: the least recently used contexts of the agent are forgotten. A cap of 0
takes nothing.

**Counters** live in Redis (``settings.REDIS_URL``), shared by every web
process, each an atomic Lua script on Redis's own clock:

* the rate limit is a sliding log per (agent, caller): a message is counted
  if fewer than ``rate_limit`` were counted in the last
  ``settings.A2A_RATE_LIMIT_WINDOW`` seconds (60: ``rate_limit`` is per
  minute). A message refused by this first check is not counted. One that
  passes counts whatever the later checks refuse, but for being busy
  (``max_concurrency``): that count is given back (:meth:`Hit.give_back`, one
  ZREM of the message's own entry), as busy passes in seconds and the caller
  is told to retry; a caller that does is not left with 429 for the rest of
  the window. The other refusals count: oversized
  and malformed messages are what the rate limit is there to bound, and a
  message past its tenant's budget or its conversation's turns is not taken
  by retrying in seconds.
* concurrency is a semaphore per agent: a sorted set of slot tokens scored by
  their expiry, ``turn_timeout`` + :data:`SLOT_GRACE` seconds after they are
  taken, so a process that dies holding one leaks it only until then.

In the embedded default (no Redis, one process) they are kept in the process
with the same interface (:class:`MemoryCounters`). If Redis cannot be reached
the caps it holds admit the message (logged): Redis is disposable, and
refusing every counterparty would be worse than not counting for a while.

An admitted turn's slot is the executor's to release when the turn's work
ends (the answer contract, :mod:`a2a_gateway.executor`): its release is left in
the call context's state under :data:`TURN_RELEASE`. The
gateway's edge releases one no executor took over when the request ends
(:func:`slot_release_unclaimed`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

import redis.asyncio
from a2a.server.context import ServerCallContext
from a2a.types import Message
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.db.models import Sum
from django.utils import timezone
from redis.exceptions import RedisError

from a2a_gateway.errors import BUSY_CODE, Refused
from a2a_gateway.models import InboundContext
from a2a_gateway.store import call_agent, owner_of
from agents.models import Agent, Run
from negotiations.models import Negotiation
from negotiations.wire import value_of
from representative.models import ModelUsage

logger = logging.getLogger(__name__)

HTTP_TOO_MANY_REQUESTS = 429
HTTP_SERVICE_UNAVAILABLE = 503
# Seconds a busy agent asks a caller to wait: turns take seconds.
BUSY_RETRY_AFTER = 2
# Seconds a concurrency slot outlives its turn's timeout before it expires on its own.
SLOT_GRACE = 60.0
# Where the edge (its ASGI scope state) keeps the call context's state of an admitted message.
CALL_STATE = "call_state"
# Where admission (turn_admit) leaves, in the call context's state, the release of the concurrency
# slot the turn holds: whoever pops it (the executor, or slot_release_unclaimed) gives the slot back.
TURN_RELEASE = "turn_release"
# Where message_screen leaves, in the call context's state, the message's count against the
# caller's rate (a Hit), for a busy refusal to give back.
RATE_HIT = "rate_hit"
BUSY = "This agent is answering as many messages as it can at once; try again in a moment."

_SLOT_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
"""

_HIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tonumber(oldest[2]) + window - now
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return -1
"""


class Counters(Protocol):
    """Counters shared by the processes that serve the endpoint. Times are seconds."""

    async def slot_acquire(self, key: str, limit: int, ttl: float) -> str | None:
        """Take one of ``limit`` slots under ``key`` for ``ttl`` at most; its token, None if none is free."""

    async def slot_release(self, key: str, token: str) -> None:
        """Give the slot ``token`` back (no-op if it has expired)."""

    async def hit(self, key: str, limit: int, window: float, token: str) -> float:
        """Count the event ``token`` under ``key`` if fewer than ``limit`` were counted in the last
        ``window``; 0 if counted, else how long until one leaves the window (> 0)."""

    async def unhit(self, key: str, token: str) -> None:
        """Uncount the event ``token`` under ``key`` (no-op if it was not counted or has left the window)."""


class RedisCounters:
    """:class:`Counters` in Redis, one client per event loop (a client's connections belong to one)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = redis.asyncio.Redis.from_url(self._url)
        return client

    async def slot_acquire(self, key: str, limit: int, ttl: float) -> str | None:
        token = uuid.uuid4().hex
        taken = await self._client().eval(_SLOT_ACQUIRE, 1, key, limit, math.ceil(ttl * 1000), token)
        return token if taken else None

    async def slot_release(self, key: str, token: str) -> None:
        await self._client().zrem(key, token)

    async def hit(self, key: str, limit: int, window: float, token: str) -> float:
        wait = await self._client().eval(_HIT, 1, key, limit, math.ceil(window * 1000), token)
        return 0.0 if int(wait) < 0 else int(wait) / 1000

    async def unhit(self, key: str, token: str) -> None:
        await self._client().zrem(key, token)


class MemoryCounters:
    """:class:`Counters` in this process, for the embedded default (one process, no Redis)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, dict[str, float]] = {}
        self._logs: dict[str, list[tuple[float, str]]] = {}

    async def slot_acquire(self, key: str, limit: int, ttl: float) -> str | None:
        now = time.monotonic()
        with self._lock:
            slots = {t: end for t, end in self._slots.get(key, {}).items() if end > now}
            self._slots[key] = slots
            if len(slots) >= limit:
                return None
            token = uuid.uuid4().hex
            slots[token] = now + ttl
            return token

    async def slot_release(self, key: str, token: str) -> None:
        with self._lock:
            self._slots.get(key, {}).pop(token, None)

    async def hit(self, key: str, limit: int, window: float, token: str) -> float:
        now = time.monotonic()
        with self._lock:
            log = [(t, counted) for t, counted in self._logs.get(key, []) if t > now - window]
            self._logs[key] = log
            if len(log) >= limit:
                return log[0][0] + window - now if log else window
            log.append((now, token))
            return 0.0

    async def unhit(self, key: str, token: str) -> None:
        with self._lock:
            self._logs[key] = [(t, counted) for t, counted in self._logs.get(key, []) if counted != token]


_memory = MemoryCounters()
_redis: dict[str, RedisCounters] = {}


def counters() -> Counters:
    """Redis's counters when ``settings.REDIS_URL`` is set, else this process's."""
    url = settings.REDIS_URL
    if not url:
        return _memory
    if url not in _redis:
        _redis[url] = RedisCounters(url)
    return _redis[url]


@dataclass
class Slot:
    """One of an agent's ``max_concurrency`` slots, held by an admitted turn until its work ends.

    Releasing twice is harmless.
    """

    key: str
    token: str
    released: bool = False

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        try:
            await counters().slot_release(self.key, self.token)
        except RedisError:
            logger.warning("could not release concurrency slot %s; it expires on its own", self.key)


@dataclass
class Hit:
    """One request counted against a caller's ``rate_limit``, under ``key`` as ``token``."""

    key: str
    token: str

    async def give_back(self) -> None:
        """Uncount it (no-op once it has left the window)."""
        try:
            await counters().unhit(self.key, self.token)
        except RedisError:
            logger.warning("could not give back a rate count under %s; it leaves the window later", self.key)


async def message_screen(context: ServerCallContext, message: Message) -> None:
    """The checks before anything is read for ``message``: the caller's rate, then the size.

    The count against the rate is left in the call context's state under :data:`RATE_HIT`.

    Raises:
        Refused: 429/-32010 with ``Retry-After`` — "Too many messages: this agent takes
            at most <n> a minute from each caller. Try again in <s> s." (a window other
            than 60 s is named in seconds).
        InvalidParamsError: (-32602) "The message has <n> characters of text and data;
            this agent takes at most <limit>." (:func:`input_chars`).
    """
    agent = call_agent(context)
    context.state[RATE_HIT] = await rate_check(agent, owner_of(context))
    size = input_chars(message)
    if size > agent.max_input_chars:
        raise InvalidParamsError(
            message=f"The message has {size} characters of text and data; "
            f"this agent takes at most {agent.max_input_chars}."
        )


async def rate_check(agent: Agent, owner: str) -> Hit:
    """Count one request of the caller partition ``owner`` (:func:`a2a_gateway.store.owner_for`)
    against ``agent``'s ``rate_limit``: its messages and its Agent Exchange preparations share it.
    Returns the count, for a refusal that should not cost the caller to give back.

    Raises:
        Refused: 429/-32010 with ``Retry-After`` — "Too many messages: this agent takes
            at most <n> a minute from each caller. Try again in <s> s." (a window other
            than 60 s is named in seconds).
    """
    window = float(settings.A2A_RATE_LIMIT_WINDOW)
    hit = Hit(key=f"a2a:rate:{owner}", token=uuid.uuid4().hex)
    wait = await _hit(hit, agent.rate_limit, window)
    if wait > 0:
        per = "a minute" if window == 60 else f"per {window:g} s"
        retry = max(1, math.ceil(wait))
        raise Refused(
            f"Too many messages: this agent takes at most {agent.rate_limit} {per} from each caller. "
            f"Try again in {retry} s.",
            code=BUSY_CODE,
            status=HTTP_TOO_MANY_REQUESTS,
            headers={"Retry-After": str(retry)},
        )
    return hit


def input_chars(message: Message) -> int:
    """The size of ``message`` the ``max_input_chars`` cap counts: the characters of its text
    parts plus those of its data parts as compact JSON (``{"a":1.0}``, as parsed: numbers are
    floats; NaN and ±Infinity as such, for :func:`a2a_gateway.executor.refuse_non_finite` to
    refuse). File parts are bounded by the request size alone."""
    size = 0
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            size += len(part.text)
        elif kind == "data":
            size += len(json.dumps(value_of(part.data), ensure_ascii=False, separators=(",", ":")))
    return size


async def turn_admit(context: ServerCallContext, context_id: str) -> None:
    """The checks last before the SDK starts the turn, with the final ``context_id``: the
    tenant's budget, a concurrency slot, then the context's turns, counted here.

    The slot's release is left in the call context's state under
    :data:`TURN_RELEASE`, and that state in the edge's under
    :data:`CALL_STATE` (:func:`slot_release_unclaimed`).

    Raises:
        Refused: 429/-32010 — "This agent's organisation has used its model budget for
            <Month YYYY>; it takes no new messages until 1 <Month YYYY> (UTC)." with
            ``Retry-After``; 503/-32010 :data:`BUSY` with ``Retry-After``, having given back
            the message's count against the caller's rate (:data:`RATE_HIT`).
        UnsupportedOperationError: (-32004) "Conversation <contextId> has reached this
            agent's limit of <n> messages; start a new one (a message without taskId and
            contextId)."
    """
    agent = call_agent(context)
    owner = owner_of(context)
    await budget_check(agent)
    try:
        slot = await _slot_acquire(agent)
    except Refused:
        hit = context.state.pop(RATE_HIT, None)
        if isinstance(hit, Hit):
            await hit.give_back()
        raise
    counted = False
    try:
        counted = await sync_to_async(_context_turn)(agent, owner, context_id)
    finally:
        if slot is not None and not counted:
            await slot.release()
    if not counted:
        raise UnsupportedOperationError(
            message=f"Conversation {context_id} has reached this agent's limit of "
            f"{agent.max_turns_per_context} messages; start a new one (a message without taskId and "
            "contextId)."
        )
    if slot is not None:
        context.state[TURN_RELEASE] = slot.release
        edge = context.state.get("edge")
        if isinstance(edge, dict):
            edge[CALL_STATE] = context.state


async def slot_release_unclaimed(state: dict[str, Any]) -> None:
    """At the end of a request (``state``: its ASGI scope state), release the slot taken for it
    if no executor took it over (the SDK refused the call after admission, say)."""
    call_state = state.get(CALL_STATE)
    release = call_state.pop(TURN_RELEASE, None) if isinstance(call_state, dict) else None
    if release is not None:
        await release()


async def _hit(hit: Hit, limit: int, window: float) -> float:
    if limit < 1:
        return window
    try:
        return await counters().hit(hit.key, limit, window, hit.token)
    except RedisError:
        logger.warning("rate limit not checked: Redis did not answer", exc_info=True)
        return 0.0


async def _slot_acquire(agent: Agent) -> Slot | None:
    key = f"a2a:slots:{agent.pk}"
    try:
        token = await counters().slot_acquire(key, agent.max_concurrency, agent.turn_timeout + SLOT_GRACE)
    except RedisError:
        logger.warning("concurrency not checked: Redis did not answer", exc_info=True)
        return None
    if token is None:
        raise Refused(
            BUSY,
            code=BUSY_CODE,
            status=HTTP_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(BUSY_RETRY_AFTER)},
        )
    return Slot(key=key, token=token)


async def budget_check(agent: Agent) -> None:
    """Refuse a message that would start model work once ``agent``'s tenant has spent its model
    budget for the month: :class:`Refused` 429/-32010 with ``Retry-After`` (see :func:`turn_admit`)."""
    budget = agent.tenant.model_budget
    if budget is None:
        return
    start = month_start(timezone.now())
    if await month_spend(agent.tenant_id, start) < budget:
        return
    following = month_start(start + timedelta(days=32))
    retry = max(1, math.ceil((following - timezone.now()).total_seconds()))
    raise Refused(
        f"This agent's organisation has used its model budget for {start:%B %Y}; "
        f"it takes no new messages until 1 {following:%B %Y} (UTC).",
        code=BUSY_CODE,
        status=HTTP_TOO_MANY_REQUESTS,
        headers={"Retry-After": str(retry)},
    )


def month_start(moment: datetime) -> datetime:
    """The first instant of ``moment``'s calendar month in UTC."""
    utc = moment.astimezone(UTC)
    return utc.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


async def month_spend(tenant_id: int, since: datetime) -> Decimal:
    """The tenant's model spend since ``since``: the cost of its runs created since then (their
    outbound negotiation turns included), of the visitors' turns its agents' models answered
    (:class:`representative.models.ModelUsage`), and of its inbound negotiations created since then.
    """
    runs = Run.objects.for_tenant(tenant_id).filter(created_at__gte=since)
    visitors = ModelUsage.objects.for_tenant(tenant_id).filter(created_at__gte=since)
    inbound = Negotiation.objects.for_tenant(tenant_id).filter(
        created_at__gte=since, direction=Negotiation.Direction.INBOUND
    )
    spent = [(await rows.aaggregate(total=Sum("cost")))["total"] for rows in (runs, visitors, inbound)]
    return sum((s or Decimal(0) for s in spent), Decimal(0))


def _context_turn(agent: Agent, owner: str, context_id: str) -> bool:
    """Count one message in ``owner``'s conversation ``context_id`` with ``agent``, if it is under
    ``max_turns_per_context``; whether it was. A new conversation beyond ``max_contexts``
    forgets the agent's least recently used ones.

    One statement counts it: an INSERT of the conversation's first turn, or, for one already
    counted, the conditional UPDATE of its count (concurrent messages of one context cannot both
    take its last turn). A count of 1 after it says the conversation is new, and one more
    statement forgets (:func:`_contexts_forget`). Raw SQL: it runs for every message, and Django
    took longer to compile these statements than Postgres to run them.
    """
    limit = agent.max_turns_per_context
    if limit < 1:
        return False
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    table = connection.ops.quote_name(InboundContext._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} "  # the table name is the model's own
            "(created_at, updated_at, tenant_id, agent_id, owner, context_id, turns, last_used_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, 1, %s) "
            "ON CONFLICT (agent_id, owner, context_id) DO UPDATE "
            f"SET turns = {table}.turns + 1, last_used_at = excluded.last_used_at, "
            "updated_at = excluded.updated_at "
            f"WHERE {table}.turns < %s RETURNING turns",
            [now, now, agent.tenant_id, _agent_key(agent), owner, context_id, now, limit],
        )
        counted = cursor.fetchone()
        if counted is None:
            return False
        if counted[0] == 1:
            _contexts_forget(cursor, agent)
    return True


def _agent_key(agent: Agent) -> Any:
    """The agent's key as the backend stores it (a uuid on Postgres, its hex on SQLite)."""
    return Agent._meta.pk.get_db_prep_value(agent.pk, connection)


def _contexts_forget(cursor: Any, agent: Agent) -> None:
    """Forget ``agent``'s least recently used conversations beyond ``max_contexts``, in one
    statement on ``cursor`` (an index of the agent's contexts by recency serves it)."""
    table = connection.ops.quote_name(InboundContext._meta.db_table)
    cursor.execute(
        f"DELETE FROM {table} WHERE id IN ("  # the table name is the model's own
        f"SELECT id FROM {table} WHERE tenant_id = %s AND agent_id = %s "
        "ORDER BY last_used_at DESC, id DESC LIMIT %s OFFSET %s)",
        # No limit: NULL on Postgres, -1 on SQLite.
        [agent.tenant_id, _agent_key(agent), connection.ops.no_limit_value(), agent.max_contexts],
    )
