"""Calls to URLs a tenant or a counterparty chose (:mod:`parley.outbound`): the validator every stored
URL goes through, and the clients every call goes through.

Servers are real, on loopback; only the system resolver is replaced where a test needs a host name
that resolves to a public address (``public_name``). The test settings allow private addresses (the
suite's servers are on loopback); each test here says which way it wants it.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from parley import netguard, outbound
from tests.conftest import DEPLOYMENT_SECRETS, PRIVATE
from tests.loopback import LoopbackServer


class Recording(LoopbackServer):
    """A server on loopback that records the path of every request: ``/redirect`` answers 307 to
    :attr:`location`, anything else 200 "internal"."""

    what = "the recording server"

    def __init__(self, location: str = "") -> None:
        super().__init__()
        self.location = location
        self.paths: list[str] = []
        self.listen(Starlette(routes=[Route("/{path:path}", self.answer, methods=["GET", "POST"])]))

    async def answer(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        if request.url.path == "/redirect":
            return RedirectResponse(self.location, status_code=307)
        return PlainTextResponse("internal")


@pytest.fixture
def internal() -> Iterator[Recording]:
    with Recording() as server:
        yield server


# The validator of stored URLs.


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://127.0.0.1:47123/prod-internal", "127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://[::1]:11434/v1", "::1"),
        ("https://10.0.0.7/hook", "10.0.0.7"),
        ("http://localhost:11434/v1", "localhost"),  # a name that resolves to loopback
    ],
)
def test_a_url_on_a_private_address_is_refused_naming_the_host_and_the_policy(
    settings: Any, url: str, host: str
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False

    with pytest.raises(ValidationError) as refused:
        outbound.url_validator(url)

    assert refused.value.messages == [f"The host '{host}' {PRIVATE}."]
    assert refused.value.error_list[0].code == "private_address"


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/v1",
        # It does not resolve now: there is nothing to judge yet, and each call resolves it again.
        "https://models.invalid/v1",
    ],
)
def test_a_url_on_a_public_address_or_none_yet_is_taken(settings: Any, url: str) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False

    outbound.url_validator(url)


def test_private_addresses_are_taken_where_the_setting_allows_them(settings: Any) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = True

    outbound.url_validator("http://127.0.0.1:11434/v1")
    outbound.url_validator("http://169.254.169.254/latest/meta-data/")


@pytest.mark.parametrize("allow_private", [True, False])
@pytest.mark.parametrize("url", ["ftp://8.8.8.8/hook", "ftps://8.8.8.8/hook", "file:///etc/passwd"])
def test_a_url_that_is_not_http_is_refused_whatever_the_setting(
    settings: Any, allow_private: bool, url: str
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = allow_private

    with pytest.raises(ValidationError) as refused:
        outbound.url_validator(url)

    assert refused.value.messages == ["Enter an http:// or https:// URL."]


# The clients: every request is vetted where it connects.


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_call_to_a_private_address_is_refused_before_connecting(
    settings: Any, internal: Recording, host: str
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False
    url = f"http://{host}:{internal.port}/prod-internal"

    with outbound.client(timeout=5) as http, pytest.raises(netguard.AddressRefused) as refused:
        http.post(url, json={})

    async def fetch() -> None:
        async with outbound.async_client(timeout=5) as http:
            await http.get(url)

    with pytest.raises(netguard.AddressRefused) as refused_async:
        asyncio.run(fetch())

    assert str(refused.value) == str(refused_async.value) == f"the host '{host}' {PRIVATE}"
    assert refused.value.private
    assert refused_async.value.private
    assert internal.paths == []


def test_a_call_to_a_private_address_goes_through_where_the_setting_allows_it(
    settings: Any, internal: Recording
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = True

    async def fetch() -> str:
        async with outbound.async_client(timeout=5) as http:
            return (await http.get(f"http://localhost:{internal.port}/async")).text

    with outbound.client(timeout=5) as http:
        assert http.get(f"http://localhost:{internal.port}/sync").text == "internal"
    assert asyncio.run(fetch()) == "internal"
    assert internal.paths == ["/sync", "/async"]


def test_a_redirect_from_a_public_address_to_a_private_one_is_refused_even_when_followed(
    settings: Any, public_name: str, internal: Recording
) -> None:
    """No caller follows redirects; were one to, the next request is vetted like the first."""
    settings.OUTBOUND_ALLOW_PRIVATE = False
    with Recording(location=f"http://127.0.0.1:{internal.port}/latest/meta-data/") as public:
        with (
            outbound.client(timeout=5, follow_redirects=True) as http,
            pytest.raises(netguard.AddressRefused) as refused,
        ):
            http.get(f"http://{public_name}:{public.port}/redirect")

        assert public.paths == ["/redirect"]
    assert str(refused.value) == f"the host '127.0.0.1' {PRIVATE}"
    assert internal.paths == []


class Remembering(LoopbackServer):
    """A server on loopback that remembers, for each request, the port it came from (its connection)
    and its Authorization and Cookie headers, and answers 200 with a cookie set."""

    what = "the remembering server"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, str | None, str | None]] = []
        self.listen(Starlette(routes=[Route("/{path:path}", self.answer, methods=["GET", "POST"])]))

    async def answer(self, request: Request) -> Response:
        assert request.client is not None
        self.seen.append(
            (request.client.port, request.headers.get("authorization"), request.headers.get("cookie"))
        )
        response = PlainTextResponse("ok")
        response.set_cookie("session", "tenant-a")
        return response


def test_the_shared_client_keeps_a_connection_per_host_name_and_carries_nothing_from_call_to_call(
    settings: Any,
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = True
    http = outbound.shared_client()
    with Remembering() as server:
        http.get(f"http://127.0.0.1:{server.port}/a", headers={"Authorization": "Bearer tenant-a"})
        http.get(f"http://127.0.0.1:{server.port}/b")
        http.get(f"http://localhost:{server.port}/c")  # the same address, another host name

    (first, auth, _), (second, auth_after, cookie_after), (third, _, cookie_other) = server.seen
    assert outbound.shared_client() is http
    assert first == second  # kept alive
    assert third != first  # a connection is never lent to another host name
    assert auth == "Bearer tenant-a"
    assert auth_after is cookie_after is cookie_other is None


def test_the_shared_client_vets_each_request_on_a_kept_alive_connection_too(settings: Any) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = True
    http = outbound.shared_client()
    with Remembering() as server:
        http.get(f"http://127.0.0.1:{server.port}/kept")
        settings.OUTBOUND_ALLOW_PRIVATE = False
        with pytest.raises(netguard.AddressRefused) as refused:
            http.get(f"http://127.0.0.1:{server.port}/refused")

    assert str(refused.value) == f"the host '127.0.0.1' {PRIVATE}"
    assert len(server.seen) == 1


def test_the_refusal_is_found_under_what_a_library_wrapped_it_in() -> None:
    request = httpx.Request("GET", "http://127.0.0.1/")
    refused = netguard.AddressRefused(netguard.NonPublicAddress("the host '127.0.0.1' …"), request=request)
    wrapped = RuntimeError("Network communication error")
    wrapped.__cause__ = refused

    assert outbound.refusal(wrapped) is refused
    assert outbound.refusal(RuntimeError("something else")) is None


# The setting.


@pytest.mark.parametrize(
    ("module", "env", "expected"),
    [
        ("parley.settings.base", {}, "True"),  # the embedded default: the demo's peers are on loopback
        ("parley.settings.base", {"REDIS_URL": "redis://127.0.0.1:6379/0"}, "False"),
        (
            "parley.settings.base",
            {"REDIS_URL": "redis://127.0.0.1:6379/0", "OUTBOUND_ALLOW_PRIVATE": "true"},
            "True",
        ),
        ("parley.settings.production", {"REDIS_URL": "redis://127.0.0.1:6379/0"}, "False"),
        ("parley.settings.production", {}, "False"),
        (
            "parley.settings.production",
            {"OUTBOUND_ALLOW_PRIVATE": "true", "SIGNUP_OPEN": "false"},
            "True",
        ),
    ],
)
def test_private_addresses_are_called_on_the_embedded_default_and_where_a_deployment_says_so(
    module: str, env: dict[str, str], expected: str
) -> None:
    kept = ("OUTBOUND_ALLOW_PRIVATE", "SIGNUP_OPEN", "REDIS_URL", "DATABASE_URL")
    environment = {k: v for k, v in os.environ.items() if k not in kept}
    result = subprocess.run(
        [sys.executable, "-c", f"import {module} as s; print(s.OUTBOUND_ALLOW_PRIVATE)"],
        env={**environment, **DEPLOYMENT_SECRETS, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == expected


def test_a_forked_child_makes_its_own_shared_client() -> None:
    """A Celery prefork child must not use the sockets of the process it was forked from."""
    parent = outbound.shared_client()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, which reports through the pipe
        os.write(write, b"own" if outbound.shared_client() is not parent else b"inherited")
        os._exit(0)
    os.close(write)
    # A child that hangs (a lock held at the fork) fails the test instead of the suite.
    ready, _, _ = select.select([read], [], [], 30)
    if not ready:
        os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    assert ready, "the forked child did not answer within 30 s"
    assert os.read(read, 16) == b"own"
    assert outbound.shared_client() is parent
