"""Host operations against a real HTTP host on loopback: what the host receives and can verify,
how each answer reaches the model, and every way a call fails. Then checking arguments and
schemas with JSON Schema."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from agents.host_operations import (
    MAX_RESPONSE_BYTES,
    call_host_operation,
    check_schema,
    sign,
    validate_arguments,
    verify,
)
from agents.models import Tool
from agents.tools import ToolError
from parley.models import Tenant
from tests.conftest import PRIVATE, free_port
from tests.loopback import LoopbackServer

SECRET = "whsec_7c1d0a9e-do-not-show"
RUN_ID = "9b2d6c1e-4a57-4f0e-9d0c-2f7f3b1f9a10"


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes


class HostServer(LoopbackServer):
    """A host on loopback with one route per kind of answer; it records every request it gets."""

    what = "the host"

    def __init__(self) -> None:
        super().__init__()
        self.received: list[Received] = []
        canned: dict[str, Callable[[], Response]] = {
            "/json-result": lambda: JSONResponse({"result": "Order A-17 ships Monday."}),
            "/json-other": lambda: JSONResponse({"status": "shipped", "eta": "2026-01-05", "items": [1, 2]}),
            "/json-vendor": lambda: Response(b'["a", "b"]', media_type="application/vnd.host+json"),
            "/text": lambda: Response("Ships Monday.\n", media_type="text/plain"),
            "/text-latin1": lambda: Response(
                "café".encode("latin-1"), media_type="text/plain; charset=latin-1"
            ),
            "/empty": lambda: Response(status_code=204),
            "/error-json": lambda: JSONResponse({"error": "database   unavailable"}, status_code=500),
            "/error-detail": lambda: JSONResponse({"detail": "no such order"}, status_code=404),
            "/error-text": lambda: Response("try later", status_code=503, media_type="text/plain"),
            "/error-html": lambda: Response("<h1>Bad gateway</h1>", status_code=502, media_type="text/html"),
            "/error-long": lambda: Response("x" * 500, status_code=500, media_type="text/plain"),
            "/big": lambda: JSONResponse({"result": "x" * MAX_RESPONSE_BYTES}),
            "/redirect": lambda: RedirectResponse("/json-result", status_code=302),
            "/html": lambda: Response("<p>hello</p>", media_type="text/html"),
            "/bad-json": lambda: Response(b'{"result": ', media_type="application/json"),
            "/nul": lambda: JSONResponse({"result": "a\x00b"}),
        }
        routes = [
            Route("/echo", self.echo, methods=["POST"]),
            Route("/slow", self.slow, methods=["POST"]),
            Route("/trickle", self.trickle, methods=["POST"]),
            *(Route(path, self._canned(answer), methods=["POST"]) for path, answer in canned.items()),
        ]
        self.listen(Starlette(routes=routes))

    async def record(self, request: Request) -> bytes:
        body = await request.body()
        self.received.append(Received(headers=dict(request.headers), body=body))
        return body

    def _canned(self, answer: Callable[[], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            await self.record(request)
            return answer()

        return endpoint

    async def echo(self, request: Request) -> Response:
        """Names the call it got, so calls can be told apart."""
        call = json.loads(await self.record(request))
        return JSONResponse({"result": f"done {call['tool_call_id']}"})

    async def slow(self, request: Request) -> Response:
        await self.record(request)
        await asyncio.sleep(2)
        return JSONResponse({"result": "too late"})

    async def trickle(self, request: Request) -> Response:
        """A byte every tenth of a second for three seconds: each read is quick, the answer never ends."""
        await self.record(request)

        async def drip() -> AsyncIterator[bytes]:
            for _ in range(30):
                yield b"x"
                await asyncio.sleep(0.1)

        return StreamingResponse(drip(), media_type="text/plain")


@pytest.fixture(scope="module")
def host() -> Iterator[HostServer]:
    with HostServer() as server:
        yield server


def host_tool(tenant: Tenant, url: str, *, timeout: float = 5.0, secret: str = SECRET) -> Tool:
    return Tool.objects.create(
        tenant=tenant,
        name="lookup_order",
        description="Look an order up.",
        parameters={"type": "object", "properties": {"order": {"type": "string"}}},
        kind=Tool.Kind.HOST,
        url=url,
        secret=secret,
        timeout=timeout,
    )


def call(tool: Tool, tool_call_id: str = "call_abc123") -> str:
    return call_host_operation(
        tool=tool, arguments={"order": "A-17", "note": "über"}, run_id=RUN_ID, tool_call_id=tool_call_id
    )


def test_the_host_receives_the_signed_body_and_can_verify_it(tenant: Tenant, host: HostServer) -> None:
    tool = host_tool(tenant, f"{host.origin}/echo")

    assert call(tool) == "done call_abc123"

    got = host.received[-1]
    assert (
        got.body
        == (
            '{"tool":"lookup_order","arguments":{"order":"A-17","note":"über"},'
            f'"run":"{RUN_ID}","tool_call_id":"call_abc123"}}'
        ).encode()
    )
    assert got.headers["content-type"] == "application/json"
    assert got.headers["idempotency-key"] == f"{RUN_ID}:call_abc123"
    assert got.headers["parley-signature"] == sign(
        secret=SECRET, timestamp=int(got.headers["parley-timestamp"]), body=got.body
    )
    assert verify(
        secret=SECRET,
        timestamp=got.headers["parley-timestamp"],
        body=got.body,
        signature=got.headers["parley-signature"],
    )


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("body", b'{"tool":"lookup_order","arguments":{"order":"A-18"}}'),
        ("secret", "whsec_someone-else"),
        ("timestamp", "not-a-number"),
        ("signature", "v1=" + "0" * 64),
        ("signature", "v1=\u00e9"),
    ],
)
def test_verify_rejects_what_the_host_did_not_get_from_us(
    tenant: Tenant, host: HostServer, change: str, value: Any
) -> None:
    call(host_tool(tenant, f"{host.origin}/echo"))
    got = host.received[-1]
    request = {
        "secret": SECRET,
        "timestamp": got.headers["parley-timestamp"],
        "body": got.body,
        "signature": got.headers["parley-signature"],
    }

    assert verify(**{**request, change: value}) is False


def test_sign_matches_a_known_vector() -> None:
    assert (
        sign(secret="whsec_test", timestamp=1767225600, body=b'{"a":1}')
        == "v1=6d204545ff126a339c00513d93603299c984074ce1331c3537c3f6c976b49019"
    )


@pytest.mark.parametrize(("now", "accepted"), [(1767225900, True), (1767225901, False), (1767225299, False)])
def test_verify_refuses_a_timestamp_outside_the_replay_window(now: int, accepted: bool) -> None:
    body = b'{"a":1}'
    signature = sign(secret="whsec_test", timestamp=1767225600, body=body)

    assert (
        verify(secret="whsec_test", timestamp="1767225600", body=body, signature=signature, now=now)
        is accepted
    )


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/json-result", "Order A-17 ships Monday."),
        ("/json-other", '{"status":"shipped","eta":"2026-01-05","items":[1,2]}'),
        ("/json-vendor", '["a","b"]'),
        ("/text", "Ships Monday.\n"),
        ("/text-latin1", "café"),
        ("/empty", ""),
    ],
)
def test_the_model_sees_the_host_answer_as_text(
    tenant: Tenant, host: HostServer, path: str, text: str
) -> None:
    assert call(host_tool(tenant, f"{host.origin}{path}")) == text


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/slow", "Host operation 'lookup_order' timed out after 0.3 s."),
        ("/trickle", "Host operation 'lookup_order' timed out after 0.3 s."),
        ("/error-json", "Host operation 'lookup_order' failed: HTTP 500: database unavailable"),
        ("/error-detail", "Host operation 'lookup_order' failed: HTTP 404: no such order"),
        ("/error-text", "Host operation 'lookup_order' failed: HTTP 503: try later"),
        ("/error-html", "Host operation 'lookup_order' failed: HTTP 502."),
        ("/error-long", "Host operation 'lookup_order' failed: HTTP 500: " + "x" * 199 + "…"),
        ("/big", "Host operation 'lookup_order' answered with more than 64 KiB, the limit."),
        (
            "/redirect",
            "Host operation 'lookup_order' answered with a redirect (HTTP 302), which is not followed.",
        ),
        (
            "/html",
            "Host operation 'lookup_order' answered with Content-Type 'text/html'; "
            "it must be application/json or text/plain.",
        ),
        ("/bad-json", "Host operation 'lookup_order' answered with JSON that cannot be parsed."),
        ("/nul", "Host operation 'lookup_order' answered with text containing NUL or invalid characters."),
    ],
)
def test_a_failing_host_becomes_a_tool_error(
    tenant: Tenant, host: HostServer, path: str, message: str
) -> None:
    tool = host_tool(tenant, f"{host.origin}{path}", timeout=0.3)

    with pytest.raises(ToolError) as failure:
        call(tool)

    assert str(failure.value) == message
    assert SECRET not in str(failure.value)


def test_a_host_that_refuses_connections_becomes_a_tool_error(tenant: Tenant) -> None:
    tool = host_tool(tenant, f"http://127.0.0.1:{free_port()}/ops")

    with pytest.raises(
        ToolError, match=r"^Host operation 'lookup_order' could not connect to its host \(.+\)\.$"
    ):
        call(tool)


@pytest.mark.parametrize(
    ("allow_http", "url", "secret", "message"),
    [
        (False, "{origin}/echo", SECRET, "Host operation 'lookup_order' must have an https:// URL."),
        (True, "ftp://127.0.0.1/echo", SECRET, "Host operation 'lookup_order' must have an https:// URL."),
        (True, "", SECRET, "Host operation 'lookup_order' has no URL configured."),
        (
            True,
            "https://[::1",
            SECRET,
            "Host operation 'lookup_order' has an invalid URL (Invalid port: ':1').",
        ),
        (True, "https:///ops", SECRET, "Host operation 'lookup_order' has an invalid URL (no host)."),
        (True, "{origin}/echo", "", "Host operation 'lookup_order' has no signing secret configured."),
    ],
)
def test_a_misconfigured_tool_sends_nothing(
    tenant: Tenant,
    host: HostServer,
    settings: Any,
    allow_http: bool,
    url: str,
    secret: str,
    message: str,
) -> None:
    settings.PARLEY_HOST_OPERATIONS_ALLOW_HTTP = allow_http
    tool = host_tool(tenant, url.format(origin=host.origin), secret=secret)
    before = len(host.received)

    with pytest.raises(ToolError) as failure:
        call(tool)

    assert str(failure.value) == message
    assert len(host.received) == before


def test_concurrent_calls_from_threads_each_get_their_own_answer(tenant: Tenant, host: HostServer) -> None:
    tool = host_tool(tenant, f"{host.origin}/echo")
    ids = [f"call_{n}" for n in range(8)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda call_id: call(tool, call_id), ids))

    assert answers == [f"done {call_id}" for call_id in ids]
    keys = {got.headers["idempotency-key"] for got in host.received[-8:]}
    assert keys == {f"{RUN_ID}:{call_id}" for call_id in ids}


ORDER = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}},
        },
        "ship to": {"type": "string"},
    },
    "required": ["amount", "currency"],
    "additionalProperties": False,
}
DRAFT_07_PAIR = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]}},
}


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [
        (ORDER, {"amount": 950, "currency": "EUR", "items": [{"size": 2}]}),
        ({}, {"anything": ["goes", 1, None]}),
        (DRAFT_07_PAIR, {"pair": ["a", 1]}),
    ],
)
def test_valid_arguments_pass(schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    validate_arguments(schema=schema, arguments=arguments)


@pytest.mark.parametrize(
    ("schema", "arguments", "message"),
    [
        (ORDER, {"amount": 950}, "arguments: 'currency' is a required property"),
        (ORDER, {"amount": "x", "currency": "EUR"}, "arguments.amount: 'x' is not of type 'number'"),
        (
            ORDER,
            {"amount": 1, "currency": "EUR", "items": [{"size": 1}, {"size": 0}]},
            "arguments.items[1].size: 0 is less than the minimum of 1",
        ),
        (
            ORDER,
            {"amount": 1, "currency": "EUR", "ship to": 5},
            "arguments[\"ship to\"]: 5 is not of type 'string'",
        ),
        (
            ORDER,
            {"amount": "x", "currency": "GBP", "items": [{"size": 0}], "extra": 1},
            "arguments: Additional properties are not allowed ('extra' was unexpected); "
            "arguments.amount: 'x' is not of type 'number'; "
            "arguments.currency: 'GBP' is not one of ['EUR', 'USD']; "
            "arguments.items[0].size: 0 is less than the minimum of 1",
        ),
        (
            DRAFT_07_PAIR,
            {"pair": [1, "x"]},
            "arguments.pair[0]: 1 is not of type 'string'; arguments.pair[1]: 'x' is not of type 'number'",
        ),
        (
            {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(7)}},
            {f"p{n}": n for n in range(7)},
            "arguments.p0: 0 is not of type 'string'; arguments.p1: 1 is not of type 'string'; "
            "arguments.p2: 2 is not of type 'string'; arguments.p3: 3 is not of type 'string'; "
            "arguments.p4: 4 is not of type 'string'; and 2 more",
        ),
        ({"type": 5}, {}, "the schema itself is invalid (5 is not valid under any of the given schemas)"),
        (
            {"$ref": "https://schemas.example/order.json"},
            {},
            "the schema itself cannot be used (Unresolvable: https://schemas.example/order.json)",
        ),
    ],
)
def test_invalid_arguments_are_a_tool_error_naming_each_problem(
    schema: dict[str, Any], arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolError) as failure:
        validate_arguments(schema=schema, arguments=arguments)

    assert str(failure.value) == message


def test_validation_follows_the_schema_as_it_is_now_at_every_call() -> None:
    # Validators are cached by the schema's content: a schema changed in place (an operator edits a
    # tool) is checked as changed, and an invalid one is refused every time, not once.
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "number"}}}
    validate_arguments(schema=schema, arguments={"n": 1})
    schema["properties"]["n"]["type"] = "string"
    with pytest.raises(ToolError, match=r"arguments\.n: 1 is not of type 'string'"):
        validate_arguments(schema=schema, arguments={"n": 1})
    schema["type"] = 5
    for _ in range(2):
        with pytest.raises(ToolError, match="the schema itself is invalid"):
            validate_arguments(schema=schema, arguments={"n": 1})


@pytest.mark.parametrize(
    "schema", [{}, ORDER, DRAFT_07_PAIR, {"$schema": "https://json-schema.org/draft/2020-12/schema"}]
)
def test_check_schema_accepts_a_valid_schema(schema: dict[str, Any]) -> None:
    check_schema(schema)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": 5}, "Not a valid JSON Schema: schema.type: 5 is not valid under any of the given schemas"),
        (
            {"properties": {"amount": {"minimum": "1"}}},
            "Not a valid JSON Schema: schema.properties.amount.minimum: '1' is not of type 'number'",
        ),
        (
            # Tuple-form items is draft 7; without $schema the dialect is 2020-12.
            {k: v for k, v in DRAFT_07_PAIR.items() if k != "$schema"},
            "Not a valid JSON Schema: schema.properties.pair.items: "
            "[{'type': 'string'}, {'type': 'number'}] is not of type 'object', 'boolean'",
        ),
        (
            {"$schema": "https://example.com/my-dialect"},
            "The $schema 'https://example.com/my-dialect' is not a JSON Schema dialect we know.",
        ),
        (["not", "an", "object"], "A JSON Schema for arguments must be a JSON object."),
    ],
)
def test_check_schema_rejects_an_invalid_schema(schema: Any, message: str) -> None:
    with pytest.raises(ValidationError) as failure:
        check_schema(schema)

    assert failure.value.messages == [message]


# The tool's URL is the tenant's: it is called on public addresses only (parley.outbound).


@pytest.mark.parametrize("name", ["localhost", "169.254.169.254"])
def test_a_host_operation_on_a_private_address_sends_nothing(
    tenant: Tenant, host: HostServer, settings: Any, name: str
) -> None:
    """Saved while the setting allowed it, or its name (``localhost``) resolves to loopback since:
    the call is refused where it connects, and the model is told why in the policy's words."""
    tool = host_tool(tenant, f"http://{name}:{host.port}/echo")
    settings.OUTBOUND_ALLOW_PRIVATE = False
    before = len(host.received)

    with pytest.raises(ToolError) as failure:
        call(tool)

    assert str(failure.value) == f"Host operation 'lookup_order' was not called: the host '{name}' {PRIVATE}."
    assert len(host.received) == before
