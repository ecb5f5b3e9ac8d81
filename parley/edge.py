"""What our public JSON-RPC endpoints share at their edge: who the caller is, and refusing a call.

The A2A endpoint (:mod:`a2a_gateway`) and the MCP gateway in front of it
(:mod:`mcp_gateway`) both answer JSON-RPC over HTTP, and both tell anonymous
callers apart by address. The MCP gateway calls the A2A endpoint for callers of
its own and vouches for each caller's address (:func:`vouch_for`), so the
endpoint sees that caller and not the gateway: its tasks, its rate limits.

* :func:`rpc_error` — an HTTP answer whose body is a JSON-RPC error, given
  before or instead of the SDK's;
* :class:`Unauthenticated` — a call refused there, before the SDK reads it;
* :func:`client_address` — the address an anonymous caller is told apart by.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from django.conf import settings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Scope

from parley import keys

# JSON-RPC 2.0's code for a request that is not acceptable as it stands.
INVALID_REQUEST = -32600
HTTP_UNAUTHORIZED = 401
HTTP_BAD_REQUEST = 400
# Where a caller presents an agent's API key (its other place is ``Authorization: Bearer``).
API_KEY_HEADER = "X-API-Key"
# Where a gateway of ours that calls the public endpoint for callers of its own (the MCP gateway)
# names the one it acts for: "<address> <keyed digest>" (:func:`vouch_for`).
VOUCHED_CLIENT_HEADER = "X-Parley-Client"


def rpc_error(
    status: int,
    message: str,
    *,
    code: int = INVALID_REQUEST,
    request_id: str | int | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An HTTP ``status`` answer whose body is a JSON-RPC error: ``{"jsonrpc": "2.0", "id":
    request_id, "error": {"code", "message"}}`` (``id`` null when the body was not read)."""
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


class Unauthenticated(Exception):
    """A call the edge refuses before the SDK sees it: HTTP ``status`` (401, or 400 when the
    caller cannot be told apart) with a JSON-RPC -32600 error naming what is missing.

    ``challenge`` is the ``WWW-Authenticate`` value (bearer agents only, RFC 6750 §3).
    """

    def __init__(self, message: str, *, status: int = HTTP_UNAUTHORIZED, challenge: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.challenge = challenge

    def response(self) -> JSONResponse:
        """The answer: the JSON-RPC error (id null: the body is not read) and the challenge."""
        headers = {"WWW-Authenticate": self.challenge} if self.challenge else None
        return rpc_error(self.status, self.message, headers=headers)


def client_address(scope: Scope) -> str:
    """The address an anonymous caller is told apart by.

    The address a gateway of ours vouches for (:func:`vouch_for`), else the first of
    ``settings.A2A_TRUSTED_PROXY_HEADERS`` the request carries, else
    the TCP peer (``scope["client"]``). A list value (``X-Forwarded-For: a, b``)
    gives its last entry, the one the proxy nearest to us appended. List a header
    only if every request reaches us through a proxy that sets it: anyone can
    send it otherwise. uvicorn already rewrites ``scope["client"]`` from
    ``X-Forwarded-For`` when the peer is in its ``--forwarded-allow-ips``
    (default 127.0.0.1).

    Limits: callers behind one NAT or proxy share an address, hence their tasks;
    a caller whose address changes (mobile networks, IPv6 privacy addresses)
    no longer finds its earlier tasks. A counterparty that needs a stable
    identity should use a key, which works on anonymous agents too.

    Raises:
        Unauthenticated: (400) no address at all — served over a socket without a
            trusted header, every anonymous caller would share one partition.
    """
    headers = Headers(scope=scope)
    vouched = _vouched(headers.get(VOUCHED_CLIENT_HEADER, ""))
    if vouched:
        return vouched
    for name in settings.A2A_TRUSTED_PROXY_HEADERS:
        value = headers.get(name, "").split(",")[-1].strip()
        if value:
            return _normalised(value)
    client: Any = scope.get("client")
    if client and client[0]:
        return _normalised(str(client[0]))
    raise Unauthenticated(
        "The caller's address is unknown, so anonymous callers cannot be told apart; "
        "call with a key of this agent.",
        status=HTTP_BAD_REQUEST,
    )


def vouch_for(address: str) -> str:
    """The :data:`VOUCHED_CLIENT_HEADER` value by which a gateway of ours (it holds
    ``KEY_HASH_SECRET``) names ``address`` as the caller it acts for, so that the endpoint tells its
    anonymous callers apart as it tells apart its own: tasks, and rate limits, per caller."""
    return f"{address} {keys.keyed_digest(f'vouched-client:{address}')}"


def _vouched(value: str) -> str | None:
    """The address a :data:`VOUCHED_CLIENT_HEADER` value vouches for; None unless its digest holds."""
    address, _, digest = value.strip().rpartition(" ")
    if not address or not hmac.compare_digest(vouch_for(address).encode(), f"{address} {digest}".encode()):
        return None
    return _normalised(address)


def _normalised(address: str) -> str:
    """One spelling per IP address: ``::FFFF:7f00:1``, ``::ffff:127.0.0.1`` (an IPv4 caller on a
    dual-stack socket) and ``127.0.0.1`` alike; anything else as it came."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)
