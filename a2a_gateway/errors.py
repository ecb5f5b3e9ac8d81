"""JSON-RPC error answers the gateway gives itself, at the edge, before or instead of the SDK's."""

from __future__ import annotations

from a2a.utils.errors import A2AError
from starlette.responses import JSONResponse

# JSON-RPC 2.0's code for a request that is not acceptable as it stands.
INVALID_REQUEST = -32600
HTTP_OK = 200
HTTP_CONFLICT = 409
# The code of a refusal to take a message now (busy, over a cap): docs/wire-format.md#refusals.
BUSY_CODE = -32010


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
