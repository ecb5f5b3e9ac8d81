"""Refusals the gateway gives itself, at the edge, with their own HTTP status and JSON-RPC code.

The JSON-RPC error answer itself is :func:`parley.edge.rpc_error`, which the MCP gateway gives too.
"""

from __future__ import annotations

from a2a.utils.errors import A2AError

HTTP_OK = 200
HTTP_CONFLICT = 409
# The code of a refusal to take a message now (busy, over a cap): docs/wire-format.md#refusals.
BUSY_CODE = -32010


class Refused(A2AError):
    """A refusal with its own HTTP ``status`` and JSON-RPC ``code``, which the gateway's edge answers.

    Left to the SDK, it would be HTTP 200 with -32603 and the same message. ``headers`` go
    with the answer (``Retry-After`` on the caps' refusals, :mod:`a2a_gateway.caps`).
    """

    def __init__(
        self, message: str, *, code: int, status: int = HTTP_CONFLICT, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message=message)
        self.code = code
        self.status = status
        self.headers = headers or {}
