"""The chat-completions client against a real chat-completions server on loopback, through ``model_for``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from agents.llm import (
    CallOptions,
    ChatModel,
    ModelCancelled,
    ModelError,
    Retry,
    ToolCall,
    ToolSpec,
    model_for,
)
from agents.models import Agent, ModelEndpoint
from parley.models import Tenant
from tests.chat_server import (
    ChatServer,
    Reply,
    drop,
    error_body,
    error_chunk,
    hang,
    malformed,
    sse,
    status,
    text,
    tool_calls,
    unstreamed,
)
from tests.conftest import PRIVATE

KEY = "sk-test-0123456789abcdef"
MESSAGES = [{"role": "system", "content": "You act for Tomas."}, {"role": "user", "content": "Hello."}]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as chat:
        yield chat


def endpoint(tenant: Tenant, server: ChatServer, name: str = "gpt-x", **fields: Any) -> ModelEndpoint:
    """An endpoint on the loopback server: a 2 s timeout and 3 tries unless ``fields`` say otherwise."""
    values: dict[str, Any] = {
        "base_url": server.url,
        "api_key": KEY,
        "upstream_model": f"upstream-{name}",
        "timeout": 2.0,
        "attempts": 3,
        **fields,
    }
    return ModelEndpoint.objects.create(tenant=tenant, name=name, **values)


def model(agent: Agent, name: str, *fallbacks: str) -> ChatModel:
    agent.model, agent.fallback_models = name, list(fallbacks)
    return model_for(agent)


@dataclass
class Seen:
    """What the call options were told."""

    deltas: list[str] = field(default_factory=list)
    retries: list[Retry] = field(default_factory=list)
    fallbacks: list[tuple[str, str, str]] = field(default_factory=list)

    def options(self, **fields: Any) -> CallOptions:
        return CallOptions(
            on_delta=self.deltas.append,
            on_retry=self.retries.append,
            on_fallback=lambda *change: self.fallbacks.append(change),
            **fields,
        )


def ask(chat: ChatModel, seen: Seen, *, tools: list[ToolSpec] | None = None, **fields: Any) -> Any:
    return chat.complete(messages=MESSAGES, tools=tools or [], options=seen.options(**fields))


def backed_off(retry: Retry, reason: str) -> bool:
    """Whether ``retry`` waits the jittered backoff of its attempt for ``reason``: 2 ** (attempt - 1)
    seconds times a factor in [0.5, 1]."""
    base = 2.0 ** (retry.attempt - 1)
    return retry.reason == reason and base / 2 <= retry.wait <= base


def test_a_streamed_answer_arrives_in_order_with_its_usage_and_cost(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, input_price=Decimal("2.5"), output_price=Decimal("10"))
    server.script(text("Hello there, partner.", input_tokens=1200, output_tokens=300, pieces=4))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "Hello there, partner."
    assert seen.deltas == ["Hello ", "there,", " partn", "er."]
    assert (reply.model, reply.input_tokens, reply.output_tokens) == ("gpt-x", 1200, 300)
    assert reply.cost == Decimal("0.006")
    assert reply.tool_calls == ()
    [request] = server.requests
    assert request.body == {
        "model": "upstream-gpt-x",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_tools_and_the_response_format_are_sent(tenant: Tenant, agent: Agent, server: ChatServer) -> None:
    endpoint(tenant, server, api_key="")
    schema = {"type": "object", "properties": {"price": {"type": "number"}}, "required": ["price"]}
    tools = [
        ToolSpec(
            "ask_user", "Ask the party.", {"type": "object", "properties": {"question": {"type": "string"}}}
        ),
        ToolSpec("ping", "No arguments."),
    ]

    ask(model(agent, "gpt-x"), Seen(), tools=tools, response_format=schema)

    [request] = server.requests
    assert request.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ask_user",
                "description": "Ask the party.",
                "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "ping",
                "description": "No arguments.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }
    assert "authorization" not in request.headers


def test_parallel_tool_calls_are_assembled_from_deltas_in_order(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    server.script(
        tool_calls(
            ("call_a", "negotiate", '{"targets": [{"url": "https://a.example/a2a"}]}'),
            ("call_b", "ask_user", '{"question": "Which budget?"}'),
            content="Two things at once.",
        )
    )

    reply = ask(model(agent, "gpt-x"), Seen())

    assert reply.content == "Two things at once."
    assert reply.tool_calls == (
        ToolCall("call_a", "negotiate", '{"targets": [{"url": "https://a.example/a2a"}]}'),
        ToolCall("call_b", "ask_user", '{"question": "Which budget?"}'),
    )


def test_malformed_tool_call_arguments_are_passed_through_raw(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    server.script(tool_calls(("call_a", "negotiate", '{"targets": [')))

    reply = ask(model(agent, "gpt-x"), Seen())

    assert reply.tool_calls == (ToolCall("call_a", "negotiate", '{"targets": ['),)


@pytest.mark.parametrize(
    ("sent", "arguments", "raw_kind"),
    [
        ({"order": "A-17"}, '{"order": "A-17"}', "object"),
        (["A-17"], '["A-17"]', "array"),
        (17, "17", "number"),
        ('["A-17"]', '["A-17"]', ""),
    ],
    ids=["object", "array", "number", "string-holding-an-array"],
)
@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "json"])
def test_arguments_sent_as_a_bare_json_value_are_marked_with_its_kind(
    tenant: Tenant,
    agent: Agent,
    server: ChatServer,
    sent: Any,
    arguments: str,
    raw_kind: str,
    streamed: bool,
) -> None:
    """Chat completions carry arguments as a string; a server that sends the JSON value itself gets
    its text kept for the record and its kind noted, so the loop can refuse the call."""
    endpoint(tenant, server)
    reply = tool_calls(("call_a", "lookup", sent))
    if not streamed:
        reply = unstreamed(reply)
    server.script(reply)

    answer = ask(model(agent, "gpt-x"), Seen())

    assert answer.tool_calls == (ToolCall("call_a", "lookup", arguments, raw_kind),)


def test_a_json_answer_is_read_when_the_server_does_not_stream(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Plain.",
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "ping", "arguments": "{}"}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    }
    server.script(status(200, body=completion))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert (reply.content, reply.input_tokens, reply.output_tokens) == ("Plain.", 7, 3)
    assert reply.tool_calls == (ToolCall("call_a", "ping", "{}"),)
    assert seen.deltas == ["Plain."]


def test_sse_comments_are_skipped_and_a_stream_cut_short_is_retried(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    hello = json.dumps({"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]})
    done = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    # Closed after a chunk, without a finish_reason or [DONE]: a cut, though the body is whole.
    server.script(
        sse(f"data: {hello}"), sse(": keep-alive", f"data: {hello}", f"data: {done}", "data: [DONE]")
    )
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "Hi"
    [retry] = seen.retries
    assert (retry.model, retry.attempt) == ("gpt-x", 1)
    assert backed_off(retry, "connection dropped")


CUT_OFF = "the reply was cut off at the length limit"
NOTHING = "the model answered nothing"


@pytest.mark.parametrize(
    ("refused", "reason"),
    [
        (text("Here is half a sen", finish_reason="length"), CUT_OFF),
        (tool_calls(("call_a", "lookup", '{"order": "A-'), finish_reason="length"), CUT_OFF),
        (unstreamed(text("Here is half", finish_reason="length")), CUT_OFF),
        (text(""), NOTHING),
        (text(" \n "), NOTHING),
        (unstreamed(text("")), NOTHING),
    ],
    ids=["text-cut", "tool-call-cut", "json-cut", "empty", "blank", "json-empty"],
)
def test_a_reply_that_cannot_be_acted_on_is_a_failed_try(
    tenant: Tenant, agent: Agent, server: ChatServer, refused: Reply, reason: str
) -> None:
    """A reply cut off at the length limit (incomplete text and tool calls), or with neither text nor
    tool calls, is never the answer: the try is retried, as one that may pass."""
    endpoint(tenant, server)
    server.script(refused, text("Whole."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert (reply.content, reply.tool_calls) == ("Whole.", ())
    assert [(r.attempt, r.reason) for r in seen.retries] == [(1, reason)]


def test_replies_cut_off_on_every_model_fail_the_call_naming_it(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, attempts=2)
    endpoint(tenant, server, name="backup", attempts=1)
    cut = tool_calls(("call_a", "lookup", '{"order": "A-'), finish_reason="length")
    server.script(cut, cut, cut)
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x", "backup"), seen)

    assert str(error.value) == f"gpt-x: {CUT_OFF} after 2 tries; then backup: {CUT_OFF} after 1 try"
    assert seen.fallbacks == [("gpt-x", "backup", f"{CUT_OFF} after 2 tries")]


def test_429_waits_as_long_as_retry_after_asks(tenant: Tenant, agent: Agent, server: ChatServer) -> None:
    endpoint(tenant, server)
    server.script(status(429, headers={"Retry-After": "1"}), text("At last."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "At last."
    assert seen.retries == [Retry(model="gpt-x", attempt=1, wait=1.0, reason="HTTP 429")]
    assert len(server.requests) == 2


def test_5xx_is_retried_with_jittered_backoff_unless_retry_after_says_otherwise(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, attempts=4)
    server.script(status(500), status(502), status(503, headers={"Retry-After": "0"}), text("Back up."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "Back up."
    first, second, third = seen.retries
    assert [r.attempt for r in seen.retries] == [1, 2, 3]
    assert backed_off(first, "HTTP 500")  # 0.5 to 1 s
    assert backed_off(second, "HTTP 502")  # 1 to 2 s
    assert third == Retry(model="gpt-x", attempt=3, wait=0.0, reason="HTTP 503")


def test_a_retry_after_longer_than_a_call_waits_falls_back_without_waiting(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    """Without a deadline a call still waits at most MAX_RETRY_AFTER: a worker thread must not sleep
    for an hour because a server asked it to."""
    endpoint(tenant, server)
    endpoint(tenant, server, name="backup")
    server.script(status(429, headers={"Retry-After": "3600"}), text("From the backup."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x", "backup"), seen)

    assert (reply.content, reply.model, seen.retries) == ("From the backup.", "backup", [])
    assert seen.fallbacks == [
        (
            "gpt-x",
            "backup",
            "HTTP 429 after 1 try; Retry-After asks for 3600 s, more than the 60 s a call waits",
        )
    ]


def test_a_retry_after_past_the_deadline_fails_the_call_naming_it(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    server.script(status(503, headers={"Retry-After": "45"}))
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x"), seen, deadline=timezone.now() + timedelta(seconds=30))

    assert re.fullmatch(
        r"gpt-x: HTTP 503 after 1 try; "
        r"Retry-After asks for 45 s, more than the \d+\.\d s left before the deadline",
        str(error.value),
    )
    assert (len(server.requests), seen.retries) == (1, [])


def test_a_backoff_past_the_deadline_fails_the_call_naming_it(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    server.script(status(500))
    seen = Seen()

    # The first backoff is at least 0.5 s.
    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x"), seen, deadline=timezone.now() + timedelta(seconds=0.45))

    assert re.fullmatch(
        r"gpt-x: HTTP 500 after 1 try; "
        r"another try in [\d.]+ s would start after the deadline \(0\.\d s left\)",
        str(error.value),
    )
    assert (len(server.requests), seen.retries) == (1, [])


def test_a_try_is_cut_off_at_the_deadline_and_the_call_fails_naming_it(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, timeout=10.0)
    endpoint(tenant, server, name="backup")
    server.script(hang(30))
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x", "backup"), seen, deadline=timezone.now() + timedelta(seconds=0.5))

    assert re.fullmatch(
        r"gpt-x: the deadline \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\) passed before the model answered",
        str(error.value),
    )
    assert (len(server.requests), seen.retries, seen.fallbacks) == (1, [], [])


def test_a_deadline_that_passed_asks_no_model(tenant: Tenant, agent: Agent, server: ChatServer) -> None:
    endpoint(tenant, server)

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x"), Seen(), deadline=datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC))

    assert (
        str(error.value) == "gpt-x: the deadline (2020-01-02 03:04:05 UTC) passed before the model answered"
    )
    assert server.requests == []


def test_a_deadline_without_a_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CallOptions(deadline=datetime(2099, 1, 1))


def test_a_timeout_is_retried(tenant: Tenant, agent: Agent, server: ChatServer) -> None:
    endpoint(tenant, server, timeout=0.3)
    server.script(hang(5), text("In time."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "In time."
    [retry] = seen.retries
    assert backed_off(retry, "timed out")


@pytest.mark.parametrize("cut", [drop(), drop(after_chunks=2)], ids=["before-answering", "mid-stream"])
def test_a_dropped_connection_is_retried(
    tenant: Tenant, agent: Agent, server: ChatServer, cut: Reply
) -> None:
    endpoint(tenant, server)
    server.script(cut, text("Whole."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "Whole."
    [retry] = seen.retries
    assert backed_off(retry, "connection dropped")
    assert len(server.requests) == 2


def test_401_fails_at_once_without_the_api_key_in_the_error(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    endpoint(tenant, server, name="backup")
    server.script(status(401, body={"error": {"message": f"Incorrect API key provided: {KEY}."}}))
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x", "backup"), seen)

    assert str(error.value) == "gpt-x: HTTP 401: Incorrect API key provided: [api key]."
    assert (len(server.requests), seen.retries, seen.fallbacks) == (1, [], [])


NOW = {"Retry-After": "0"}


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (
            error_body(429, "Rate limit exceeded", headers=NOW),
            "the reply reported error 429 (Rate limit exceeded)",
        ),
        (
            error_body("503", "No provider available", headers=NOW),
            "the reply reported error 503 (No provider available)",
        ),
        (
            error_body("rate_limit_exceeded", "Slow down", headers=NOW),
            "the reply reported error rate_limit_exceeded (Slow down)",
        ),
        (
            status(200, headers=NOW, body={"error": {"type": "server_error", "message": "Try later"}}),
            "the reply reported error server_error (Try later)",
        ),
        (
            error_chunk(502, "Provider disconnected", content="Half an ans"),
            "the reply reported error 502 (Provider disconnected)",
        ),
        (
            error_chunk("server_error", "Upstream died"),
            "the reply reported error server_error (Upstream died)",
        ),
    ],
    ids=[
        "body-429",
        "body-503-as-digits",
        "body-named-code",
        "body-type-for-code",
        "chunk-502",
        "chunk-named-code",
    ],
)
def test_an_error_object_in_a_200_answer_with_a_passing_code_is_retried(
    tenant: Tenant, agent: Agent, server: ChatServer, failure: Reply, reason: str
) -> None:
    endpoint(tenant, server)
    server.script(failure, text("At last."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x"), seen)

    assert reply.content == "At last."
    assert [(r.attempt, r.reason) for r in seen.retries] == [(1, reason)]
    assert len(server.requests) == 2


def test_an_error_object_with_a_passing_code_falls_back_once_the_tries_are_spent(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, attempts=2)
    endpoint(tenant, server, name="backup")
    busy = error_body(429, "Rate limit exceeded", headers=NOW)
    server.script(busy, busy, text("From the backup."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x", "backup"), seen)

    assert (reply.content, reply.model) == ("From the backup.", "backup")
    assert seen.fallbacks == [
        ("gpt-x", "backup", "the reply reported error 429 (Rate limit exceeded) after 2 tries")
    ]


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (
            error_body(400, f"Invalid model for key {KEY}"),
            "gpt-x: the reply reported error 400 (Invalid model for key [api key])",
        ),
        (
            error_body("402", "Insufficient credits"),
            "gpt-x: the reply reported error 402 (Insufficient credits)",
        ),
        (
            error_body("context_length_exceeded", "Too long"),
            "gpt-x: the reply reported error context_length_exceeded (Too long)",
        ),
        (
            error_chunk(403, "Flagged by moderation", content="I will"),
            "gpt-x: the reply reported error 403 (Flagged by moderation)",
        ),
        (sse('data: {"error": "boom"}'), "gpt-x: the reply reported an error (boom)"),
        (status(200, body={"error": {"code": 400}}), "gpt-x: the reply reported error 400"),
    ],
    ids=[
        "body-400",
        "body-402-as-digits",
        "body-named-code",
        "chunk-403",
        "chunk-without-code",
        "body-without-message",
    ],
)
def test_an_error_object_with_any_other_code_fails_at_once_naming_it(
    tenant: Tenant, agent: Agent, server: ChatServer, failure: Reply, message: str
) -> None:
    endpoint(tenant, server)
    endpoint(tenant, server, name="backup")
    server.script(failure)
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x", "backup"), seen)

    assert str(error.value) == message
    assert (len(server.requests), seen.retries, seen.fallbacks) == (1, [], [])


def test_the_fallback_takes_over_once_the_primarys_tries_are_spent(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, attempts=2)
    endpoint(tenant, server, name="backup")
    busy = status(503, headers={"Retry-After": "0"})
    server.script(busy, busy, text("From the backup."))
    seen = Seen()

    reply = ask(model(agent, "gpt-x", "backup"), seen)

    assert (reply.content, reply.model) == ("From the backup.", "backup")
    assert seen.fallbacks == [("gpt-x", "backup", "HTTP 503 after 2 tries")]
    assert [r.body["model"] for r in server.requests] == [
        "upstream-gpt-x",
        "upstream-gpt-x",
        "upstream-backup",
    ]


def test_offline_may_be_a_fallback(tenant: Tenant, agent: Agent, server: ChatServer) -> None:
    endpoint(tenant, server, attempts=1)
    server.script(status(502))

    reply = ask(model(agent, "gpt-x", "offline"), Seen())

    assert reply.model == "offline"


def test_when_every_model_is_spent_the_error_says_what_happened(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server, attempts=1)
    endpoint(tenant, server, name="backup", attempts=1, timeout=0.3)
    server.script(status(503), hang(5))
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x", "backup"), seen)

    assert str(error.value) == "gpt-x: HTTP 503 after 1 try; then backup: timed out after 1 try"
    assert seen.fallbacks == [("gpt-x", "backup", "HTTP 503 after 1 try")]


def test_cancelling_mid_stream_stops_the_call(tenant: Tenant, agent: Agent, server: ChatServer) -> None:
    endpoint(tenant, server)
    endpoint(tenant, server, name="backup")
    server.script(text("one two three four five six", pieces=6, chunk_delay=0.1))
    seen = Seen()

    with pytest.raises(ModelCancelled):
        ask(model(agent, "gpt-x", "backup"), seen, cancelled=lambda: bool(seen.deltas))

    assert 1 <= len(seen.deltas) < 6
    assert (len(server.requests), seen.retries, seen.fallbacks) == (1, [], [])


def test_cancelling_while_waiting_to_retry_stops_the_retries(
    tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(tenant, server)
    server.script(status(500))
    seen = Seen()

    with pytest.raises(ModelCancelled):
        ask(model(agent, "gpt-x"), seen, cancelled=lambda: bool(seen.retries))

    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (malformed(), "gpt-x: the stream carried a chunk that is not JSON: '{not json'"),
        (status(200, body={"choices": []}), "gpt-x: the answer has no choices"),
        (sse('data: {"choices": []}', "data: [DONE]"), "gpt-x: the answer has no choices"),
    ],
    ids=["bad-json-chunk", "json-without-choices", "stream-without-choices"],
)
def test_a_malformed_answer_fails_at_once(
    tenant: Tenant, agent: Agent, server: ChatServer, reply: Reply, message: str
) -> None:
    endpoint(tenant, server)
    server.script(reply)
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x"), seen)

    assert str(error.value) == message
    assert (len(server.requests), seen.retries) == (1, [])


@pytest.mark.parametrize("names", [("nope",), ("gpt-x", "nope")], ids=["primary", "fallback"])
def test_an_unknown_model_name_is_an_error(
    tenant: Tenant, agent: Agent, server: ChatServer, names: tuple[str, ...]
) -> None:
    endpoint(tenant, server)

    with pytest.raises(ModelError, match="'nope' is not available"):
        model(agent, *names)


def test_another_tenants_endpoint_is_not_available(
    other_tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    endpoint(other_tenant, server)

    with pytest.raises(ModelError, match="'gpt-x' is not available"):
        model(agent, "gpt-x")
    assert server.requests == []


# The endpoint's URL is the tenant's: it is called on public addresses only (parley.outbound).


def test_an_endpoint_on_a_private_address_is_not_called_and_the_fallback_takes_over(
    settings: Any, tenant: Tenant, agent: Agent, server: ChatServer
) -> None:
    """Saved while the setting allowed it, or its name (``localhost``) resolves to loopback since: the
    call is refused where it connects, at once, without retries, and the next model answers."""
    endpoint(tenant, server, base_url=server.url.replace("127.0.0.1", "localhost"))
    settings.OUTBOUND_ALLOW_PRIVATE = False
    seen = Seen()

    reply = ask(model(agent, "gpt-x", "offline"), seen)

    assert reply.model == "offline"
    reason = f"not called: the host 'localhost' {PRIVATE}"
    assert (seen.fallbacks, seen.retries, server.requests) == ([("gpt-x", "offline", reason)], [], [])


def test_an_endpoint_on_the_metadata_address_fails_the_call_naming_the_policy(
    settings: Any, tenant: Tenant, agent: Agent
) -> None:
    ModelEndpoint.objects.create(
        tenant=tenant, name="gpt-x", base_url="http://169.254.169.254/v1", upstream_model="m", timeout=2.0
    )
    settings.OUTBOUND_ALLOW_PRIVATE = False
    seen = Seen()

    with pytest.raises(ModelError) as error:
        ask(model(agent, "gpt-x"), seen)

    assert str(error.value) == f"gpt-x: not called: the host '169.254.169.254' {PRIVATE}"
    assert seen.retries == []
