"""CORS for browser callers, per agent: only the origins in ``Agent.cors_origins`` (Fetch standard).

An origin is ``scheme://host[:port]`` as a browser sends it in ``Origin``;
``"*"`` in the list allows any origin. For an allowed origin:

* responses on the agent's card and JSON-RPC URLs carry
  ``Access-Control-Allow-Origin: <origin>`` (:class:`AllowListedOrigins`,
  refusals made at the edge included);
* a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) for the
  method the URL serves is answered 204 (:func:`preflight`), allowing the
  headers an A2A call uses: ``Content-Type``, ``A2A-Version``,
  ``A2A-Extensions``, ``X-A2A-Extensions``, ``Authorization``, ``X-API-Key``.

Anything else gets the answer it got before CORS: no CORS headers, and for
``OPTIONS`` the URL's own 405. No credentials mode: callers authenticate with
a header, never a cookie, so ``Access-Control-Allow-Credentials`` is not sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agents.models import Agent

ANY_ORIGIN = "*"
# Sandboxed frames and file: pages send this; allowing it would allow every such page at once.
OPAQUE_ORIGIN = "null"
ALLOWED_HEADERS = "Content-Type, A2A-Version, A2A-Extensions, X-A2A-Extensions, Authorization, X-API-Key"
# Seconds a browser may reuse a preflight's answer.
MAX_AGE = 600

Endpoint = Callable[[Request], Awaitable[Response]]


def allows(agent: Agent, origin: str | None) -> bool:
    """Whether ``agent`` lets a page of ``origin`` read its answers."""
    if not origin or origin == OPAQUE_ORIGIN:
        return False
    listed = {entry.lower().rstrip("/") for entry in agent.cors_origins}
    return ANY_ORIGIN in listed or origin.lower() in listed


class AllowListedOrigins:
    """ASGI middleware around the gateway: allowed origins on every answer of a resolved agent.

    It sits outside :class:`a2a_gateway.app.ResolveAgent`, so a refusal the
    edge answers gets the headers too; the agent is read from the request's
    state, where ``ResolveAgent`` leaves it, when the answer starts.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = Headers(scope=scope).get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return

        async def send_allowing(message: Message) -> None:
            if message["type"] == "http.response.start":
                agent = scope.get("state", {}).get("agent")
                if agent is not None:
                    headers = MutableHeaders(scope=message)
                    headers.add_vary_header("Origin")
                    if allows(agent, origin):
                        headers["Access-Control-Allow-Origin"] = origin
            await send(message)

        await self.app(scope, receive, send_allowing)


def preflight(method: str, *, otherwise: Endpoint) -> Endpoint:
    """An ``OPTIONS`` endpoint: a CORS preflight for ``method`` from an allowed origin is answered
    204; anything else is answered by ``otherwise``, the URL's usual ``OPTIONS`` answer."""

    async def endpoint(request: Request) -> Response:
        agent = request.scope["state"]["agent"]
        asked = request.headers.get("access-control-request-method", "")
        if asked.upper() != method or not allows(agent, request.headers.get("origin")):
            return await otherwise(request)
        headers = {
            "Access-Control-Allow-Methods": method,
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": str(MAX_AGE),
        }
        return Response(status_code=204, headers=headers)

    return endpoint


async def not_allowed(request: Request) -> Response:
    """``OPTIONS`` on a card URL that is not an allowed preflight: 405, as the URL answered before."""
    return Response("Method Not Allowed", status_code=405, headers={"Allow": "GET, HEAD"})


card_preflight = preflight("GET", otherwise=not_allowed)


def check_cors_origins(agent: Agent) -> None:
    """Refuse, at save time, entries that are not origins: for :func:`agents.configuration.full_clean`.

    Each entry is ``"*"`` or ``scheme://host[:port]`` with scheme http or https
    and nothing after the host (a browser's ``Origin`` has no path). Raises
    ``ValidationError`` keyed ``cors_origins``.
    """
    entries: Any = agent.cors_origins
    if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
        raise ValidationError({"cors_origins": "List origins, such as https://app.example.com."})
    for entry in entries:
        if entry != ANY_ORIGIN and not _is_origin(entry):
            raise ValidationError({"cors_origins": f"{entry!r} is not an origin (https://host[:port])."})


def _is_origin(entry: str) -> bool:
    try:
        parts = urlsplit(entry)  # raises ValueError for an unclosed IPv6 bracket
        parts.port  # noqa: B018  # raises ValueError for a port that is no number
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.path in ("", "/")
        and not (parts.query or parts.fragment or parts.username or parts.password or " " in entry)
    )
