"""The public A2A face: per-agent cards and JSON-RPC endpoints on a2a-sdk, as one ASGI app.

Routes (under the ASGI router's ``/a2a/`` prefix, which is not stripped):

* ``GET  /a2a/<tenant>/<agent>/.well-known/agent-card.json`` — the AgentCard, also at
  ``…/.well-known/agent.json``, the path A2A 0.3 clients fetch;
* ``POST /a2a/<tenant>/<agent>`` — JSON-RPC, A2A 1.0 and 0.3 on the same URL; any other
  method there is a 405 with a JSON-RPC error body.

The agent is resolved once, at the edge, by :class:`ResolveAgent`; an unknown
one (or a path segment that is no slug) is a 404 before the SDK sees the
request. Bodies over ``A2A_MAX_BODY_BYTES`` are refused with 413. The edge
also answers what the SDK cannot: a :class:`a2a_gateway.executor.Refused`
raised while admitting a message (409 with -32010 or -32002) replaces the
SDK's own answer, so JSON-RPC is parsed only by the SDK.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from a2a.server.agent_execution import RequestContext, SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.types import (
    CancelTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    Task,
)
from a2a.utils.errors import UnsupportedOperationError
from django.conf import settings
from django.core.validators import slug_re
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_gateway.cards import agent_card, capability_card
from a2a_gateway.executor import FINISHED, NegotiationExecutor, Refused, admit, finished
from a2a_gateway.store import DjangoTaskStore, call_agent
from agents.models import Agent

_AGENT_PATH = re.compile(r"^/a2a/(?P<tenant>[^/]+)/(?P<agent>[^/]+)(?:/.*)?$")
JSONRPC_INVALID_REQUEST = -32600
# The 0.3 method a message comes by (streaming never gets this far: the card does not offer it).
V0_3_SEND = "message/send"


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
    body = {
        "jsonrpc": "2.0",
        "id": context.state.get("request_id"),
        "error": {"code": refusal.code, "message": refusal.message},
    }
    context.state["edge"]["refusal"] = JSONResponse(body, status_code=refusal.status)


class InboundContextBuilder(SimpleRequestContextBuilder):
    """Builds the executor's context for a message, refusing first what the agent cannot take.

    The SDK calls it after looking the task up (unknown: -32001) and before it
    starts the task, the last point at which a refusal writes nothing. Refused:
    a message to a finished task (:func:`a2a_gateway.executor.finished`: the
    SDK's -32004 on 1.0, an Index server's 409/-32002 on 0.3), then whatever
    :func:`a2a_gateway.executor.admit` refuses. A follow-up naming only
    ``taskId`` gets the stored ``contextId`` (a2a-sdk-brief.md §1.6).
    """

    def __init__(self, store: DjangoTaskStore) -> None:
        super().__init__(task_store=store)
        self._store = store

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        stored = await self._store.get(task_id, context) if task_id else None
        wire_0_3 = context.state.get("method") == V0_3_SEND
        try:
            if stored is not None and stored.status.state in FINISHED:
                # Refused before the SDK builds an ActiveTask: refusing there, a2a-sdk 1.3.0 leaves
                # the task's queue dispatcher pending (logged on collection).
                raise finished(stored.id, stored.status.state, wire_0_3=wire_0_3)
            if params is not None:
                await admit(call_agent(context), params.message, task_id, wire_0_3=wire_0_3)
        except Refused as refusal:
            refuse(context, refusal)
            raise
        if stored is not None and not context_id:
            context_id = stored.context_id
        return await super().build(
            context=context, params=params, task_id=task_id, context_id=context_id, task=task
        )


class AnonymousCallerHandler(DefaultRequestHandler):
    """The SDK's handler, minus what an anonymous caller must not do to other callers' tasks.

    Until callers authenticate, every anonymous caller shares one task
    partition per agent (owner ``<agent>|``, :func:`a2a_gateway.store.owner_of`),
    so for them ListTasks answers an empty list and CancelTask -32004
    (UnsupportedOperationError) "Cancelling needs an authenticated caller.".
    GetTask still answers: a task id is an unguessable UUID the SDK minted.
    """

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        if not context.user.is_authenticated:
            return ListTasksResponse()
        return await super().on_list_tasks(params, context)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        if not context.user.is_authenticated:
            raise UnsupportedOperationError(message="Cancelling needs an authenticated caller.")
        return await super().on_cancel_task(params, context)


def _rpc_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": JSONRPC_INVALID_REQUEST, "message": message},
    }
    return JSONResponse(body, status_code=status, headers=headers)


class ResolveAgent:
    """ASGI middleware: find the agent named by the path (404 if none) and bound the body size.

    A segment outside Django's slug pattern names no agent, so it is a 404 without a query
    (Postgres would refuse a NUL in one).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        match = _AGENT_PATH.match(scope["path"])
        agent = None
        if match is not None and slug_re.match(match["tenant"]) and slug_re.match(match["agent"]):
            agent = (
                await Agent.objects.select_related("tenant")
                .filter(tenant__slug=match["tenant"], slug=match["agent"])
                .afirst()
            )
        if agent is None:
            where = (
                f"agent {match['agent']!r} in tenant {match['tenant']!r}" if match else "agent at this path"
            )
            await _rpc_error(404, f"There is no {where}.")(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["agent"] = agent
        if scope["method"] == "POST":
            body = await _read_body(receive, settings.A2A_MAX_BODY_BYTES)
            if body is None:
                limit = settings.A2A_MAX_BODY_BYTES
                await _rpc_error(413, f"The request body is larger than {limit} bytes.")(scope, receive, send)
                return
            receive = _replay(body)
        await self.app(scope, receive, _answering_refusals(state, scope, receive, send))


def _answering_refusals(state: dict[str, Any], scope: Scope, receive: Receive, send: Send) -> Send:
    """``send``, except that once a refusal is left in ``state`` (:func:`refuse`) before the
    SDK starts its answer, the refusal is the answer and the SDK's is dropped."""
    replaced = False

    async def answer(message: Message) -> None:
        nonlocal replaced
        if message["type"] == "http.response.start" and "refusal" in state:
            replaced = True
            await state["refusal"](scope, receive, send)
        if not replaced:
            await send(message)

    return answer


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


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def card_endpoint(request: Request) -> Response:
    card = agent_card_to_dict(agent_card(request.scope["state"]["agent"]))
    return Response(json.dumps(card), media_type="application/json")


async def rpc_needs_post(request: Request) -> Response:
    """Any method but POST on the JSON-RPC URL: 405, as a JSON-RPC error a client can read."""
    return _rpc_error(405, "Use POST for JSON-RPC.", headers={"Allow": "POST"})


def build_app() -> ASGIApp:
    """The gateway application; one request handler and one executor serve every agent."""
    store = DjangoTaskStore()
    handler = AnonymousCallerHandler(
        agent_executor=NegotiationExecutor(),
        task_store=store,
        agent_card=capability_card(),
        request_context_builder=InboundContextBuilder(store),
        # Parties answer in days: release parked tasks from memory; the store rebuilds them.
        interrupted_task_timeout=300,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()

    routes = [
        Route("/a2a/{tenant}/{agent}/.well-known/agent-card.json", card_endpoint, methods=["GET"]),
        Route("/a2a/{tenant}/{agent}/.well-known/agent.json", card_endpoint, methods=["GET"]),
        *create_jsonrpc_routes(
            handler,
            rpc_url="/a2a/{tenant}/{agent}",
            context_builder=AgentContextBuilder(),
            enable_v0_3_compat=True,
        ),
        # Starlette prefers the route whose methods match, so POST stays the SDK's; HEAD comes with GET.
        Route("/a2a/{tenant}/{agent}", rpc_needs_post, methods=["GET", "PUT", "PATCH", "DELETE", "OPTIONS"]),
    ]
    return ResolveAgent(Starlette(routes=routes, lifespan=lifespan))
