"""The public A2A face: per-agent cards and JSON-RPC endpoints on a2a-sdk, as one ASGI app.

Routes (under the ASGI router's ``/a2a/`` prefix, which is not stripped):

* ``GET  /a2a/<tenant>/<agent>/.well-known/agent-card.json`` — the AgentCard, also at
  ``…/.well-known/agent.json``, the path A2A 0.3 clients fetch;
* ``GET  /a2a/<tenant>/<agent>/.well-known/jwks.json`` — the keys its tenant signs cards
  with (:mod:`a2a_gateway.signing`);
* ``POST /a2a/<tenant>/<agent>`` — JSON-RPC, A2A 1.0 and 0.3 on the same URL; any other
  method there is a 405 with a JSON-RPC error body, but for a CORS preflight from one of
  the agent's origins (:mod:`a2a_gateway.cors`, which also marks the answers they may read).

The agent is resolved once, at the edge, by :class:`ResolveAgent`; an unknown
one (or a path segment that is no slug) is a 404 before the SDK sees the
request. Bodies over ``A2A_MAX_BODY_BYTES`` are refused with 413. The edge
also answers what the SDK cannot: a :class:`a2a_gateway.executor.Refused`
raised while admitting a message (its own HTTP status and code: 200, 409, 429
or 503 with -32010, 409 with -32002) replaces the SDK's own answer, so JSON-RPC
is parsed only by the SDK.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext, SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.types import (
    CancelTaskRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.types import Message as A2AMessage
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import apply_history_length
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.validators import slug_re
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_gateway import agent_exchange, caps, cors
from a2a_gateway.auth import agent_at, authenticate
from a2a_gateway.cards import capability_card, card_document
from a2a_gateway.claims import MessageClaims
from a2a_gateway.errors import Refused
from a2a_gateway.events import SharedTaskEvents, follow
from a2a_gateway.executor import (
    FINISHED,
    FOR_VISITOR,
    NegotiationExecutor,
    admit,
    cancel_negotiation,
    finished,
    refuse_non_finite,
)
from a2a_gateway.hosts import HOST_NAME
from a2a_gateway.models import InboundKey
from a2a_gateway.push import DjangoPushConfigStore, PushSender, url_allowed
from a2a_gateway.resends import resent_task
from a2a_gateway.signing import jwks_endpoint
from a2a_gateway.store import ANSWERED_AT_END, NEW_TASK, DjangoTaskStore, call_agent
from agents.models import Agent
from exchange.wire import PREPARATION_PATH
from parley.edge import API_KEY_HEADER, Unauthenticated, rpc_error

_AGENT_PATH = re.compile(r"^/a2a/(?P<tenant>[^/]+)/(?P<agent>[^/]+)(?:/.*)?$")
# States in which a task waits for its caller to send again.
PARKED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
# Deeper than any A2A message needs; protobuf's own parser stops at 100 too.
MAX_NESTING = 100
_CREDENTIAL_HEADERS = frozenset({b"authorization", API_KEY_HEADER.lower().encode()})
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \uD800 to \uDFFF, any case
# The 0.3 methods a message comes by; the Index wire's refusals apply to both.
V0_3_SENDS = frozenset({"message/send", "message/stream"})
# The methods answered once, when the task is final or parked, rather than streamed event by event.
ANSWERED_AT_END_METHODS = frozenset({"SendMessage", "message/send"})
# Where the context builder leaves, in the call context's state, the new task it marked as having no
# push config for the call (DjangoPushConfigStore.mark_without_configs), for the handler to unmark.
WITHOUT_PUSH = "without_push"
# Where the context builder leaves the new task whose events it marked as unseen
# (SharedTaskEvents.mark_unseen), for the handler to unmark once the call is answered.
UNSEEN = "unseen"


class AgentContextBuilder(DefaultServerCallContextBuilder):
    """Keeps the SDK's context (headers included) and adds the resolved agent.

    ``state["edge"]`` is the request's ASGI state, where a refusal for the edge
    to answer is left (:func:`refuse`).
    """

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["agent"] = request.scope["state"]["agent"]
        context.state["edge"] = request.scope["state"]
        return context


def refuse(context: ServerCallContext, refusal: Refused) -> None:
    """Leave ``refusal`` for the edge: its status, and its code in a JSON-RPC error with the request's id."""
    context.state["edge"]["refusal"] = rpc_error(
        refusal.status,
        refusal.message,
        code=refusal.code,
        request_id=context.state.get("request_id"),
        headers=refusal.headers,
    )


class InboundContextBuilder(SimpleRequestContextBuilder):
    """Builds the executor's context for a message, refusing first what the agent cannot take.

    The SDK calls it after looking the task up (unknown: -32001) and before it
    starts the task, the last point at which a refusal writes nothing. Refused:
    a message to a finished task (:func:`a2a_gateway.executor.finished`: the
    SDK's -32004 on 1.0, an Index server's 409/-32002 on 0.3), then whatever
    :func:`a2a_gateway.executor.admit` refuses. A follow-up naming only
    ``taskId`` gets the stored ``contextId`` (docs/wire-format.md#messages). The caps
    (:mod:`a2a_gateway.caps`) come first (rate, size) and last (budget,
    concurrency, turns per context, once the contextId is final). A number that
    is not finite is refused right after the first caps
    (:func:`a2a_gateway.executor.refuse_non_finite`): nothing that follows could
    write the message out as JSON.
    """

    def __init__(
        self,
        store: DjangoTaskStore,
        push_configs: DjangoPushConfigStore,
        events: SharedTaskEvents | None = None,
    ) -> None:
        super().__init__(task_store=store)
        self._store = store
        self._push_configs = push_configs
        self._events = events

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        stored = await self._store.get(task_id, context) if task_id else None
        wire_0_3 = context.state.get("method") in V0_3_SENDS
        try:
            if params is not None:
                await caps.message_screen(context, params.message)
                refuse_non_finite(params.message)
            if stored is not None and stored.status.state in FINISHED:
                # Refused before the SDK builds an ActiveTask: refusing there, a2a-sdk 1.3.0 leaves
                # the task's queue dispatcher pending (logged on collection).
                raise finished(stored.id, stored.status.state, wire_0_3=wire_0_3)
            if params is not None:
                reference = await agent_exchange.gate(context, params.message, wire_0_3=wire_0_3)
                if reference is not None:
                    context.state[agent_exchange.FOR_EXCHANGE] = reference
                else:
                    context.state[FOR_VISITOR] = await admit(
                        call_agent(context), params.message, task_id, wire_0_3=wire_0_3
                    )
        except Refused as refusal:
            refuse(context, refusal)
            raise
        if stored is not None and not context_id:
            context_id = stored.context_id
        built = await super().build(
            context=context, params=params, task_id=task_id, context_id=context_id, task=task
        )
        if params is not None and not task_id and built.task_id:
            context.state[NEW_TASK] = built.task_id
            if context.state.get("method") in ANSWERED_AT_END_METHODS and not params.configuration.HasField(
                "task_push_notification_config"
            ):
                if not params.configuration.return_immediately and self._events is not None:
                    # Its caller learns its id from the answer, once the task is final or parked.
                    self._events.mark_unseen(built.task_id)
                    context.state[UNSEEN] = built.task_id
                # A push reads its task's row (DjangoPushConfigStore): with none, nothing is held.
                context.state[ANSWERED_AT_END] = True
                self._push_configs.mark_without_configs(built.task_id)
                context.state[WITHOUT_PUSH] = built.task_id
        if params is not None:
            # The SDK checks an inline push URL only after this builder; checked first, a refused
            # message counts no turn of its conversation.
            push = params.configuration.task_push_notification_config
            if push.url and not await url_allowed(push.url):
                raise InvalidParamsError(message="Invalid push notification URL")
            try:
                if agent_exchange.FOR_EXCHANGE in context.state:
                    # It starts a run, not a turn: the tenant's budget applies, a turn's slot does not.
                    await caps.budget_check(call_agent(context))
                else:
                    await caps.turn_admit(context, built.context_id or "")
            except Refused as refusal:
                refuse(context, refusal)
                raise
        return built


class GatewayHandler(DefaultRequestHandler):
    """The SDK's handler, with what a negotiation adds to its operations.

    Every caller owns its own tasks (:func:`a2a_gateway.store.owner_of`: the
    caller's key, or an anonymous counterparty's own partition), so every
    operation is the SDK's within that partition. A canceled task's
    negotiation ends with it (:func:`a2a_gateway.executor.cancel_negotiation`);
    a turn in flight cannot be stopped, only kept out of the task. A message
    sent again gets the Task it was applied on as it stands, and nothing is
    applied twice (:mod:`a2a_gateway.resends`). Given ``event_stream``
    (:class:`a2a_gateway.events.SharedTaskEvents`), a subscription gets the events of
    every web process.
    """

    def __init__(self, *, event_stream: SharedTaskEvents | None = None, **kwargs: Any) -> None:
        super().__init__(event_stream=event_stream, **kwargs)
        self._events = event_stream
        self._claims = MessageClaims()

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | A2AMessage:
        """The SDK's, except for a message sent again, which gets its Task as it stands
        (:mod:`a2a_gateway.resends`)."""
        async with self._claims.hold(context, params.message):
            resent = await self._resent(params, context)
            if resent is not None:
                return resent
            try:
                answer = await super().on_message_send(params, context)
            finally:
                if WITHOUT_PUSH in context.state:
                    assert isinstance(self._push_config_store, DjangoPushConfigStore)
                    self._push_config_store.unmark(context.state.pop(WITHOUT_PUSH))
                if UNSEEN in context.state and self._events is not None:
                    self._events.unmark(context.state.pop(UNSEEN))
            if isinstance(answer, Task):
                store = self.task_store
                assert isinstance(store, DjangoTaskStore)
                await store.flush(answer.id)  # answered, it is stored
            return answer

    async def _resent(self, params: SendMessageRequest, context: ServerCallContext) -> Task | None:
        """:func:`a2a_gateway.resends.resent_task`, as the request's configuration asks for it."""
        store = self.task_store
        assert isinstance(store, DjangoTaskStore)
        try:
            task = await resent_task(store, context, params.message)
        except Refused as refusal:
            refuse(context, refusal)
            raise
        return apply_history_length(task, params.configuration) if task is not None else None

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        task = await super().on_cancel_task(params, context)
        if task is not None:
            await cancel_negotiation(call_agent(context), task)
        return task

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """The SDK's subscription, except to a task parked on its caller (input- or auth-required),
        and, with an event stream, to a task open in the store.

        A parked task changes only when its caller sends again, which can be days away:
        the subscription gives the Task and ends rather than hold an idle stream open.
        With an event stream, any web process may be running the task's turn, so the
        subscription follows the stream (:func:`a2a_gateway.events.follow`), which every
        process publishes to, rather than a2a-sdk 1.3.0's shortcut to an ActiveTask of
        this process: that may be one parked here while another process runs the turn,
        and it would never see the turn's events. A task whose events are unseen runs its
        turn here, and publishes nothing: its subscription is the SDK's.
        """
        stored = await self.task_store.get(params.id, context)
        if isinstance(stored, Task) and stored.status.state in PARKED:
            yield stored
            return
        events = self._events
        if (
            events is not None
            and isinstance(stored, Task)
            and stored.status.state not in FINISHED
            and not events.unseen(stored.id)
        ):
            async for event in follow(events, stored.id):
                yield event
            return
        async for event in super().on_subscribe_to_task(params, context):
            yield event

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """The SDK's stream, which begins with the Task on a follow-up too (A2A spec §3.1.2); a
        message sent again gets only its Task as it stands (:mod:`a2a_gateway.resends`).

        a2a-sdk 1.3.0 streams a follow-up's events without the Task they change; it
        is read from the store once the message is admitted (its first event).
        """
        async with self._claims.hold(context, params.message):
            resent = await self._resent(params, context)
            if resent is not None:
                yield resent
                return
            events = super().on_message_send_stream(params, context)
            first = await anext(events, None)
            if first is None:
                return
            if params.message.task_id and not isinstance(first, Task | A2AMessage):
                stored = await self.task_store.get(params.message.task_id, context)
                if isinstance(stored, Task):  # the store is DjangoTaskStore, not a versioned one
                    yield apply_history_length(stored, params.configuration)
            yield first
            async for event in events:
                yield event


class ResolveAgent:
    """ASGI middleware: find the agent named by the path (404 if none) and bound the body size.

    A segment outside Django's slug pattern names no agent, so it is a 404 without a query
    (Postgres would refuse a NUL in one). A POST's caller is authenticated next, before the
    body is read (:func:`a2a_gateway.auth.authenticate`; 401 if the agent requires a key it
    lacks), and is the scope's ``user``, without its credential headers. A concurrency slot
    taken for the request that no executor took over is released when it ends. A body whose
    strings hold an unpaired surrogate is a 400 (:func:`_lone_surrogate`).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        match = _AGENT_PATH.match(scope["path"])
        agent: Agent | None = None
        live_keys: dict[str, InboundKey] = {}
        if match is not None and slug_re.match(match["tenant"]) and slug_re.match(match["agent"]):
            # The agent's Agent Exchange profile comes with it (every message asks for it), and the
            # keys the request presents, for authenticate.
            agent, live_keys = await agent_at(match["tenant"], match["agent"], scope)
        if agent is None:
            where = (
                f"agent {match['agent']!r} in tenant {match['tenant']!r}" if match else "agent at this path"
            )
            await rpc_error(404, f"There is no {where}.")(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["agent"] = agent
        if scope["method"] == "POST":
            try:
                caller = await authenticate(agent, scope, live_keys)
            except Unauthenticated as refusal:
                await refusal.response()(scope, receive, send)
                return
            # The SDK keeps every header in the call context (and logs it at DEBUG): not the key.
            headers = [(k, v) for k, v in scope["headers"] if k not in _CREDENTIAL_HEADERS]
            scope = {**scope, "user": caller, "headers": headers}
            body = await _read_body(receive, settings.A2A_MAX_BODY_BYTES)
            if body is None:
                limit = settings.A2A_MAX_BODY_BYTES
                await rpc_error(413, f"The request body is larger than {limit} bytes.")(scope, receive, send)
                return
            if _too_deep(body):
                nested = f"The body nests deeper than {MAX_NESTING} levels."
                await rpc_error(400, nested)(scope, receive, send)
                return
            if _lone_surrogate(body):
                await rpc_error(400, "A string in the body holds an unpaired UTF-16 surrogate.")(
                    scope, receive, send
                )
                return
            receive = _replay(body, receive)
        try:
            await self.app(scope, receive, _answering_refusals(state, scope, receive, send))
        finally:
            await caps.slot_release_unclaimed(state)


def _too_deep(body: bytes) -> bool:
    """Whether ``body`` nests arrays or objects deeper than :data:`MAX_NESTING` (strings aside).

    Parsed by the SDK, such a body hits Python's recursion limit and is answered
    as an internal error in the interpreter's words. Most bodies hold too few
    brackets to be scanned at all.
    """
    if body.count(b"[") + body.count(b"{") <= MAX_NESTING:
        return False
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_NESTING:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


def _lone_surrogate(body: bytes) -> bool:
    """Whether ``body`` is JSON with an unpaired surrogate escape in a string (``"\\ud800"``).

    JSON's grammar allows one (RFC 8259 §8.2); Python reads it into a str that
    cannot be encoded as UTF-8, so once a2a-sdk 1.3.0 echoes it (the request's
    ``id`` is echoed in every answer) its answer fails to render: a 500. Only a
    body with a surrogate escape is parsed here; a body that is no JSON is the SDK's.
    """
    if not _SURROGATE_ESCAPE.search(body):
        return False
    try:
        json.dumps(json.loads(body), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False
    return False


def _answering_refusals(state: dict[str, Any], scope: Scope, receive: Receive, send: Send) -> Send:
    """``send``, except that once a refusal is left in ``state`` (:func:`refuse`) before the
    SDK starts its answer, the refusal is the answer and the SDK's is dropped.

    An event stream's start is held back until its first event: a 0.3
    ``message/stream`` starts its stream before it admits the message (the SDK
    reads the stream only then), so its refusal comes after the start."""
    replaced = False
    held: Message | None = None

    async def answer(message: Message) -> None:
        nonlocal replaced, held
        if replaced:
            return
        starting = message["type"] == "http.response.start"
        if starting and _is_event_stream(message):
            held = message
            return
        if (starting or held is not None) and "refusal" in state:
            replaced = True
            await state["refusal"](scope, receive, send)
            return
        if held is not None:
            await send(held)
            held = None
        await send(message)

    return answer


def _is_event_stream(start: Message) -> bool:
    return any(
        name.lower() == b"content-type" and value.startswith(b"text/event-stream")
        for name, value in start.get("headers", [])
    )


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body``, already read, replayed first.

    After it, the client's own messages: an event stream waits there for the
    disconnect, and would end at once on a made-up one.
    """
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def card_endpoint(request: Request) -> Response:
    state = request.scope["state"]
    card = await sync_to_async(card_document)(state["agent"], host_name=state.get(HOST_NAME))
    return Response(json.dumps(card), media_type="application/json")


async def rpc_needs_post(request: Request) -> Response:
    """Any method but POST on the JSON-RPC URL: 405, as a JSON-RPC error a client can read."""
    return rpc_error(405, "Use POST for JSON-RPC.", headers={"Allow": "POST"})


def build_app(executor: AgentExecutor | None = None) -> ASGIApp:
    """The gateway application; one request handler and one executor serve every agent.

    ``executor`` replaces :class:`NegotiationExecutor` behind the same edge, context
    builders and store (``bench/gateway.py`` measures the gateway with a trivial one).
    Task events reach subscribers on every web process through the channel layer
    (:mod:`a2a_gateway.events`), but in the embedded default, which has one process.
    """
    store = DjangoTaskStore()
    push_configs = DjangoPushConfigStore()
    push_sender = PushSender(push_configs)
    events = None if settings.EMBEDDED else SharedTaskEvents()
    handler = GatewayHandler(
        agent_executor=executor or NegotiationExecutor(),
        task_store=store,
        agent_card=capability_card(),
        request_context_builder=InboundContextBuilder(store, push_configs, events),
        event_stream=events,
        # Parties answer in days: release parked tasks from memory; the store rebuilds them.
        interrupted_task_timeout=300,
        push_config_store=push_configs,
        push_sender=push_sender,
        push_url_validator=url_allowed,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()
        await store.aclose()
        await push_sender.aclose()

    routes = [
        Route("/a2a/{tenant}/{agent}/.well-known/agent-card.json", card_endpoint, methods=["GET"]),
        Route("/a2a/{tenant}/{agent}/.well-known/agent.json", card_endpoint, methods=["GET"]),
        Route("/a2a/{tenant}/{agent}/.well-known/jwks.json", jwks_endpoint, methods=["GET"]),
        Route(f"/a2a/{{tenant}}/{{agent}}{PREPARATION_PATH}", agent_exchange.preparation, methods=["POST"]),
        Route("/a2a/{tenant}/{agent}/.well-known/agent-card.json", cors.card_preflight, methods=["OPTIONS"]),
        Route("/a2a/{tenant}/{agent}/.well-known/agent.json", cors.card_preflight, methods=["OPTIONS"]),
        Route("/a2a/{tenant}/{agent}", cors.preflight("POST", otherwise=rpc_needs_post), methods=["OPTIONS"]),
        *create_jsonrpc_routes(
            handler,
            rpc_url="/a2a/{tenant}/{agent}",
            context_builder=AgentContextBuilder(),
            enable_v0_3_compat=True,
        ),
        # Starlette prefers the route whose methods match, so POST stays the SDK's; HEAD comes with GET.
        Route("/a2a/{tenant}/{agent}", rpc_needs_post, methods=["GET", "PUT", "PATCH", "DELETE"]),
    ]
    return cors.AllowListedOrigins(ResolveAgent(Starlette(routes=routes, lifespan=lifespan)))
