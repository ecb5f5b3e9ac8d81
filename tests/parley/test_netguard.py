"""The outbound address policy (:mod:`parley.netguard`): which addresses are public, and a transport
that connects only to vetted addresses, trying each in turn.

The webhooks' and push notifications' own tests cover the policy through those callers
(tests/parley/test_webhooks.py, tests/a2a_gateway/test_push.py). Receivers here are real HTTP servers
on loopback; only the system resolver is replaced, to give a host name the addresses a test needs.
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from parley import netguard


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::a9fe:a9fe",  # local-use NAT64 (RFC 8215), whatever it carries
        "64:ff9b:1::808:808",
        "fec0::1",  # site-local (RFC 3879)
        "::ffff:0:a00:1",  # IPv4-translated (RFC 6145)
        "::ffff:0:808:808",
        "3fff::1",  # documentation (RFC 9637)
        "2001:db8::1",  # documentation (RFC 3849)
        "5f00::1",  # segment routing SIDs (RFC 9602)
        "100::1",  # discard-only (RFC 6666)
        "100:0:0:1::1",  # dummy prefix (RFC 9780)
        "2001::1",  # Teredo
        "fc00::1",  # unique local
        "fe80::1%eth0",  # link-local, with a zone
        "ff0e::1",  # global-scope multicast
        "::",
        "::1",
        "::ffff:10.0.0.1",  # IPv4-mapped private
        "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata service
        "2002:7f00:1::1",  # 6to4 of loopback
        "::127.0.0.1",  # IPv4-compatible loopback
        "192.0.0.9",  # IETF protocol assignments (RFC 6890)
        "192.88.99.1",  # deprecated 6to4 relay anycast (RFC 7526)
        "100.64.0.1",  # shared address space (RFC 6598)
        "198.18.0.1",  # benchmarking
        "169.254.169.254",
        "240.0.0.1",
        "255.255.255.255",
        "224.0.0.1",
    ],
)
def test_a_special_purpose_address_is_not_public(address: str) -> None:
    assert netguard.is_public(address) is False


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "::ffff:8.8.8.8",  # IPv4-mapped, judged by the IPv4 address
        "64:ff9b::808:808",  # well-known NAT64 of a public address
        "2002:808:808::1",  # 6to4 of a public address
    ],
)
def test_a_global_unicast_address_is_public(address: str) -> None:
    assert netguard.is_public(address) is True


class Counting:
    """An HTTP server on ``host`` (loopback) at ``port`` (0: any) answering every POST with
    ``status``; ``posts`` counts the POSTs it read."""

    def __init__(self, host: str, status: int, port: int = 0) -> None:
        self.posts = 0
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server_self.posts += 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> Counting:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def post(url: str, *, allow_private: bool, timeout: float = 5.0) -> httpx.Response:
    transport = netguard.PinnedTransport(allow_private=lambda: allow_private)
    with httpx.Client(transport=transport, timeout=timeout) as http:
        return http.post(url, content=b"{}")


def test_an_address_that_answers_is_the_last_one_tried_even_with_an_error_status(
    resolve_to: dict[str, list[str]],
) -> None:
    """The next address is tried only when connecting failed: a request that reached one is never
    sent again to another."""
    with Counting("127.0.0.1", 500) as first, Counting("127.0.0.2", 204, port=first.port) as second:
        resolve_to["twice.example"] = ["127.0.0.1", "127.0.0.2"]

        response = post(f"http://twice.example:{first.port}/hooks", allow_private=True)

    assert response.status_code == 500
    assert (first.posts, second.posts) == (1, 0)


def test_a_host_with_one_non_public_address_is_refused_before_any_connection(
    resolve_to: dict[str, list[str]],
) -> None:
    with Counting("127.0.0.1", 204) as server:
        resolve_to["mixed.example"] = ["8.8.8.8", "127.0.0.1"]

        with pytest.raises(
            netguard.AddressRefused, match=r"^the host 'mixed\.example' resolves to a private"
        ):
            post(f"http://mixed.example:{server.port}/hooks", allow_private=False)

    assert server.posts == 0


def test_when_no_address_connects_the_error_names_each(resolve_to: dict[str, list[str]]) -> None:
    with Counting("127.0.0.1", 204) as closed:
        port = closed.port  # free once this server has closed: nothing listens there
    resolve_to["down.example"] = ["127.0.0.1", "127.0.0.2"]

    with pytest.raises(httpx.ConnectError) as failed:
        post(f"http://down.example:{port}/hooks", allow_private=True)

    message = str(failed.value)
    assert message.startswith("127.0.0.1: ")
    assert "; 127.0.0.2: " in message


def test_the_async_transport_tries_each_address_and_refuses_as_the_sync_one_does(
    resolve_to: dict[str, list[str]],
) -> None:
    with Counting("127.0.0.2", 204) as server:
        resolve_to["dual.example"] = ["127.0.0.1", "127.0.0.2"]  # nothing listens on the first
        resolve_to["mixed.example"] = ["8.8.8.8", "127.0.0.2"]

        async def post(url: str, *, allow_private: bool) -> int:
            transport = netguard.AsyncPinnedTransport(allow_private=lambda: allow_private)
            async with httpx.AsyncClient(transport=transport, timeout=5.0) as http:
                return (await http.post(url, content=b"{}")).status_code

        answered = asyncio.run(post(f"http://dual.example:{server.port}/hooks", allow_private=True))
        with pytest.raises(
            netguard.AddressRefused, match=r"^the host 'mixed\.example' resolves to a private"
        ):
            asyncio.run(post(f"http://mixed.example:{server.port}/hooks", allow_private=False))

    assert answered == 204
    assert server.posts == 1
