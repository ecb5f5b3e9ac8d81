"""Host operations: tools that run on the host's own server, and checking any tool's arguments.

A ``host`` :class:`~agents.models.Tool` runs by one HTTPS POST of the call to the tool's ``url``
(a public address: :mod:`parley.outbound`)::

    POST /orders/lookup HTTP/1.1
    Content-Type: application/json
    Parley-Timestamp: 1767225600
    Parley-Signature: v1=0f3c5e…(64 lowercase hex digits)
    Idempotency-Key: 9b2d6c1e-…:call_abc123

    {"tool":"lookup_order","arguments":{"order":"A-17"},"run":"9b2d6c1e-…","tool_call_id":"call_abc123"}

``run`` is the run's id and ``tool_call_id`` the model's id for the call; ``arguments`` has
already been checked against the tool's ``parameters`` schema.

**Verifying a request** (what :func:`verify` does; a host in another language does the same):

1. Take the request body exactly as received, as bytes, before any JSON parsing.
2. Compute HMAC-SHA256 keyed with the tool's ``secret`` (UTF-8) over the ASCII decimal
   ``Parley-Timestamp`` value, a ``.``, then the body: ``f"{timestamp}.".encode() + body``.
3. ``Parley-Signature`` must equal ``"v1="`` + that digest in lowercase hex; compare in
   constant time.
4. ``Parley-Timestamp`` is Unix time in seconds; refuse it when more than 300 s away from the
   host's clock, either way. Signing the timestamp with the body bounds a replay to that window.

**Idempotency.** The agent loop may deliver the same call twice (a worker dies after the POST and
the step runs again). A redelivery has the same ``Idempotency-Key`` (``<run>:<tool_call_id>``) and
the same body, with a fresh timestamp and signature; a host that acts on the world should act once
per key and answer a repeat with its first answer.

**Answering.** Within the tool's ``timeout`` seconds in all, with at most
:data:`MAX_RESPONSE_BYTES` (64 KiB) of body, and without redirects (they are not followed):

* 2xx ``application/json`` (or ``*+json``) ``{"result": "<text>"}`` — the model sees the text;
* 2xx any other JSON — the model sees it as compact JSON text;
* 2xx ``text/plain`` — the model sees the text (in the ``charset`` given, else UTF-8);
* 2xx with an empty body (e.g. 204) — the model sees an empty result;
* 4xx or 5xx — the call fails; the model sees the status and, when the body is JSON with a
  string ``error`` or ``detail``, or is ``text/plain``, the first 200 characters of that text.

Any other answer, and any failure to get one, fails the call with :class:`~agents.tools.ToolError`,
whose message becomes the call's result for the model (docs/design.md#the-agent-loop: a failing
tool never ends the run). Result text may not contain NUL characters: it is stored in Postgres.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from jsonschema import SchemaError
from jsonschema.exceptions import ValidationError as SchemaViolation
from jsonschema.protocols import Validator
from jsonschema.validators import (
    Draft3Validator,
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)
from referencing.exceptions import Unresolvable

from agents.tools import Handler, Outcome, Result, ToolContext, ToolError
from parley import netguard, outbound

if TYPE_CHECKING:
    from agents.models import Tool

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024
REPLAY_TOLERANCE = 300
MAX_PROBLEMS = 5
_ERROR_TEXT_CHARS = 200
_PROBLEM_CHARS = 300
# Exchanges with hosts one process runs at once; past that a call waits for a thread, within its deadline.
EXCHANGE_THREADS = 32

_exchanges: tuple[int, ThreadPoolExecutor] | None = None
_exchanges_lock = threading.Lock()

# The dialects jsonschema implements, by their meta-schema URI without the empty fragment
# ("…/draft-07/schema#" and "…/draft-07/schema" name the same dialect).
_DIALECTS: dict[str, type[Validator]] = {
    str(cls.META_SCHEMA["$schema"]).rstrip("#"): cls
    for cls in (
        Draft3Validator,
        Draft4Validator,
        Draft6Validator,
        Draft7Validator,
        Draft201909Validator,
        Draft202012Validator,
    )
}


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The ``Parley-Signature`` value for ``body`` sent at ``timestamp`` (Unix seconds): ``"v1=<hex>"``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify(
    *,
    secret: str,
    timestamp: int | str,
    body: bytes,
    signature: str,
    tolerance: float = REPLAY_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether a host-operation request is genuine and fresh, as its host checks it.

    ``timestamp`` and ``signature`` are the ``Parley-Timestamp`` and ``Parley-Signature``
    header values (the timestamp as received, or already an int); ``body`` is the raw body.
    False when the timestamp is not a decimal integer, is more than ``tolerance`` seconds
    from ``now`` (Unix seconds; default the current time), or the signature does not match.
    """
    if isinstance(timestamp, str):
        if not timestamp.isascii() or not timestamp.isdigit():
            return False
        timestamp = int(timestamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    expected = sign(secret=secret, timestamp=timestamp, body=body)
    # Bytes, because compare_digest refuses str with non-ASCII characters, which a forger may send.
    return hmac.compare_digest(expected.encode(), signature.encode())


@dataclass(frozen=True)
class _Answer:
    """The host's HTTP answer; ``body`` is None when it was longer than MAX_RESPONSE_BYTES."""

    status: int
    media_type: str
    encoding: str
    body: bytes | None


def call_host_operation(*, tool: Tool, arguments: dict[str, Any], run_id: str, tool_call_id: str) -> str:
    """Run the host ``tool`` on ``arguments`` for call ``tool_call_id`` of run ``run_id``.

    Returns the text the model sees (see the module docstring for the request and the answers).
    Takes at most ``tool.timeout`` seconds in all. Raises :class:`~agents.tools.ToolError`
    naming the tool and what went wrong: a URL that is missing, malformed, or not https (plain
    http only with ``settings.PARLEY_HOST_OPERATIONS_ALLOW_HTTP``), or whose host the address
    policy refuses (:mod:`parley.outbound`: "… was not called: the host '<host>' resolves to a
    private address; …", nothing sent), no secret, a timeout, no connection, a redirect, HTTP
    4xx/5xx, an answer too large or neither JSON nor plain text.
    """
    try:
        return _call(tool, arguments, run_id, tool_call_id)
    except ToolError as exc:
        logger.warning("host operation %s failed in run %s call %s: %s", tool.name, run_id, tool_call_id, exc)
        raise


def handler_for(row: Tool) -> Handler:
    """How a run calls the host operation ``row``: :func:`call_host_operation`, its text the call's
    :class:`~agents.tools.Result` (registered for the ``host`` kind, :func:`agents.tools.register_kind`)."""

    def call(context: ToolContext, arguments: dict[str, Any]) -> Outcome:
        text = call_host_operation(
            tool=row, arguments=arguments, run_id=str(context.run.pk), tool_call_id=context.tool_call_id
        )
        return Result(text)

    return call


def _call(tool: Tool, arguments: dict[str, Any], run_id: str, tool_call_id: str) -> str:
    name = tool.name
    url = _checked_url(tool)
    if not tool.secret:
        raise ToolError(f"Host operation {name!r} has no signing secret configured.")
    payload = {"tool": name, "arguments": arguments, "run": run_id, "tool_call_id": tool_call_id}
    # Serialised once: the bytes signed are the bytes sent.
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/plain",
        # Compressed answers could inflate far past the size cap before it is checked.
        "Accept-Encoding": "identity",
        "Parley-Timestamp": str(timestamp),
        "Parley-Signature": sign(secret=tool.secret, timestamp=timestamp, body=body),
        "Idempotency-Key": f"{run_id}:{tool_call_id}",
    }
    deadline = time.monotonic() + tool.timeout
    # httpx's timeouts bound each network wait, not the whole exchange (encode/httpx#1450), and a
    # sync call cannot be interrupted, so the exchange runs in another thread and we stop waiting
    # at the deadline. The abandoned exchange ends soon after: its every wait is bounded too.
    answer = _exchange_threads().submit(_post, name, url, body, headers, tool.timeout, deadline)
    try:
        reply = answer.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        answer.cancel()  # one still waiting for a thread is never sent
        raise _timed_out(name, tool.timeout) from None
    return _result_text(name, reply)


def _checked_url(tool: Tool) -> httpx.URL:
    if not tool.url:
        raise ToolError(f"Host operation {tool.name!r} has no URL configured.")
    try:
        url = httpx.URL(tool.url)
    except httpx.InvalidURL as exc:
        raise ToolError(f"Host operation {tool.name!r} has an invalid URL ({exc}).") from None
    if not url.host:
        raise ToolError(f"Host operation {tool.name!r} has an invalid URL (no host).")
    if not scheme_allowed(tool.url):
        raise ToolError(f"Host operation {tool.name!r} must have an https:// URL.")
    return url


def scheme_allowed(url: str) -> bool:
    """Whether a host operation may be called at ``url`` for its scheme: https, and http where
    ``settings.PARLEY_HOST_OPERATIONS_ALLOW_HTTP`` allows it (a host on loopback in tests). The
    tool's ``clean`` asks it at save time, the call again (the setting may have changed)."""
    allowed = ("https", "http") if settings.PARLEY_HOST_OPERATIONS_ALLOW_HTTP else ("https",)
    return url.partition(":")[0].lower() in allowed


def _timed_out(name: str, timeout: float) -> ToolError:
    return ToolError(f"Host operation {name!r} timed out after {timeout:g} s.")


def _exchange_threads() -> ThreadPoolExecutor:
    """This process's threads for host operations' exchanges, made on first use (a forked child
    makes its own: the parent's threads are not in it). A thread that finished one is kept for the
    next, rather than one started per call."""
    global _exchanges
    with _exchanges_lock:
        if _exchanges is None or _exchanges[0] != os.getpid():
            pool = ThreadPoolExecutor(max_workers=EXCHANGE_THREADS, thread_name_prefix="host-operation")
            _exchanges = (os.getpid(), pool)
        return _exchanges[1]


def _post(
    name: str, url: httpx.URL, body: bytes, headers: dict[str, str], timeout: float, deadline: float
) -> _Answer:
    try:
        with (
            outbound.shared_client().stream(
                "POST", url, content=body, headers=headers, timeout=timeout, follow_redirects=False
            ) as response,
        ):
            received = bytearray()
            for chunk in response.iter_bytes():
                received += chunk
                if len(received) > MAX_RESPONSE_BYTES:
                    return _answer(response, None)
                if time.monotonic() > deadline:
                    raise _timed_out(name, timeout)
            return _answer(response, bytes(received))
    except netguard.AddressRefused as exc:
        raise ToolError(f"Host operation {name!r} was not called: {exc}.") from None
    except httpx.TimeoutException:
        raise _timed_out(name, timeout) from None
    except httpx.ConnectError as exc:
        raise ToolError(f"Host operation {name!r} could not connect to its host ({exc}).") from None
    except httpx.HTTPError as exc:
        raise ToolError(f"Host operation {name!r} failed: {type(exc).__name__}: {exc}") from None


def _answer(response: httpx.Response, body: bytes | None) -> _Answer:
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return _Answer(
        status=response.status_code, media_type=media_type, encoding=response.encoding or "utf-8", body=body
    )


def _result_text(name: str, answer: _Answer) -> str:
    """The text the model sees for a successful answer; a ToolError for any other."""
    if answer.status >= 400:
        detail = _error_text(answer)
        raise ToolError(
            f"Host operation {name!r} failed: HTTP {answer.status}" + (f": {detail}" if detail else ".")
        )
    if answer.status >= 300:
        raise ToolError(
            f"Host operation {name!r} answered with a redirect (HTTP {answer.status}), which is not followed."
        )
    if answer.body is None:
        raise ToolError(
            f"Host operation {name!r} answered with more than {MAX_RESPONSE_BYTES // 1024} KiB, the limit."
        )
    if not answer.body:
        return ""
    if _is_json(answer.media_type):
        try:
            data = json.loads(answer.body)
        except (ValueError, RecursionError):
            raise ToolError(f"Host operation {name!r} answered with JSON that cannot be parsed.") from None
        if isinstance(data, dict) and isinstance(data.get("result"), str):
            text = data["result"]
        else:
            text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    elif answer.media_type == "text/plain":
        text = answer.body.decode(answer.encoding, errors="replace")
    else:
        raise ToolError(
            f"Host operation {name!r} answered with Content-Type {answer.media_type or 'none'!r}; "
            "it must be application/json or text/plain."
        )
    # The result is stored in a Postgres text column, which refuses NUL and unpaired surrogates.
    if "\x00" in text or not _encodable(text):
        raise ToolError(f"Host operation {name!r} answered with text containing NUL or invalid characters.")
    return text


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _error_text(answer: _Answer) -> str:
    """The host's short explanation of a failure, or "" when it gave none we can show."""
    if not answer.body:
        return ""
    text: object = None
    if _is_json(answer.media_type):
        try:
            data = json.loads(answer.body)
        except (ValueError, RecursionError):
            return ""
        if isinstance(data, dict):
            text = data.get("error") if isinstance(data.get("error"), str) else data.get("detail")
    elif answer.media_type == "text/plain":
        text = answer.body.decode(answer.encoding, errors="replace")
    if not isinstance(text, str):
        return ""
    return _shorten(" ".join(text.replace("\x00", "").split()), _ERROR_TEXT_CHARS)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _validator_class(schema: dict[str, Any]) -> type[Validator] | None:
    """The validator for the schema's ``$schema`` dialect (2020-12 when absent); None when unknown."""
    dialect = schema.get("$schema")
    if dialect is None:
        return Draft202012Validator
    return _DIALECTS.get(str(dialect).rstrip("#"))


def check_schema(schema: object) -> None:
    """Check that ``schema`` is a usable JSON Schema for a tool's ``parameters``.

    It must be a JSON object, name a dialect jsonschema knows in ``$schema`` if it names one
    (draft 3 to 2020-12; 2020-12 when absent), and be valid against that dialect's meta-schema.
    Raises :class:`django.core.exceptions.ValidationError` saying what is wrong, for a form's or
    a model's ``clean``.
    """
    if not isinstance(schema, dict):
        raise ValidationError("A JSON Schema for arguments must be a JSON object.", code="invalid")
    cls = _validator_class(schema)
    if cls is None:
        raise ValidationError(
            "The $schema %(dialect)s is not a JSON Schema dialect we know.",
            code="invalid",
            params={"dialect": repr(schema["$schema"])},
        )
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValidationError(
            "Not a valid JSON Schema: %(where)s: %(problem)s",
            code="invalid",
            params={
                "where": _path("schema", exc.absolute_path),
                "problem": _shorten(exc.message, _PROBLEM_CHARS),
            },
        ) from None


@functools.lru_cache(maxsize=256)
def _checked_validator(schema_json: str) -> Validator:
    """The validator of the schema ``schema_json`` (canonical JSON text: sorted keys), once the schema
    is checked against its dialect's meta-schema. Cached: a run's tools bring the same schemas to every
    step, and the meta-schema check costs more than most validations. Raises :class:`ToolError` for a
    schema that is invalid (never cached, so it is checked again each time)."""
    schema = json.loads(schema_json)
    cls = _validator_class(schema) or Draft202012Validator
    try:
        # An invalid schema can make validation itself raise anything; check it first.
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ToolError(f"the schema itself is invalid ({_shorten(exc.message, _PROBLEM_CHARS)})") from None
    return cls(schema)


def validate_arguments(*, schema: dict[str, Any], arguments: Any) -> None:
    """Check a tool call's ``arguments`` against the tool's ``parameters`` JSON Schema.

    The validator follows the schema's ``$schema`` (Draft 2020-12 when absent or unknown);
    ``format`` is an annotation, not checked. An empty schema accepts anything. Raises
    :class:`~agents.tools.ToolError` whose message lists up to :data:`MAX_PROBLEMS` problems on
    one line, ordered by path then message, joined by ``"; "``, each ``arguments.<path>: <problem>``
    (e.g. ``arguments.items[0].amount: 'x' is not of type 'number'``); callers add their own
    preamble. It says instead when the schema itself is unusable (invalid, or a ``$ref`` that
    cannot be resolved). ``arguments`` may be any JSON value (e.g. a run's parsed final answer).
    """
    validator = _checked_validator(json.dumps(schema, sort_keys=True))
    try:
        problems = sorted(validator.iter_errors(arguments), key=_problem_order)
    except Unresolvable as exc:
        raise ToolError(f"the schema itself cannot be used ({_shorten(str(exc), _PROBLEM_CHARS)})") from None
    if not problems:
        return
    shown = [
        f"{_path('arguments', problem.absolute_path)}: {_shorten(problem.message, _PROBLEM_CHARS)}"
        for problem in problems[:MAX_PROBLEMS]
    ]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"and {len(problems) - MAX_PROBLEMS} more")
    raise ToolError("; ".join(shown))


def _problem_order(problem: SchemaViolation) -> tuple[list[tuple[int, int, str]], str]:
    # Array indices before property names, indices in numeric order: a total, stable order.
    path = [(0, step, "") if isinstance(step, int) else (1, 0, str(step)) for step in problem.absolute_path]
    return path, problem.message


def _path(root: str, steps: Iterable[str | int]) -> str:
    """``root``, then ``.name`` per property (``["x y"]`` when not a plain name) and ``[i]`` per index."""
    parts = [root]
    for step in steps:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(step)):
            parts.append(f".{step}")
        else:
            parts.append(f"[{json.dumps(str(step))}]")
    return "".join(parts)
