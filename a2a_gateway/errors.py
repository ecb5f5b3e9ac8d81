"""JSON-RPC error answers the gateway gives itself, at the edge, before or instead of the SDK's."""

from __future__ import annotations

from starlette.responses import JSONResponse

# JSON-RPC 2.0's code for a request that is not acceptable as it stands.
INVALID_REQUEST = -32600


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
