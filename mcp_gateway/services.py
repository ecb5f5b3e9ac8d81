"""What the MCP gateway's tools do: name a tenant's agents, fetch a card, send a message — over public HTTP.

The gateway adds reach, not privilege. It reads the tenant's agents from the
database only to name them; everything else it does as any client of the
public A2A face would, over HTTP to ``PUBLIC_BASE_URL``:

* a card is fetched from the agent's public card URL, so it is the card as
  served — overrides applied, and signed when the tenant signs (a copy built
  here could differ from it, or lose its signature);
* a message goes to the agent's public JSON-RPC endpoint as an A2A 1.0
  ``SendMessage`` (header ``A2A-Version: 1.0``, which a2a-sdk reads to accept
  the 1.0 method names), the A2A Message exactly as the MCP caller gave it, with
  the credential headers the caller sent (:data:`CREDENTIAL_HEADERS`) and the
  caller's own address, vouched for (:func:`caller_headers`), and no other
  credential or identity.

So the endpoint's inbound auth and caps (rate, size, concurrency, turns per
context, budget) apply as to any caller, and its refusals come back as they
are, as :class:`BridgeError`. To the endpoint an anonymous MCP caller is its own
address, as if it had called directly: its own tasks, its own rate limit; a key
of the agent names it instead (:mod:`a2a_gateway.auth`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER
from django.conf import settings
from django.core.validators import slug_re
from starlette.datastructures import Headers
from starlette.types import Scope
from typing_extensions import TypedDict

from agents.addresses import agent_url, card_url
from agents.models import Agent
from parley.edge import API_KEY_HEADER, VOUCHED_CLIENT_HEADER, Unauthenticated, client_address, vouch_for
from parley.http import async_client
from parley.models import Tenant

# The headers of an MCP request that are the caller's credentials for the agent: passed on, and only they.
CREDENTIAL_HEADERS = ("Authorization", API_KEY_HEADER)
SEND_MESSAGE = "SendMessage"  # the A2A 1.0 method (0.3: message/send)
# How much of a caller's value an error message repeats.
SHOWN_CHARS = 100


class BridgeError(Exception):
    """A call the gateway could not complete; the message, for the MCP caller, says why."""


class Bridge(TypedDict):
    """One agent of the tenant as :func:`bridges_list` gives it."""

    slug: str
    name: str
    description: str
    card_url: str
    endpoint_url: str


def caller_headers(scope: Scope) -> dict[bytes, bytes]:
    """What the MCP request ``scope`` tells the agent's endpoint about its caller: each of
    :data:`CREDENTIAL_HEADERS` it carries, its bytes unchanged (a value the endpoint refuses is
    refused there, in its words), and the caller's address, vouched for
    (:func:`parley.edge.vouch_for`), so that to the endpoint each anonymous MCP caller is
    itself — its own tasks, its own rate — and not the gateway.

    Raises :class:`BridgeError` when the caller's address is unknown (no TCP peer, no trusted
    proxy header): anonymous callers could not be told apart."""
    headers = Headers(scope=scope)
    forwarded = {
        name.encode(): headers[name].encode("latin-1") for name in CREDENTIAL_HEADERS if name in headers
    }
    try:
        address = client_address(scope)
    except Unauthenticated as exc:
        raise BridgeError(exc.message) from exc
    forwarded[VOUCHED_CLIENT_HEADER.encode()] = vouch_for(address).encode()
    return forwarded


async def bridges_list(*, tenant: Tenant) -> list[Bridge]:
    """Every agent of ``tenant``, by slug: its name and description, its card URL and its A2A endpoint
    (:func:`agents.addresses.agent_url`)."""
    agents = Agent.objects.for_tenant(tenant).select_related("tenant").order_by("slug")
    return [
        Bridge(
            slug=agent.slug,
            name=agent.name,
            description=agent.description,
            card_url=card_url(agent_url(agent)),
            endpoint_url=agent_url(agent),
        )
        async for agent in agents
    ]


async def bridge_card_fetch(*, tenant: Tenant, slug: str) -> dict[str, Any]:
    """The AgentCard of ``tenant``'s agent ``slug``: the JSON object its public card URL serves,
    fetched within ``settings.A2A_CARD_TIMEOUT`` seconds.

    Raises:
        BridgeError: no such agent ("There is no agent 'x' in tenant 'acme'…"); the card could not
            be fetched (no answer in time, a connection error, not HTTP 200, not a JSON object).
    """
    agent = await _agent(tenant, slug)
    url = card_url(agent_url(agent))
    seconds = settings.A2A_CARD_TIMEOUT
    failed = f"The card of agent {agent.slug!r} could not be fetched from {url}"
    try:
        async with asyncio.timeout(seconds), async_client(timeout=seconds) as http:
            response = await http.get(url)
    except TimeoutError as exc:
        raise BridgeError(f"{failed}: no answer within {seconds:g} s.") from exc
    except httpx.HTTPError as exc:
        raise BridgeError(f"{failed}: {exc.__class__.__name__}.") from exc
    if response.status_code != httpx.codes.OK:
        raise BridgeError(f"{failed}: HTTP {response.status_code}.")
    try:
        card = response.json()
    except ValueError:
        card = None
    if not isinstance(card, dict):
        raise BridgeError(f"{failed}: it is not a JSON object.")
    return card


async def bridge_ask(
    *, tenant: Tenant, slug: str, message: Any, caller: Mapping[bytes, bytes]
) -> dict[str, Any]:
    """Send ``message`` (an A2A 1.0 Message as JSON, unchanged) to ``tenant``'s agent ``slug`` as one
    JSON-RPC ``SendMessage`` with the ``caller``'s headers (:func:`caller_headers`), and return the
    JSON-RPC ``result``: ``{"task": {…}}`` (the reply is the last entry of its ``history``) or
    ``{"message": {…}}``.

    The request is refused before it is sent when its body would be over
    ``settings.A2A_MAX_BODY_BYTES``, the endpoint's own cap. The whole call is bounded by
    ``settings.A2A_SEND_TIMEOUT`` seconds (connecting: ``A2A_CARD_TIMEOUT``).

    Raises:
        BridgeError: no such agent; ``message`` is not a JSON object, or too large; the endpoint
            answered a JSON-RPC error ("A2A error <code>: <message>", with " (HTTP <status>)" after
            the code when the status is not 200 — 401 for a missing key, 429 past the rate limit… —
            and " Data: <JSON>" after the message when the error has data),
            answered outside JSON-RPC, or did not answer in time.
    """
    agent = await _agent(tenant, slug)
    body = _send_message_body(message)
    headers = {
        **caller,
        b"Content-Type": b"application/json",
        VERSION_HEADER.encode(): PROTOCOL_VERSION_1_0.encode(),
    }
    seconds = settings.A2A_SEND_TIMEOUT
    timeout = httpx.Timeout(seconds, connect=min(seconds, settings.A2A_CARD_TIMEOUT))
    try:
        # A total deadline: httpx's timeouts bound each read, and an answer can trickle.
        async with asyncio.timeout(seconds), async_client(timeout=timeout) as http:
            response = await http.post(agent_url(agent), content=body, headers=headers)
    except TimeoutError as exc:
        raise BridgeError(f"Agent {agent.slug!r} did not answer within {seconds:g} s.") from exc
    except httpx.HTTPError as exc:
        raise BridgeError(f"Agent {agent.slug!r} could not be reached: {exc.__class__.__name__}.") from exc
    return _result(agent, response)


async def _agent(tenant: Tenant, slug: str) -> Agent:
    """``tenant``'s agent ``slug``; a value that is no slug names none, and costs no query."""
    agent = None
    if slug_re.match(slug):
        agent = await Agent.objects.for_tenant(tenant).select_related("tenant").filter(slug=slug).afirst()
    if agent is None:
        raise BridgeError(
            f"There is no agent {slug[:SHOWN_CHARS]!r} in tenant {tenant.slug!r}; list_bridges names them."
        )
    return agent


def _send_message_body(message: Any) -> bytes:
    """The JSON-RPC request that carries ``message``, as the bytes sent: compact UTF-8, as a2a-sdk's
    own client writes it, so the size checked is the size the endpoint reads."""
    if not isinstance(message, dict):
        raise BridgeError(
            f"message must be a JSON object (an A2A Message: messageId, role, parts), not {_kind(message)}."
        )
    request_id = str(uuid.uuid4())
    request = {"jsonrpc": "2.0", "id": request_id, "method": SEND_MESSAGE, "params": {"message": message}}
    try:
        text = json.dumps(request, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise BridgeError("message holds a number JSON cannot carry (NaN or an infinity).") from exc
    try:
        body = text.encode()
    except UnicodeEncodeError as exc:
        raise BridgeError("message holds a string with an unpaired UTF-16 surrogate.") from exc
    limit = settings.A2A_MAX_BODY_BYTES
    if len(body) > limit:
        raise BridgeError(
            f"message is too large: its SendMessage request would be {len(body)} bytes, "
            f"and the agent's endpoint takes at most {limit}."
        )
    return body


def _kind(value: Any) -> str:
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def _result(agent: Agent, response: httpx.Response) -> dict[str, Any]:
    """The ``result`` of the JSON-RPC response ``response``; its ``error`` raised as :class:`BridgeError`."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(error := answer.get("error"), dict):
        status = "" if response.status_code == httpx.codes.OK else f" (HTTP {response.status_code})"
        data = f" Data: {json.dumps(error['data'], ensure_ascii=False)}" if error.get("data") else ""
        raise BridgeError(f"A2A error {error.get('code')}{status}: {error.get('message')}{data}")
    if (
        response.status_code == httpx.codes.OK
        and isinstance(answer, dict)
        and isinstance(result := answer.get("result"), dict)
    ):
        return result
    raise BridgeError(
        f"Agent {agent.slug!r} answered HTTP {response.status_code} without a JSON-RPC response."
    )
