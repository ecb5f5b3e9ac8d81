"""Agents on host names of their own (``Agent.host_name``): card and endpoint at the host's root.

Some counterparties resolve a card at the origin root, as Index peers do. A
request whose Host header is an agent's host name is served by the gateway as
if it had come to that agent's URL:

========================================  ==========================================
on ``<host_name>``                        served as
========================================  ==========================================
``/`` (JSON-RPC)                          ``/a2a/<tenant>/<agent>``
``/.well-known/agent-card.json``          ``/a2a/<tenant>/<agent>/.well-known/agent-card.json``
``/.well-known/agent.json`` (A2A 0.3)     ``/a2a/<tenant>/<agent>/.well-known/agent.json``
``/.well-known/jwks.json``                ``/a2a/<tenant>/<agent>/.well-known/jwks.json``
``/agent-exchange/preparation``           ``/a2a/<tenant>/<agent>/agent-exchange/preparation``
========================================  ==========================================

Any other path there is a 404: an agent's host never reaches Django (the
dashboard, the admin), which is why Django's ALLOWED_HOSTS needs no entry for
it. The card served there names ``<scheme>://<host_name>/`` as its endpoint
(:func:`agents.addresses.endpoint_url`), told by :data:`HOST_NAME` in the
request's state.

``GET /tls/allowed?domain=<host>`` (:data:`TLS_ASK_PATH`), on any Host, answers
200 when ``<host>`` is ``PUBLIC_BASE_URL``'s host or a proved host name, else
404: the ``ask`` endpoint of a reverse proxy that gets certificates on demand
(Caddy's ``on_demand_tls``), so that it asks a certificate authority only for
the names this deployment serves. It is answered before Django, so the proxy's
own name for the web process (``web:8000``) needs no ALLOWED_HOSTS entry.

Only a proved host name is served (:mod:`agents.services.host_names`: a DNS TXT
record or an HTTP token): one that is not yet proved is, like any host no agent
has, left to Django, which refuses it (it is not in ALLOWED_HOSTS).

Host names are looked up in a per-process table of every agent's proved host
name, reloaded at most every :data:`CACHE_SECONDS`: one small query per process
per interval, whatever the traffic, and a flood of made-up Host headers costs no
query at all. A newly proved, changed or removed host name takes effect within
that interval (a changed one is not proved). Requests for ``PUBLIC_BASE_URL``'s
own host skip the table.
"""

from __future__ import annotations

import math
import time
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import DomainNameValidator
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_gateway.signing import JWKS_PATH
from agents.models import Agent
from agents.services import host_names
from exchange.wire import PREPARATION_PATH
from parley.edge import rpc_error

CACHE_SECONDS = 5.0
# The key in the request's ASGI state that carries the host name a request came to.
HOST_NAME = "host_name"
_SUFFIXES = {
    "/": "",
    "/.well-known/agent-card.json": "/.well-known/agent-card.json",
    "/.well-known/agent.json": "/.well-known/agent.json",
    JWKS_PATH: JWKS_PATH,
    PREPARATION_PATH: PREPARATION_PATH,
}

TLS_ASK_PATH = "/tls/allowed"

_table: dict[str, tuple[str, str]] = {}
_loaded_at = -math.inf


async def hosted_agent(host: str) -> tuple[str, str] | None:
    """(tenant slug, agent slug) of the agent whose proved host name is ``host`` (lower case), or None."""
    global _table, _loaded_at
    if time.monotonic() - _loaded_at > CACHE_SECONDS:
        # Unlocked: requests that arrive during the reload may reload too, which is harmless.
        rows = Agent.across_tenants.exclude(host_name=None).exclude(host_name="")
        rows = rows.exclude(host_name_verified_at=None)
        _table = {
            host_name.lower(): (tenant, slug)
            async for host_name, tenant, slug in rows.values_list("host_name", "tenant__slug", "slug")
            if host_name
        }
        _loaded_at = time.monotonic()
    return _table.get(host)


def request_host(scope: Scope) -> str | None:
    """The Host header's name, lower case, without port or trailing dot; None for none or an IP
    literal in brackets."""
    for name, value in scope["headers"]:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return None
            return host.partition(":")[0].rstrip(".") or None
    return None


async def tls_allowed(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer :data:`TLS_ASK_PATH`: 200 when its ``domain`` query parameter is ``PUBLIC_BASE_URL``'s
    host or a proved host name (any case, a trailing dot ignored), 404 otherwise, 400 without one.
    The body says which, for people; Caddy reads only the status."""
    query = parse_qs(scope["query_string"].decode("latin-1"))
    domain = (query.get("domain") or [""])[0].strip().lower().rstrip(".")
    if not domain:
        answer = PlainTextResponse("Give the host name as ?domain=<host>.", status_code=400)
    elif domain == urlsplit(settings.PUBLIC_BASE_URL).hostname or await hosted_agent(domain) is not None:
        answer = PlainTextResponse(f"{domain} is served here.")
    else:
        answer = PlainTextResponse(f"{domain} is not served here.", status_code=404)
    await answer(scope, receive, send)


class AgentHosts:
    """ASGI middleware: serve requests to an agent's host name as requests to the agent's URL, and
    answer the TLS ``ask`` (:func:`tls_allowed`).

    Wraps the HTTP router of :mod:`parley.asgi`, so the rewritten path is
    routed like any other; every other request passes untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == TLS_ASK_PATH and scope["method"] in ("GET", "HEAD"):
            await tls_allowed(scope, receive, send)
            return
        host = request_host(scope) if scope["type"] == "http" else None
        hosted = None
        if host is not None and host != urlsplit(settings.PUBLIC_BASE_URL).hostname:
            hosted = await hosted_agent(host)
        if hosted is None:
            await self.app(scope, receive, send)
            return
        suffix = _SUFFIXES.get(scope["path"])
        if suffix is None:
            await rpc_error(404, f"Nothing is served at {scope['path']!r} on this host.")(
                scope, receive, send
            )
            return
        tenant, agent = hosted
        path = f"/a2a/{tenant}/{agent}{suffix}"
        state = {**scope.get("state", {}), HOST_NAME: host}
        await self.app({**scope, "path": path, "raw_path": path.encode(), "state": state}, receive, send)


def check_host_name(agent: Agent) -> None:
    """Refuse, at save time, a host name the agent cannot be served on.

    For :func:`agents.configuration.full_clean`. It must be a domain name in lower case (an
    internationalised one in its ``xn--`` form: Host headers are ASCII), and
    not the platform's own host (``PUBLIC_BASE_URL``, or an exact entry of
    ``ALLOWED_HOSTS``), whose requests would all go to the agent, nor one another agent
    holds proved (:func:`agents.services.host_names.taken`). Raises ``ValidationError`` keyed
    ``host_name``.
    """
    host = agent.host_name
    if not host:
        return
    try:
        DomainNameValidator(accept_idna=False)(host)
    except ValidationError as exc:
        raise ValidationError({"host_name": exc.messages}) from exc
    if host != host.lower():
        raise ValidationError({"host_name": "Write the host name in lower case."})
    own = {urlsplit(settings.PUBLIC_BASE_URL).hostname, *(h.lower() for h in settings.ALLOWED_HOSTS)}
    if host in own:
        raise ValidationError({"host_name": "That is the platform's own host name."})
    if host_names.taken(agent):
        raise ValidationError({"host_name": host_names.TAKEN})
