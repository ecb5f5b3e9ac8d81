"""A chat-completions server on loopback with scripted replies (docs/design.md#models).

:class:`ChatServer` serves ``POST /v1/chat/completions`` on 127.0.0.1 from a daemon thread, so the
client under test is the production one, over a real socket. Each request takes the next scripted
:class:`Reply` (:meth:`ChatServer.script`), or asks the ``responder`` once the script is spent.
Replies are built with :func:`text`, :func:`tool_calls`, :func:`status`, :func:`error_body`,
:func:`error_chunk`, :func:`hang`, :func:`drop`, :func:`malformed`, :func:`sse` and
:func:`unstreamed`. A completion is streamed as SSE (HTTP/1.1 chunked, as real servers do) when
the request says ``"stream": true``, and answered as one JSON body otherwise.

    with ChatServer() as server:
        server.script(status(429, headers={"Retry-After": "1"}), text("Hello"))
        ...  # an endpoint with base_url=server.url
        assert len(server.requests) == 2
"""

from __future__ import annotations

import json
import math
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self, cast


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    A completion (``content``, ``tool_calls`` as ``(id, name, arguments)``, usage in tokens,
    ``finish_reason``, by default "tool_calls" or "stop"), streamed in ``pieces`` of text with
    ``chunk_delay`` seconds between chunks unless ``unstreamed``; or, when ``body``
    is set, that body as is with ``status`` and ``headers``. ``error``, an error object, is
    streamed as a chunk after the text (and ends the stream), or is the whole body unstreamed.
    ``delay`` is seconds before answering; ``drop_after`` closes the connection after that many
    streamed chunks (0: before any answer).
    """

    content: str = ""
    tool_calls: tuple[tuple[str, str, Any], ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    finish_reason: str = ""
    pieces: int = 3
    chunk_delay: float = 0.0
    unstreamed: bool = False
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    error: Mapping[str, Any] | None = None
    delay: float = 0.0
    drop_after: int | None = None


def text(
    content: str,
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    pieces: int = 3,
    chunk_delay: float = 0.0,
    finish_reason: str = "",
) -> Reply:
    """An assistant message of ``content`` (may be empty), streamed in ``pieces`` deltas;
    ``finish_reason="length"`` for one cut off at the length limit."""
    return Reply(
        content=content,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        pieces=pieces,
        chunk_delay=chunk_delay,
        finish_reason=finish_reason,
    )


def tool_calls(
    *calls: tuple[str, str, Any],
    content: str = "",
    input_tokens: int = 10,
    output_tokens: int = 5,
    finish_reason: str = "",
) -> Reply:
    """An assistant message calling tools, each ``(id, name, arguments)`` (several: parallel calls).

    ``arguments`` is sent as written, valid JSON or not, split over two deltas; any other value
    (a dict, a list, a number) is sent as that JSON value in place of the string, in one delta, as
    some servers do.
    """
    return Reply(
        content=content,
        tool_calls=calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason=finish_reason,
    )


def unstreamed(reply: Reply) -> Reply:
    """``reply`` answered as one JSON body even to a request that asks for a stream, as some servers do."""
    return replace(reply, unstreamed=True)


def status(code: int, *, headers: Mapping[str, str] | None = None, body: Any = None) -> Reply:
    """A plain HTTP answer: ``body`` as JSON (default ``{"error": {"message": <reason phrase>}}``),
    or as is when it is ``bytes``."""
    if body is None:
        body = {"error": {"message": HTTPStatus(code).phrase}}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Reply(status=code, headers={"Content-Type": "application/json", **(headers or {})}, body=raw)


def error_body(code: Any, message: str, *, headers: Mapping[str, str] | None = None, **fields: Any) -> Reply:
    """A 200 JSON answer whose body is ``{"error": {"code", "message", **fields}}``, as OpenRouter
    reports a provider's failure once it accepted the request; ``code`` as given (an int, digits, a name)."""
    return status(200, headers=headers, body={"error": {"code": code, "message": message, **fields}})


def error_chunk(code: Any, message: str, *, content: str = "") -> Reply:
    """A 200 stream of ``content`` that ends with an error chunk ``{"error": {"code", "message"}}``
    and ``finish_reason`` "error", as OpenRouter reports a failure mid-stream (unstreamed: the body)."""
    return Reply(content=content, error={"code": code, "message": message})


def hang(seconds: float, then: Reply | None = None) -> Reply:
    """Wait ``seconds`` before answering ``then`` (default: text "too late"); closing the server ends it."""
    return replace(then or text("too late"), delay=seconds)


def drop(after_chunks: int = 0) -> Reply:
    """Close the connection without a word, or after ``after_chunks`` chunks of a streamed answer."""
    return Reply(content="cut off in the middle", pieces=after_chunks + 2, drop_after=after_chunks)


def sse(*lines: str) -> Reply:
    """A 200 event stream of ``lines`` as written, each followed by a blank line: for odd streams."""
    return Reply(
        headers={"Content-Type": "text/event-stream"}, body="".join(f"{x}\n\n" for x in lines).encode()
    )


def malformed(payload: str = "{not json") -> Reply:
    """A 200 event stream whose one chunk is ``data: <payload>``."""
    return sse(f"data: {payload}")


@dataclass(frozen=True)
class Received:
    """A request the server got: its JSON body and its headers (names lower-cased)."""

    body: dict[str, Any]
    headers: dict[str, str]


class ChatServer:
    """The server, listening from construction; a context manager (``__exit__`` stops it).

    ``url`` is the base URL (``http://127.0.0.1:<port>/v1``); ``requests`` lists what arrived,
    in order. ``responder`` answers each request the script leaves unanswered (default: text "ok").
    """

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.responder = responder or (lambda body: text("ok"))
        self.requests: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self._http = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._http.chat = self
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue ``replies``, answered in order to the next requests."""
        with self._lock:
            self._script.extend(replies)

    def take(self, received: Received) -> Reply:
        """Record ``received`` and pick its reply."""
        with self._lock:
            self.requests.append(received)
            scripted = self._script.popleft() if self._script else None
        return scripted or self.responder(received.body)

    def __enter__(self) -> Self:
        threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._http.shutdown()
        self._http.server_close()


class _HTTPServer(ThreadingHTTPServer):
    chat: ChatServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client may close once it has read ``data: [DONE]``, before the stream's last chunk;
        # the reset that follows is how streams end, not an error worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as real endpoints

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/chat/completions":
            self._send(status(404))
            return
        body = json.loads(raw)
        chat = cast(_HTTPServer, self.server).chat
        reply = chat.take(Received(body=body, headers={k.lower(): v for k, v in self.headers.items()}))
        try:
            # A drop, or a hang cut short by the server closing: no answer at all.
            if reply.drop_after == 0 or (reply.delay and chat.closing.wait(reply.delay)):
                self.close_connection = True
            elif reply.body is not None:
                self._send(reply)
            elif body.get("stream") and not reply.unstreamed:
                self._stream(reply, body, chat)
            elif reply.error is not None:
                self._send(replace(reply, body=json.dumps({"error": reply.error}).encode()))
            else:
                self._send(replace(reply, body=json.dumps(_completion(reply, body)).encode()))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout, a cancellation)

    def _send(self, reply: Reply) -> None:
        assert reply.body is not None
        self.send_response(reply.status)
        headers = {"Content-Type": "application/json", **reply.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def _stream(self, reply: Reply, body: dict[str, Any], chat: ChatServer) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [json.dumps(c) for c in _chunks(reply, body)] + ["[DONE]"]
        for sent, event in enumerate(events):
            if sent == reply.drop_after:
                self.close_connection = True  # without the closing chunk: an incomplete body
                return
            if sent and reply.chunk_delay and chat.closing.wait(reply.chunk_delay):
                self.close_connection = True
                return
            data = f"data: {event}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on ``ChatServer.requests``."""


def _chunks(reply: Reply, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed ``reply``."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in _split(reply.content, reply.pieces)]
    if reply.error is not None:
        chunks = [_chunk(body, {"index": 0, "delta": d, "finish_reason": None}) for d in deltas]
        failed = {"index": 0, "delta": {"content": ""}, "finish_reason": "error"}
        return [*chunks, {**_chunk(body, failed), "error": dict(reply.error)}]
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        deltas.append(
            {"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": name}}]}
        )
        parts = _split(arguments, 2) if isinstance(arguments, str) else [arguments]
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": part}}]} for part in parts]
    chunks = [_chunk(body, {"index": 0, "delta": d, "finish_reason": None}) for d in deltas]
    chunks.append(_chunk(body, {"index": 0, "delta": {}, "finish_reason": _finish_reason(reply)}))
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**_chunk(body), "usage": _usage(reply)})
    return chunks


def _chunk(body: dict[str, Any], *choices: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "model": body["model"],
        "choices": choices,
    }


def _completion(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    """The ``chat.completion`` object of a non-streamed ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply)}],
        "usage": _usage(reply),
    }


def _finish_reason(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }


def _split(text: str, pieces: int) -> list[str]:
    """``text`` in up to ``pieces`` non-empty parts, in order."""
    if not text:
        return []
    size = math.ceil(len(text) / max(pieces, 1))
    return [text[i : i + size] for i in range(0, len(text), size)]
