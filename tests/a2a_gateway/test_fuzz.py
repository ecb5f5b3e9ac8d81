"""Property-based fuzz of an agent's public JSON-RPC endpoint: never a 5xx, every error well formed.

Hypothesis builds requests — envelopes valid and broken (fields missing, extra or
of the wrong type; huge and odd ids; unknown methods; A2A 1.0 and 0.3 method
names), params a mutation or two away from a valid request (deep nesting, NUL,
lone surrogates, text over the agent's cap, private push URLs, ids of real open
and finished tasks), bodies that are not JSON at all, and odd headers
(A2A-Version, Content-Type, credentials, extensions, Origin) — and POSTs each
over loopback to the live stack's uvicorn, at an anonymous agent and at one
that requires an API key, with its key or without. Whatever the gateway
chooses to answer, the answer must have these properties (JSON-RPC 2.0 §4-5;
the A2A 1.0 specification's error codes; SSE per the HTML living standard
§9.2 "Server-sent events"):

* the HTTP status is below 500;
* a JSON answer is one JSON-RPC response object: ``jsonrpc`` "2.0", an ``id``,
  and exactly one of ``result`` and ``error``; a non-2xx answer is an error;
* ``id`` is the request's when that was a valid id (a string, or an integer of
  any size), else null. A number with a fraction (JSON-RPC: "SHOULD NOT") may
  be echoed or null, and so may any id in an answer outside HTTP 200 — the
  edge can refuse a call before it reads the body;
* an error's ``code`` is an integer in the ranges JSON-RPC reserves (-32700,
  -32603..-32600, and -32099..-32000, where A2A's own codes sit) and its
  ``message`` a non-empty string;
* an SSE answer (``text/event-stream``, the streaming methods) is HTTP 200 with
  at least one event, each event's ``data`` such a response object, and an
  ``event: error`` carries an error. A stream still open when it falls quiet
  (a subscription to an open task) is read up to there.

The runs are bounded (200 examples in all), derandomized and keep no example
database, so every run tries the same requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from a2a_gateway.auth import inbound_key_create
from agents.models import Agent
from tests.a2a_gateway.conftest import TIMEOUT, Endpoint, endpoint_of, move, proposal, run, user_message
from tests.conftest import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

FUZZ = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    # The fixtures (agents, real tasks) are set up once per test on purpose: every example shares them.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# An open SSE stream silent this long is taken as a subscription waiting for news, and read up to there.
STREAM_IDLE = 5.0

METHODS_1_0 = (
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
)
METHODS_0_3 = (
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
)
STREAMING = ("SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe")
UNKNOWN_METHODS = (
    "sendMessage",
    "SENDMESSAGE",
    "SendMessage ",
    "message/Send",
    "tasks/list",
    "tasks/pushNotificationConfig/unset",
    "rpc.discover",
    "",
    "\x00",
)
VERSIONS = (
    "1.0",
    "1",
    "1.0.0",
    "1.1",
    "1.99",
    "2.0",
    "0.3",
    "0.3.0",
    "0.2",
    "",
    "abc",
    "1.0, 0.3",
    "v1.0",
    "-1",
    "1e3",
    "99999999999999999999.0",
)
CONTENT_TYPES = (
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "application/json-rpc",
    "text/plain",
    "text/event-stream",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "*/*",
    "",
)
PUSH_URLS = (
    "http://127.0.0.1:9/hook",
    "http://localhost/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://[::1]/hook",
    "http://10.0.0.1/hook",
    "http://0x7f000001/hook",
    "https://push.invalid/hook",  # .invalid never resolves (RFC 6761): nothing leaves the machine
    "ftp://push.invalid/hook",
    "not a url",
    "",
)
ODD_STRINGS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\u202e",
    "😀",
    "null",
    "0",
    "../../etc/passwd",
)

texts = st.one_of(
    st.text(max_size=24),  # any code point but lone surrogates, NUL included
    st.sampled_from(ODD_STRINGS),
    # Past the id columns (200) and past the agent's max_input_chars (8000 by default).
    st.integers(min_value=150, max_value=9_000).map(lambda n: "x" * n),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=10,
)
valid_ids = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 10**40]),
    texts,
    st.none(),
)
# Mostly valid, so that most requests get past the envelope; a float, a boolean, an array or an object not.
request_ids = st.one_of(
    valid_ids,
    valid_ids,
    valid_ids,
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.sampled_from([[], {}, [1], {"id": 1}]),
)
uuids = st.uuids().map(str)


@dataclass(frozen=True)
class Target:
    """An endpoint, and the headers that say who calls it."""

    url: str
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Ground:
    """What the examples share: whom to call and real tasks to name."""

    anonymous: Target  # the seller, which anyone may call
    keyed: Target  # an agent that requires an API key, with its key
    tasks: tuple[tuple[str, str], ...]  # (task id, context id): open and finished

    def targets(self) -> st.SearchStrategy[Target]:
        """The anonymous seller; the keyed agent with its key, or without (refused, whatever is sent)."""
        keyless = Target(self.keyed.url)
        return st.sampled_from([self.anonymous, self.anonymous, self.keyed, keyless])


@pytest.fixture
def ground(live_stack: LiveStack, seller: Agent, seller_endpoint: Endpoint) -> Ground:
    """The seller and a key-only agent beside it; an open and a finished task of the seller's
    anonymous caller, and an open task of the key's.

    The per-caller rate limits are lifted so that every example reaches past them.
    """
    Agent.across_tenants.filter(pk=seller.pk).update(rate_limit=1_000_000)
    vera = Agent.objects.create(
        tenant=seller.tenant,
        slug="vera",
        name="Vera",
        terms="amount (number, EUR per day), currency",
        inbound_auth=Agent.InboundAuth.API_KEY,
        rate_limit=1_000_000,
    )
    _, key = inbound_key_create(agent=vera, name="fuzz")
    keyed = Target(endpoint_of(live_stack, vera).url, (("X-API-Key", key.encode()),))
    open_task = seller_endpoint.send(user_message(proposal(800)))
    closing = seller_endpoint.send(user_message(proposal(800)))
    finished = seller_endpoint.send(user_message(move("reject", "No, thank you."), task=closing))
    opening = {"message": MessageToDict(user_message(proposal(800)))}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": opening}
    answer = run(
        lambda http: http.post(keyed.url, json=body, headers={"A2A-Version": "1.0", "X-API-Key": key})
    )
    keyed_task = answer.json()["result"]["task"]
    return Ground(
        anonymous=Target(seller_endpoint.url),
        keyed=keyed,
        tasks=(
            (open_task.id, open_task.context_id),
            (finished.id, finished.context_id),
            (keyed_task["id"], keyed_task["contextId"]),
        ),
    )


# --- requests ----------------------------------------------------------------------------------


def task_refs(ground: Ground) -> st.SearchStrategy[tuple[str, str]]:
    """A (task id, context id): a real task's, a mix of two, or made up."""
    real = st.sampled_from(ground.tasks)
    made_up = st.tuples(st.one_of(uuids, texts), st.one_of(uuids, texts))
    return st.one_of(real, real, made_up)


@st.composite
def moves(draw: st.DrawFn) -> dict[str, Any]:
    """A negotiation move, mostly valid."""
    action = draw(st.sampled_from(["propose", "counter", "accept", "reject", "walk", ""]))
    amount = draw(st.one_of(st.integers(min_value=0, max_value=3_000), st.sampled_from([-1, 0.5, 10**30])))
    text = draw(st.one_of(st.just("I can pay €900 a day."), texts))
    data: dict[str, Any] = {"action": action, "message": text}
    if draw(st.booleans()):
        data["terms"] = {"amount": amount, "currency": draw(st.sampled_from(["EUR", "USD", ""]))}
        data["offerId"] = draw(uuids)
    if action == "accept":
        data["acceptsOfferId"] = draw(st.one_of(uuids, texts))
    return data


@st.composite
def messages(draw: st.DrawFn, ground: Ground, *, v0_3: bool) -> dict[str, Any]:
    """A user message on the 1.0 or the 0.3 wire, on a task sometimes."""
    move_part = moves().map(lambda m: {"kind": "data", "data": m} if v0_3 else {"data": m})
    part = st.one_of(
        move_part,
        texts.map(lambda t: {"kind": "text", "text": t} if v0_3 else {"text": t}),
        json_values.map(lambda v: {"kind": "data", "data": v} if v0_3 else {"data": v}),
        st.just(
            {"kind": "file", "file": {"uri": "https://files.invalid/a.pdf", "mimeType": "application/pdf"}}
            if v0_3
            else {"url": "https://files.invalid/a.pdf", "mediaType": "application/pdf"}
        ),
        st.binary(max_size=16).map(
            lambda b: (
                {"kind": "file", "file": {"bytes": base64.b64encode(b).decode()}}
                if v0_3
                else {"raw": base64.b64encode(b).decode()}
            )
        ),
    )
    # A lone move, mostly: the message then gets as far as the negotiation.
    parts = st.one_of(move_part.map(lambda p: [p]), st.lists(part, min_size=1, max_size=3))
    message: dict[str, Any] = {
        "messageId": draw(uuids),
        "role": "user" if v0_3 else draw(st.sampled_from(["ROLE_USER", "ROLE_USER", "ROLE_AGENT", "user"])),
        "parts": draw(parts),
    }
    if v0_3:
        message["kind"] = "message"
    if draw(st.booleans()):
        message["taskId"], message["contextId"] = draw(task_refs(ground))
    return message


@st.composite
def params_for(draw: st.DrawFn, method: str, ground: Ground) -> Any:
    """Valid params for ``method`` (any other method: arbitrary JSON), before mutation."""
    v0_3 = "/" in method
    task_id, context_id = draw(task_refs(ground))
    push_url = draw(st.sampled_from(PUSH_URLS))
    history = draw(st.one_of(st.integers(min_value=-2, max_value=100), st.just(2**40)))
    if method in ("SendMessage", "SendStreamingMessage", "message/send", "message/stream"):
        params: dict[str, Any] = {"message": draw(messages(ground, v0_3=v0_3))}
        if draw(st.booleans()):
            push = {"url": push_url, "token": "t"}
            params["configuration"] = (
                {"blocking": draw(st.booleans()), "historyLength": history, "pushNotificationConfig": push}
                if v0_3
                else {
                    "historyLength": history,
                    "returnImmediately": draw(st.booleans()),
                    "acceptedOutputModes": ["application/json"],
                    "taskPushNotificationConfig": push,
                }
            )
        return params
    if method in ("GetTask", "tasks/get"):
        return {"id": task_id, "historyLength": history}
    if method in ("CancelTask", "tasks/cancel", "SubscribeToTask", "tasks/resubscribe"):
        return {"id": task_id}
    if method == "ListTasks":
        return {
            "contextId": context_id,
            "status": draw(st.sampled_from(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED", "nope", 3])),
            "pageSize": draw(st.integers(min_value=-1, max_value=1_000)),
            "pageToken": draw(texts),
            "historyLength": history,
            "statusTimestampAfter": draw(st.sampled_from(["2024-01-01T00:00:00Z", "yesterday", 0])),
            "includeArtifacts": draw(st.booleans()),
        }
    if method == "CreateTaskPushNotificationConfig":
        return {"taskId": task_id, "url": push_url, "token": "t", "id": draw(texts)}
    if method in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        return {"taskId": task_id, "id": draw(texts)}
    if method == "ListTaskPushNotificationConfigs":
        return {"taskId": task_id, "pageSize": draw(st.integers(min_value=-1, max_value=1_000))}
    if method == "tasks/pushNotificationConfig/set":
        return {"taskId": task_id, "pushNotificationConfig": {"url": push_url, "token": "t"}}
    if method in ("tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/delete"):
        return {"id": task_id, "pushNotificationConfigId": draw(texts)}
    if method == "tasks/pushNotificationConfig/list":
        return {"id": task_id}
    if method in ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"):
        return {}
    return draw(json_values)


Path = tuple[str | int, ...]


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every place in a JSON value, the root first."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from paths(child, (*prefix, key))


def nested(depth: int, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` alternating objects and arrays."""
    for level in range(depth):
        leaf = {"a": leaf} if level % 2 else [leaf]
    return leaf


@st.composite
def mutated(draw: st.DrawFn, value: Any, *, most: int) -> Any:
    """``value`` after up to ``most`` mutations: a member dropped, replaced, nested deep, or one added."""
    value = json.loads(json.dumps(value))
    for _ in range(draw(st.integers(min_value=0, max_value=most))):
        where = draw(st.sampled_from(list(paths(value))))
        how = draw(st.sampled_from(["drop", "replace", "nest", "extra"]))
        if how == "extra":
            target = _at(value, where)
            if isinstance(target, dict):
                target[draw(texts)] = draw(json_values)
            continue
        if not where:  # the root: replaced, never dropped
            value = draw(json_values) if how != "nest" else nested(draw(st.integers(1, 300)), value)
            continue
        parent, key = _at(value, where[:-1]), where[-1]
        if how == "drop":
            del parent[key]
        elif how == "replace":
            parent[key] = draw(json_values)
        else:
            parent[key] = nested(draw(st.integers(min_value=1, max_value=300)), parent[key])
    return value


def _at(value: Any, where: Path) -> Any:
    for key in where:
        value = value[key]
    return value


@st.composite
def envelopes(
    draw: st.DrawFn, ground: Ground, *, methods: st.SearchStrategy[str], most: int, damage: int = 0
) -> Any:
    """A JSON-RPC request body for one of ``methods``, with up to ``most`` mutations of its params
    and up to ``damage`` of the envelope (a member dropped, replaced or added)."""
    method = draw(methods)
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": draw(request_ids),
        "method": method,
        "params": draw(mutated(draw(params_for(method, ground)), most=most)),
    }
    # One envelope in four is damaged: the rest get as far as the method.
    # (Hypothesis leans to the first of a sampled_from: there, the least damage.)
    damaged = damage > 0 and draw(st.sampled_from([False, False, False, True]))
    for _ in range(damage if damaged else 0):
        key = draw(st.sampled_from(["extra", "params", "id", "method", "jsonrpc"]))
        how = draw(st.sampled_from(["replace", "drop"]))
        if key == "extra":
            body[draw(texts)] = draw(json_values)
        elif how == "drop":
            body.pop(key, None)
        else:
            body[key] = draw(st.one_of(json_values, st.sampled_from(["1.0", "2", 2.0, "2.0 "])))
    return body


# Known methods two times in three.
any_method = st.one_of(
    st.sampled_from(METHODS_1_0),
    st.sampled_from(METHODS_1_0),
    st.sampled_from(METHODS_0_3),
    st.sampled_from(METHODS_0_3),
    st.sampled_from(UNKNOWN_METHODS),
    texts,
)


def version_for(body: Any) -> st.SearchStrategy[str | None]:
    """The A2A-Version header: mostly the one the method's wire wants, sometimes any other."""
    method = body.get("method") if isinstance(body, dict) else None
    wanted = None if isinstance(method, str) and "/" in method else "1.0"
    return st.one_of(st.just(wanted), st.just(wanted), st.none(), st.sampled_from(VERSIONS))


def encode(body: Any) -> bytes:
    """The body as ASCII JSON: lone surrogates travel as \\u escapes, as a peer's JSON may carry them."""
    return json.dumps(body, ensure_ascii=True, allow_nan=False).encode()


def header_values() -> st.SearchStrategy[bytes]:
    """Header values HTTP/1.1 can carry: visible ASCII and obs-text (0x80-0xFF), inner spaces."""
    visible = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
    return st.text(alphabet=visible, max_size=40).map(lambda s: s.strip(" ").encode("latin-1"))


@st.composite
def odd_headers(draw: st.DrawFn, version: str | None) -> list[tuple[str, bytes]]:
    """Headers around a request, some repeated: odd A2A-Version, Content-Type, credentials, Origin."""
    choices: dict[str, st.SearchStrategy[bytes]] = {
        "A2A-Version": st.sampled_from(VERSIONS).map(str.encode) | header_values(),
        "Content-Type": st.sampled_from(CONTENT_TYPES).map(str.encode) | header_values(),
        "A2A-Extensions": st.sampled_from([b"", b",", b"https://x.invalid/ext, ,"]) | header_values(),
        "X-A2A-Extensions": header_values(),
        "Authorization": st.sampled_from([b"Bearer", b"Bearer ", b"Basic Zm9vOmJhcg==", b"Bearer a.b.c"])
        | header_values(),
        "X-API-Key": st.sampled_from([b"", b"pk_", b"pk_x.y"]) | header_values(),
        "Accept": st.sampled_from([b"text/event-stream", b"application/json", b"*/*", b"image/png"]),
        "Origin": st.sampled_from([b"null", b"https://evil.invalid", b"http://127.0.0.1"]) | header_values(),
    }
    headers: list[tuple[str, bytes]] = [("Content-Type", b"application/json")]
    if version is not None:
        headers.append(("A2A-Version", version.encode()))
    for name in draw(st.lists(st.sampled_from(sorted(choices)), max_size=5)):
        if draw(st.booleans()):  # replace; otherwise the header is sent twice
            headers = [(n, v) for n, v in headers if n != name]
        headers.append((name, draw(choices[name])))
    return headers


def loose_json(token: bytes, where: str, message_id: str) -> bytes:
    """A valid SendMessage whose id (``where`` "id") or move (``where`` "move") holds ``token`` verbatim."""
    data = {"action": "propose", "message": "I can pay €800 a day.", "n": "__MOVE__"}
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"data": data}]}
    body = {"jsonrpc": "2.0", "id": "__ID__", "method": "SendMessage", "params": {"message": message}}
    return (
        encode(body)
        .replace(b'"__ID__"', token if where == "id" else b"7")
        .replace(b'"__MOVE__"', token if where == "move" else b"1")
    )


@st.composite
def raw_bodies(draw: st.DrawFn, ground: Ground) -> bytes:
    """Bodies that are not a JSON object, are not JSON, or are JSON that Python reads loosely."""
    valid = encode(draw(envelopes(ground, methods=st.sampled_from(["SendMessage", "message/send"]), most=0)))
    depth = draw(st.integers(min_value=1, max_value=13_000))  # 5 bytes a level: within the body limit
    return draw(
        st.one_of(
            st.just(b""),
            st.binary(max_size=256),
            st.text(max_size=64).map(str.encode),
            st.sampled_from(
                [
                    *(b"null", b"1", b'"SendMessage"', b"[]", b"[{}]", b"{}", b"true", b"[1, 2]", b"{", b"}"),
                    *(b'{"jsonrpc": "2.0"}', b'{"id": 1}', b'{"method": "SendMessage"}', b"\xff\xfe{}"),
                ]
            ),
            st.just(b"[" * depth + b"]" * depth),
            st.just(b'{"a":' * depth + b"1" + b"}" * depth),
            st.integers(min_value=0, max_value=len(valid) - 1).map(lambda n: valid[:n]),
            st.sampled_from(["utf-8-sig", "utf-16", "utf-16-be", "utf-32"]).map(
                lambda codec: valid.decode().encode(codec)
            ),
            # Python's json reads NaN, Infinity, 1e400 (inf) and over-long integers; strict JSON has none.
            st.builds(
                loose_json,
                st.sampled_from([b"NaN", b"-Infinity", b"1e400", b"9" * 5_000, b'"\\ud800"', b'"\\u0000"']),
                st.sampled_from(["id", "move"]),
                uuids,
            ),
            st.just(valid.replace(b'"jsonrpc"', b'"id": "first", "jsonrpc"', 1)),  # a duplicate key
            st.just(b"x" * (django_settings.A2A_MAX_BODY_BYTES + 1)),
        )
    )


# --- answers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    open_stream: bool  # an SSE stream still open when it fell quiet for STREAM_IDLE seconds


def exchange(url: str, content: bytes, headers: list[tuple[str, bytes]]) -> Answer:
    """POST ``content`` with ``headers`` (and httpx's own); read a JSON answer whole, an SSE one
    until it ends or idles."""

    async def main() -> Answer:
        async with (
            httpx.AsyncClient(timeout=TIMEOUT) as http,
            http.stream("POST", url, content=content, headers=headers) as response,
        ):
            content_type = response.headers.get("content-type", "")
            idle = STREAM_IDLE if _sse(content_type) else None
            chunks, open_stream = [], False
            parts = response.aiter_bytes()
            while True:
                try:
                    chunks.append(await asyncio.wait_for(anext(parts), idle))
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    open_stream = True
                    break
            return Answer(response.status_code, content_type, b"".join(chunks), open_stream)

    return asyncio.run(main())


def _sse(content_type: str) -> bool:
    return content_type.split(";")[0].strip() == "text/event-stream"


def allowed_ids(body: Any, *, status: int) -> list[Any]:
    """The ids an answer to ``body`` may carry (JSON-RPC 2.0 §5: the request's, null if it had none
    or it could not be determined)."""
    if not isinstance(body, dict) or "id" not in body:
        return [None]
    request_id = body["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | float):
        return [None]
    if isinstance(request_id, float):
        return [request_id, None] if math.isfinite(request_id) else [None]
    return [request_id] if status == 200 else [request_id, None]


def parsed(content: bytes) -> Any:
    """``content`` as Python's json reads it (as Starlette does), or None when it cannot."""
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return None


def code_in_spec_ranges(code: int) -> bool:
    """JSON-RPC 2.0 §5.1: the pre-defined errors, and -32000..-32099 for the server's (A2A's among them)."""
    return code == -32700 or -32603 <= code <= -32600 or -32099 <= code <= -32000


def check_response_object(response: Any, ids: list[Any], why: Callable[[], str]) -> None:
    """``response`` is one JSON-RPC response whose id is one of ``ids``; its error, if any, well formed."""
    assert isinstance(response, dict), why()
    assert response.get("jsonrpc") == "2.0", why()
    assert set(response) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), why()
    assert any(type(response["id"]) is type(i) and response["id"] == i for i in ids), why()
    if "error" in response:
        error = response["error"]
        assert isinstance(error, dict), why()
        event(f"error {error.get('code')!r}")
        assert set(error) <= {"code", "message", "data"}, why()
        code = error.get("code")
        assert type(code) is int, why()
        assert code_in_spec_ranges(code), why()
        assert isinstance(error.get("message"), str), why()
        assert error["message"].strip(), why()


def sse_events(body: bytes) -> list[dict[str, str]]:
    """The events of an event stream, each ``{"event"?, "data"}`` (data lines joined by newlines)."""
    events, fields, data = [], {}, []
    for line in body.decode("utf-8").splitlines():
        if not line:
            if data:
                events.append({**fields, "data": "\n".join(data)})
            fields, data = {}, []
        elif not line.startswith(":"):  # ":" starts a comment: sse-starlette's pings
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            else:
                fields[name] = value
    if data:
        events.append({**fields, "data": "\n".join(data)})
    return events


def check_answer(target: Target, content: bytes, headers: list[tuple[str, bytes]]) -> Answer:
    """Send the request (``headers`` after the target's) and assert the properties of the module
    docstring on its answer."""
    url, headers = target.url, [*target.headers, *headers]
    answer = exchange(url, content, headers)

    def why() -> str:
        return (
            f"POST {url}\n  headers: {headers!r}\n  body ({len(content)} bytes): {content[:600]!r}\n"
            f"-> {answer.status} {answer.content_type!r} ({len(answer.body)} bytes): {answer.body[:1500]!r}"
        )

    assert answer.status < 500, why()
    event(f"HTTP {answer.status} {answer.content_type.split(';')[0]}")
    request = parsed(content)
    if _sse(answer.content_type):
        assert answer.status == 200, why()
        events = sse_events(answer.body)
        assert events, why()
        for sse in events:
            response = parsed(sse["data"].encode())
            check_response_object(response, allowed_ids(request, status=200), why)
            if sse.get("event") == "error":
                assert "error" in response, why()
        return answer
    assert answer.content_type.split(";")[0].strip() == "application/json", why()
    response = parsed(answer.body)
    check_response_object(response, allowed_ids(request, status=answer.status), why)
    if answer.status >= 300:
        assert "error" in response, why()
    return answer


# --- the fuzz ----------------------------------------------------------------------------------


@settings(FUZZ, max_examples=90)
@given(data=st.data())
def test_envelopes(ground: Ground, data: st.DataObject) -> None:
    """Any method, 1.0 or 0.3 or unknown, with params and envelope mutated."""
    body = data.draw(envelopes(ground, methods=any_method, most=2, damage=1), label="body")
    version = data.draw(version_for(body), label="A2A-Version")
    headers = [("Content-Type", b"application/json")]
    if version is not None:
        headers.append(("A2A-Version", version.encode()))

    check_answer(data.draw(ground.targets(), label="target"), encode(body), headers)


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_raw_bodies(ground: Ground, data: st.DataObject) -> None:
    """Bodies that are empty, not JSON, not an object, loosely JSON, truncated, deep or oversized."""
    content = data.draw(raw_bodies(ground), label="body")
    version = data.draw(st.sampled_from(["1.0", None]), label="A2A-Version")
    headers = [("Content-Type", b"application/json")]
    if version is not None:
        headers.append(("A2A-Version", version.encode()))

    check_answer(data.draw(ground.targets(), label="target"), content, headers)


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_headers(ground: Ground, data: st.DataObject) -> None:
    """Mostly valid requests under odd headers: versions, content types, credentials, extensions, origins."""
    known = st.sampled_from(METHODS_1_0) | st.sampled_from(METHODS_0_3)
    body = data.draw(envelopes(ground, methods=known, most=1), label="body")
    headers = data.draw(odd_headers(data.draw(version_for(body), label="A2A-Version")), label="headers")

    check_answer(data.draw(ground.targets(), label="target"), encode(body), headers)


@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_streaming(ground: Ground, data: st.DataObject) -> None:
    """The streaming methods, mostly valid, so that a streaming agent answers in SSE."""
    body = data.draw(envelopes(ground, methods=st.sampled_from(STREAMING), most=1), label="body")
    version = data.draw(version_for(body), label="A2A-Version")
    headers = [("Content-Type", b"application/json"), ("Accept", b"text/event-stream")]
    if version is not None:
        headers.append(("A2A-Version", version.encode()))

    check_answer(data.draw(ground.targets(), label="target"), encode(body), headers)
