"""The ``openai`` model (docs/design.md#models): any OpenAI-compatible chat-completions endpoint, over httpx.

:class:`ChatCompletionsModel` calls one :class:`~agents.models.ModelEndpoint`:
it always asks for a stream (SSE), hands each piece of text to
``CallOptions.on_delta``, and retries what may pass — timeouts, dropped
connections, HTTP 429 and 5xx, an error object with such a code in a 200
answer (OpenRouter reports a provider's failure so, in the body or as a stream
chunk), and a reply that cannot be acted on: one cut off at the length limit
(its tool calls and text are incomplete) or one with neither text nor tool
calls — waiting 1 s, 2 s, 4 s … with jitter, or what ``Retry-After`` asks.
Any other failure ends the call at once. A wait is never cut short: one the
call cannot afford (see :meth:`ChatCompletionsModel.complete`) makes the model
unavailable for the call, saying why. The endpoint's URL is the tenant's, so it is
called on public addresses only (:mod:`parley.outbound`); a host the policy
refuses makes the model unavailable at once.
:class:`FallbackChain` tries models in order, moving on only when one's tries
are spent.

The client is synchronous: the agent loop calls it from a Celery worker.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import httpx

from agents.llm import (
    CallOptions,
    ChatMessage,
    ChatModel,
    ModelCancelled,
    ModelError,
    ModelReply,
    Retry,
    ToolCall,
    ToolSpec,
    json_kind,
)
from parley import netguard, outbound

if TYPE_CHECKING:
    from agents.models import ModelEndpoint

# The longest wait between two tries, in seconds: a worker thread sleeps through it, so a server
# asking for longer (Retry-After) is not waited for, and backoff stops growing here.
MAX_RETRY_AFTER = 60.0
# The longest stretch between two polls of ``CallOptions.cancelled``, in seconds. Polls are spaced
# at least this far apart while streaming too, since a poll may cost a database query.
POLL_INTERVAL = 0.2
# How much of an error body reaches the error message, in characters.
MAX_ERROR_TEXT = 300
# Named codes of an error object (``error.code``, or ``error.type`` without one) that may pass as
# 429 and 5xx may: OpenAI's and OpenRouter's for rate limits and server trouble, Anthropic's overload.
TRANSIENT_ERROR_CODES = frozenset(
    {"rate_limit_exceeded", "server_error", "service_unavailable", "overloaded", "overloaded_error"}
)


class ModelUnavailable(ModelError):
    """One model cannot answer this call, in a way another model may not share: every try failed in
    a way that may pass (timeouts, dropped connections, 429, 5xx, a reply cut off or empty), or the
    wait before the next try is more than the call can afford.

    ``str(error)`` is ``"<model>: <reason>"``, e.g. ``"gpt-x: HTTP 503 after 3 tries"``; a
    :class:`FallbackChain` moves on to its next model.
    """

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"{model}: {reason}")
        self.model = model
        self.reason = reason


class _Retryable(Exception):
    """One try failed in a way that may pass; ``retry_after`` is the server's wish, in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@dataclass
class _Answer:
    """What one try gathered, streamed or not."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str = ""


class ChatCompletionsModel:
    """One chat-completions endpoint (a :class:`~agents.models.ModelEndpoint` row) with its retries.

    Each try POSTs ``{base_url}/chat/completions``; there are ``endpoint.attempts`` tries.
    ``endpoint.timeout`` seconds (or the time left before ``options.deadline``, when less) bound
    the connect, each read, and the whole stream (checked as each line arrives, so a stalled
    stream ends by the read timeout). ``options.cancelled`` is
    polled as lines arrive and while waiting between tries, at most every :data:`POLL_INTERVAL`.
    """

    def __init__(self, endpoint: ModelEndpoint) -> None:
        self.endpoint = endpoint

    def complete(
        self, *, messages: list[ChatMessage], tools: list[ToolSpec], options: CallOptions | None = None
    ) -> ModelReply:
        """Ask the endpoint for the next message; ``ModelReply.model`` is the endpoint's name.

        ``cost`` is ``(input_tokens * input_price + output_tokens * output_price) / 1e6``, in the
        endpoint's currency. After a :class:`~agents.llm.Retry` the deltas start over.

        Before try ``n + 1`` the call waits what ``Retry-After`` asks, or else ``2 ** (n - 1)``
        seconds (at most :data:`MAX_RETRY_AFTER`) times a random factor in [0.5, 1], so clients
        that failed together do not come back together. A try runs for at most
        ``endpoint.timeout`` seconds and never past ``options.deadline``. A wait is never cut
        short: a ``Retry-After`` over :data:`MAX_RETRY_AFTER` (a worker thread must not sleep for
        hours), or any wait that would end past ``options.deadline``, makes the model unavailable
        for the call instead, naming the wait.

        Raises :class:`ModelCancelled` once ``options.cancelled()`` is True (never retried);
        :class:`ModelUnavailable` when every try failed in a way that may pass (a reply cut off
        at the length limit, or with neither text nor tool calls, is such a failed try) or the
        next wait is one the call cannot afford, and at once, without a retry, when the address
        policy refuses the endpoint's host (:mod:`parley.outbound`: "<model>: not called: the host
        '<host>' resolves to a private address; …", nothing sent); :class:`ModelError` once
        ``options.deadline`` passed, and at once for anything else (another 4xx, a malformed reply).
        """
        options = options or CallOptions()
        endpoint = self.endpoint
        body = _request_body(endpoint.upstream_model, messages, tools, options.response_format)
        headers = {"Accept": "text/event-stream, application/json"}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"
        # The process's kept-alive connections; the key goes with each request, never on the client.
        http = outbound.shared_client()
        attempt = 1
        while True:
            self._check(options)
            left = self._time_left(options)
            try:
                seconds = endpoint.timeout if left is None else min(endpoint.timeout, left)
                return self._reply(self._try(http, body, headers, options, seconds))
            except _Retryable as failure:
                left = self._time_left(options)  # a try the deadline cut off ends the call
                tries = "1 try" if attempt == 1 else f"{attempt} tries"
                if attempt >= endpoint.attempts:
                    raise ModelUnavailable(endpoint.name, f"{failure.reason} after {tries}") from failure
                wait, refusal = _wait(failure, attempt, left)
                if refusal:
                    raise ModelUnavailable(
                        endpoint.name, f"{failure.reason} after {tries}; {refusal}"
                    ) from failure
                if options.on_retry:
                    options.on_retry(
                        Retry(model=endpoint.name, attempt=attempt, wait=wait, reason=failure.reason)
                    )
                self._pause(wait, options)
            attempt += 1

    def _time_left(self, options: CallOptions) -> float | None:
        """Seconds left before ``options.deadline`` (None without one).

        Raises :class:`ModelError` once it has passed: no model can answer in time any more.
        """
        if options.deadline is None:
            return None
        left = (options.deadline - datetime.now(UTC)).total_seconds()
        if left <= 0:
            raise ModelError(
                f"{self.endpoint.name}: the deadline ({options.deadline:%Y-%m-%d %H:%M:%S %Z}) passed "
                "before the model answered"
            )
        return left

    def _try(
        self,
        http: httpx.Client,
        body: dict[str, Any],
        headers: dict[str, str],
        options: CallOptions,
        seconds: float,
    ) -> _Answer:
        """One POST, read to its end within ``seconds``; raises :class:`_Retryable` or :class:`ModelError`."""
        endpoint = self.endpoint
        deadline = time.monotonic() + seconds
        url = f"{endpoint.base_url.rstrip('/')}/chat/completions"
        try:
            with http.stream("POST", url, json=body, headers=headers, timeout=seconds) as response:
                if _transient(response.status_code):
                    response.read()
                    retry_after = _retry_after(response.headers.get("Retry-After"))
                    raise _Retryable(f"HTTP {response.status_code}", retry_after)
                if not response.is_success:
                    response.read()
                    message = self._redact(_error_text(response))
                    raise ModelError(
                        f"{endpoint.name}: HTTP {response.status_code}" + (f": {message}" if message else "")
                    )
                if "json" in response.headers.get("Content-Type", ""):
                    response.read()
                    answer = self._completion(response, _retry_after(response.headers.get("Retry-After")))
                    _check_usable(answer)
                    if answer.content and options.on_delta:
                        options.on_delta(answer.content)
                    return answer
                return _check_usable(self._stream(response, deadline, options))
        except netguard.AddressRefused as exc:
            if exc.private:  # the policy's: no retry changes it, another model may be elsewhere
                raise ModelUnavailable(endpoint.name, f"not called: {exc}") from exc
            raise _Retryable("could not connect") from exc
        except httpx.TimeoutException as exc:
            raise _Retryable("timed out") from exc
        except httpx.ConnectError as exc:
            raise _Retryable("could not connect") from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Retryable("connection dropped") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # Retrying cannot help: the URL is unusable, or the body is not decodable.
            raise ModelError(f"{endpoint.name}: {type(exc).__name__}: {exc}") from exc

    def _completion(self, response: httpx.Response, retry_after: float | None) -> _Answer:
        """A non-streamed answer: ``{"choices": [{"message": {...}}], "usage": {...}}``, or
        ``{"error": {...}}`` (see :meth:`_reported`; ``retry_after`` is the response's, in seconds)."""
        name = self.endpoint.name
        try:
            data = response.json()
            if data.get("error"):
                raise self._reported(data["error"], retry_after)
            if not data.get("choices"):
                raise ModelError(f"{name}: the answer has no choices")
            choice = data["choices"][0]
            message = choice["message"]
            calls = [
                ToolCall(
                    call.get("id") or _new_call_id(),
                    call["function"].get("name") or "",
                    *_arguments(call["function"].get("arguments")),
                )
                for call in message.get("tool_calls") or []
            ]
            answer = _Answer(
                content=message.get("content") or "",
                tool_calls=calls,
                finish_reason=choice.get("finish_reason") or "",
            )
            _read_usage(answer, data.get("usage"))
        except (ValueError, LookupError, TypeError, AttributeError) as exc:
            raise ModelError(f"{name}: the answer is not a chat completion we can read") from exc
        return answer

    def _stream(self, response: httpx.Response, deadline: float, options: CallOptions) -> _Answer:
        """A streamed answer: SSE ``data:`` chunks, then ``data: [DONE]``; tool calls come in by index."""
        name = self.endpoint.name
        answer = _Answer()
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        saw_choice = finished = False
        next_poll = 0.0
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise _Retryable("timed out")
            if time.monotonic() >= next_poll:
                self._check(options)
                next_poll = time.monotonic() + POLL_INTERVAL
            if not line.startswith("data:"):
                continue  # blank lines between events, comments (keep-alives), other SSE fields
            payload = line.removeprefix("data:").strip()
            if payload == "[DONE]":
                finished = True
                break
            try:
                chunk = json.loads(payload)
            except ValueError as exc:
                raise ModelError(
                    f"{name}: the stream carried a chunk that is not JSON: {payload[:80]!r}"
                ) from exc
            try:
                if chunk.get("error"):
                    raise self._reported(chunk["error"])
                _read_usage(answer, chunk.get("usage"))
                if not chunk.get("choices"):
                    continue  # the usage chunk, or a keep-alive
                saw_choice = True
                choice = chunk["choices"][0]
                answer.finish_reason = choice.get("finish_reason") or answer.finish_reason
                finished = finished or bool(answer.finish_reason)
                delta = choice.get("delta") or {}
                if piece := delta.get("content"):
                    content.append(piece)
                    if options.on_delta:
                        options.on_delta(piece)
                for position, part in enumerate(delta.get("tool_calls") or []):
                    index = part.get("index")
                    call = calls.setdefault(
                        index if isinstance(index, int) else position,
                        {"id": "", "name": "", "arguments": "", "raw_kind": ""},
                    )
                    function = part.get("function") or {}
                    # Some servers repeat the id and name on every chunk; only the arguments are split.
                    call["id"] = part.get("id") or call["id"]
                    call["name"] = function.get("name") or call["name"]
                    piece, raw_kind = _arguments(function.get("arguments"))
                    call["arguments"] += piece
                    call["raw_kind"] = call["raw_kind"] or raw_kind
            except (LookupError, TypeError, AttributeError, ValueError) as exc:
                raise ModelError(
                    f"{name}: the stream carried a chunk we cannot read: {payload[:80]!r}"
                ) from exc
        if not finished:
            # A stream without a length ends when the connection closes: a cut looks like an end.
            raise _Retryable("connection dropped")
        if not saw_choice:
            raise ModelError(f"{name}: the answer has no choices")
        answer.content = "".join(content)
        answer.tool_calls = [
            ToolCall(c["id"] or _new_call_id(), c["name"], c["arguments"], c["raw_kind"])
            for _, c in sorted(calls.items())
        ]
        return answer

    def _reply(self, answer: _Answer) -> ModelReply:
        endpoint = self.endpoint
        cost = (
            answer.input_tokens * endpoint.input_price + answer.output_tokens * endpoint.output_price
        ) / Decimal(1_000_000)
        return ModelReply(
            content=answer.content,
            tool_calls=tuple(answer.tool_calls),
            input_tokens=answer.input_tokens,
            output_tokens=answer.output_tokens,
            model=endpoint.name,
            cost=cost,
        )

    def _reported(self, error: Any, retry_after: float | None = None) -> _Retryable | ModelError:
        """What an ``error`` object in a 200 answer (its body, or a chunk of its stream) stands for.

        The object is ``{"code", "message"}``, ``code`` an HTTP status (an int or a numeric string)
        or a name (``"rate_limit_exceeded"``); ``type`` stands in for a missing code. 429, 5xx and
        :data:`TRANSIENT_ERROR_CODES` may pass (:class:`_Retryable`, after ``retry_after`` seconds
        when given); anything else is a :class:`ModelError`. Either names the code and the message,
        without the API key: ``"the reply reported error 429 (Rate limit exceeded)"``.
        """
        code: Any = None
        message: Any = error
        if isinstance(error, dict):
            code = error.get("code") if error.get("code") not in (None, "") else error.get("type")
            message = error.get("message")
        text = self._redact(" ".join(str(message or "").split()))[:MAX_ERROR_TEXT]
        reason = "the reply reported " + (f"error {code}" if code not in (None, "") else "an error")
        if text:
            reason += f" ({text})"
        if _transient(code):
            return _Retryable(reason, retry_after)
        return ModelError(f"{self.endpoint.name}: {reason}")

    def _check(self, options: CallOptions) -> None:
        if options.cancelled():
            raise ModelCancelled(f"{self.endpoint.name}: cancelled")

    def _pause(self, seconds: float, options: CallOptions) -> None:
        """Wait ``seconds`` between tries, in slices, so a cancellation is noticed within one."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, POLL_INTERVAL))
            self._check(options)

    def _redact(self, text: str) -> str:
        """``text`` without the API key: some servers quote the key they refused."""
        key = self.endpoint.api_key
        return text.replace(key, "[api key]") if key else text


class FallbackChain:
    """Models tried in order, as ``[(name, model), …]``: the next takes over once one is unavailable.

    Only :class:`ModelUnavailable` moves on (telling ``options.on_fallback(from, to, reason)``);
    any other :class:`ModelError`, cancellation included, ends the call. ``ModelReply.model`` is
    the name of the model that answered.
    """

    def __init__(self, models: Sequence[tuple[str, ChatModel]]) -> None:
        self.models = list(models)

    def complete(
        self, *, messages: list[ChatMessage], tools: list[ToolSpec], options: CallOptions | None = None
    ) -> ModelReply:
        """The first answer of the chain.

        Raises :class:`ModelError` saying what happened to each model once all are unavailable,
        e.g. ``"gpt-x: HTTP 503 after 3 tries; then backup: timed out after 3 tries"``.
        """
        options = options or CallOptions()
        spent: list[str] = []
        for position, (name, model) in enumerate(self.models):
            try:
                reply = model.complete(messages=messages, tools=tools, options=options)
            except ModelUnavailable as exc:
                spent.append(str(exc))
                if position + 1 < len(self.models) and options.on_fallback:
                    options.on_fallback(name, self.models[position + 1][0], exc.reason)
                continue
            return reply
        raise ModelError("; then ".join(spent))


def _request_body(
    upstream_model: str,
    messages: list[ChatMessage],
    tools: list[ToolSpec],
    response_format: dict[str, Any] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": upstream_model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    # Some servers refuse a function without an object schema.
                    "parameters": t.parameters or {"type": "object", "properties": {}},
                },
            }
            for t in tools
        ]
    if response_format is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": response_format},
        }
    return body


def _check_usable(answer: _Answer) -> _Answer:
    """``answer``, when it can be acted on; raises :class:`_Retryable` for one cut off at the length
    limit (its tool calls and text are incomplete) or one with neither text nor tool calls."""
    if answer.finish_reason == "length":
        raise _Retryable("the reply was cut off at the length limit")
    if not answer.content.strip() and not answer.tool_calls:
        raise _Retryable("the model answered nothing")
    return answer


def _read_usage(answer: _Answer, usage: Any) -> None:
    if isinstance(usage, dict):
        answer.input_tokens = int(usage.get("prompt_tokens") or 0)
        answer.output_tokens = int(usage.get("completion_tokens") or 0)


def _arguments(value: Any) -> tuple[str, str]:
    """A tool call's arguments as sent, as ``(text, raw_kind)`` (see :class:`~agents.llm.ToolCall`):
    a string (or none) as is; a bare JSON value sent in its place as its JSON text and kind."""
    if value is None or isinstance(value, str):
        return value or "", ""
    return json.dumps(value), json_kind(value)


def _transient(code: Any) -> bool:
    """Whether a failure with ``code`` may pass: an HTTP status (an int, or digits) of 429 or 5xx,
    or one of :data:`TRANSIENT_ERROR_CODES`."""
    if isinstance(code, str) and re.fullmatch(r"\d{3}", code.strip()):
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool):
        return code == 429 or 500 <= code <= 599
    return isinstance(code, str) and code.strip().lower() in TRANSIENT_ERROR_CODES


def _new_call_id() -> str:
    """An id for a tool call the server sent without one; results are matched to calls by id."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` (seconds, or an HTTP date) in seconds from now, at least 0; None when absent
    or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)  # "-0000" dates parse naive; HTTP dates are GMT
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds):
        return None
    return max(seconds, 0.0)


def _wait(failure: _Retryable, attempt: int, left: float | None) -> tuple[float, str]:
    """Seconds to wait after failed try ``attempt``, and "" or why that wait is not affordable.

    ``left`` is seconds to the call's deadline (None: none). See
    :meth:`ChatCompletionsModel.complete` for the rule.
    """
    if failure.retry_after is not None:
        wait = failure.retry_after
        if wait > MAX_RETRY_AFTER:
            return wait, f"Retry-After asks for {wait:g} s, more than the {MAX_RETRY_AFTER:g} s a call waits"
        if left is not None and wait >= left:
            return (
                wait,
                f"Retry-After asks for {wait:g} s, more than the {left:.1f} s left before the deadline",
            )
        return wait, ""
    base = min(2.0 ** (attempt - 1), MAX_RETRY_AFTER)
    # Jitter spreads the clients a failure hit at once; hundredths keep the timeline readable.
    wait = round(base * random.uniform(0.5, 1.0), 2)
    if left is not None and wait >= left:
        return wait, f"another try in {wait:g} s would start after the deadline ({left:.1f} s left)"
    return wait, ""


def _error_text(response: httpx.Response) -> str:
    """The error message of a refused request: ``error.message`` of a JSON body, or the text."""
    try:
        data = response.json()
    except ValueError:
        text = " ".join(response.text.split())
    else:
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            error = error.get("message")
        if not error and isinstance(data, dict):
            error = data.get("message") or data.get("detail")
        text = str(error) if error else ""
    return text[:MAX_ERROR_TEXT]
