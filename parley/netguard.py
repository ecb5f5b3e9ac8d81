"""Outbound URLs to addresses of the caller's choosing: which hosts we may connect to (SSRF guard).

A URL someone else gave us — an A2A push notification URL
(:mod:`a2a_gateway.push`), a host's webhook endpoint (:mod:`parley.webhooks`) —
must not make the platform reach its own network: loopback, private ranges,
link-local (cloud metadata at 169.254.169.254), shared, reserved, or a
translation prefix that leads to them. The one policy lives here:

* :func:`is_public` judges an address;
* :func:`vetted_address` (async) and :func:`vetted_addresses_sync` parse the
  URL, resolve its host within :data:`RESOLVE_TIMEOUT` seconds and return the
  address(es) to connect to, refusing a host any of whose addresses is not
  public unless the caller allows private ones (a receiver on loopback in tests);
* :class:`PinnedTransport` (sync httpx) and :class:`AsyncPinnedTransport` connect
  only to the addresses they have just vetted, trying each in turn, so the check
  holds at connect time too (DNS rebinding: a host that answers differently the
  second time), and at every request a client makes, each redirect it follows
  included.

A refusal by the policy (:class:`NonPublicAddress`) names the host and the policy,
never the address the host resolved to: what an internal name resolves to is
the internal network's business, and whoever chose the URL may be a stranger.

Nothing here reads settings: each caller passes its own ``allow_private``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import httpx

from parley.http import ssl_context

# Seconds to resolve a URL's host.
RESOLVE_TIMEOUT = 5.0
# Origins whose connections one PinnedTransport keeps alive at once.
PINNED_ORIGINS = 32

# IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits: NAT64 (RFC 6052)
# and IPv4-compatible addresses (RFC 4291 §2.5.5.1). 6to4 (2002::/16) carries it in bits 16-48
# and has ``sixtofour``.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")

# Special-purpose ranges refused whatever ``is_global`` says: its answer depends on the Python
# version (3.11 calls several of these global), and these are never a webhook receiver. From the
# IANA IPv4 and IPv6 Special-Purpose Address Registries; multicast is refused separately.
_DENIED_V4 = tuple(
    ipaddress.IPv4Network(network)
    for network in (
        "0.0.0.0/8",  # "this network" (RFC 791)
        "10.0.0.0/8",  # private (RFC 1918)
        "100.64.0.0/10",  # shared address space, carrier-grade NAT (RFC 6598)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata (RFC 3927)
        "172.16.0.0/12",  # private (RFC 1918)
        "192.0.0.0/24",  # IETF protocol assignments, NAT64 discovery among them (RFC 6890)
        "192.0.2.0/24",  # documentation (RFC 5737)
        "192.88.99.0/24",  # deprecated 6to4 relay anycast (RFC 7526)
        "192.168.0.0/16",  # private (RFC 1918)
        "198.18.0.0/15",  # benchmarking (RFC 2544)
        "198.51.100.0/24",  # documentation (RFC 5737)
        "203.0.113.0/24",  # documentation (RFC 5737)
        "240.0.0.0/4",  # reserved, and the limited broadcast address (RFC 1112, RFC 919)
    )
)
_DENIED_V6 = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::ffff:0:0:0/96",  # IPv4-translated, SIIT (RFC 6145)
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation: the site's own NAT64 (RFC 8215)
        "100::/64",  # discard-only (RFC 6666)
        "100:0:0:1::/64",  # dummy prefix (RFC 9780)
        "2001::/23",  # IETF protocol assignments: Teredo, benchmarking, ORCHID… (RFC 2928)
        "2001:db8::/32",  # documentation (RFC 3849)
        "3fff::/20",  # documentation (RFC 9637)
        "5f00::/16",  # segment routing SIDs (RFC 9602)
        "fc00::/7",  # unique local (RFC 4193)
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local, deprecated but still routed inside some sites (RFC 3879)
    )
)

_AddrInfo = list[tuple[Any, ...]]


# What a refusal by the policy says after naming the host.
POLICY = "resolves to a private address; Parley does not call private addresses"


class URLRefused(Exception):
    """A URL we do not connect to; the message says why (it names the host, never the whole URL)."""


class NonPublicAddress(URLRefused):
    """The policy's own refusal: the host is, or resolves to, an address that is not public.
    The message is "the host '<host>' :data:`POLICY`"."""


def is_public(address: str) -> bool:
    """Whether ``address`` is global unicast: ``is_global``, not multicast, and in none of the
    special-purpose ranges of :data:`_DENIED_V4` and :data:`_DENIED_V6`.

    An IPv6 address that carries an IPv4 address (IPv4-mapped, NAT64 64:ff9b::/96,
    IPv4-compatible, 6to4) is judged by that IPv4 address: through a NAT64 gateway
    ``64:ff9b::a9fe:a9fe`` reaches 169.254.169.254. The local-use NAT64 prefix 64:ff9b:1::/48 is
    refused outright: where it carries the IPv4 address is each site's choice.
    """
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_multicast or any(ip in network for network in _DENIED_V6):
            return False
        carried = _carried_ipv4(ip)
        if carried is None:
            return ip.is_global
        ip = carried
    return ip.is_global and not ip.is_multicast and not any(ip in network for network in _DENIED_V4)


def _carried_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``ip`` carries (IPv4-mapped, 6to4, NAT64, IPv4-compatible), or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _V4_COMPATIBLE:  # :: and ::1 are refused before
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _target(url: str) -> tuple[str, int]:
    """``(host, port)`` of an http(s) ``url``; :class:`URLRefused` when it is not one."""
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError as exc:
        raise URLRefused(f"the URL does not parse: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise URLRefused(f"the scheme {parsed.scheme!r} is not http or https")
    host = parsed.hostname
    if not host:
        raise URLRefused("the URL names no host")
    return host, port


def _is_address(host: str) -> bool:
    """Whether ``host`` is an IP address literal (which getaddrinfo answers without a lookup)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _vetted(host: str, infos: _AddrInfo, *, allow_private: bool) -> list[str]:
    """The addresses of ``infos`` (getaddrinfo's answer for ``host``), in its order and each once,
    after the policy."""
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise URLRefused(f"the host {host!r} does not resolve")
    if not allow_private and not all(is_public(address) for address in addresses):
        raise NonPublicAddress(f"the host {host!r} {POLICY}")
    return addresses


async def vetted_addresses(url: str, *, allow_private: bool) -> list[str]:
    """Every address ``url``'s host resolves to, in the resolver's order (each once).

    Raises:
        URLRefused: the URL does not parse, is not http(s) or names no host; the
            host does not resolve within :data:`RESOLVE_TIMEOUT` seconds; or
            (:class:`NonPublicAddress`) any address it resolves to is not public
            (:func:`is_public`), unless ``allow_private``.
    """
    host, port = _target(url)
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError, TimeoutError) as exc:  # ValueError: a NUL, or a label IDNA refuses
        raise URLRefused(f"the host {host!r} does not resolve") from exc
    return _vetted(host, infos, allow_private=allow_private)


async def vetted_address(url: str, *, allow_private: bool) -> str:
    """The address a request to ``url`` goes to: the first one its host resolves to. Raises as
    :func:`vetted_addresses` does."""
    return (await vetted_addresses(url, allow_private=allow_private))[0]


def vetted_addresses_sync(url: str, *, allow_private: bool) -> list[str]:
    """Every address ``url``'s host resolves to, in the resolver's order (each once), for
    synchronous code (a view, a Celery task). Raises as :func:`vetted_addresses` does: one address
    that is not public refuses the host.

    The lookup runs in a daemon thread so that a resolver that hangs costs at
    most :data:`RESOLVE_TIMEOUT` seconds; the abandoned thread ends with the
    resolver's own timeout.
    """
    host, port = _target(url)
    if _is_address(host):  # nothing to resolve, so no thread to wait on
        return _vetted(
            host, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), allow_private=allow_private
        )
    answer: Future[_AddrInfo] = Future()

    def resolve() -> None:
        try:
            answer.set_result(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # anything, to the waiting caller rather than a silent timeout
            answer.set_exception(exc)

    threading.Thread(target=resolve, name="netguard-resolve", daemon=True).start()
    try:
        infos = answer.result(timeout=RESOLVE_TIMEOUT)
    except (OSError, ValueError, UnicodeError, TimeoutError) as exc:
        raise URLRefused(f"the host {host!r} does not resolve") from exc
    return _vetted(host, infos, allow_private=allow_private)


class AddressRefused(httpx.ConnectError):
    """Raised by the pinned transports for a URL the policy refuses; nothing was sent. The message
    is the refusal's; ``private`` says whether it is the policy's own (:class:`NonPublicAddress`)
    rather than a host that does not resolve or a URL that is not http(s)."""

    def __init__(self, refusal: URLRefused, *, request: httpx.Request) -> None:
        super().__init__(str(refusal), request=request)
        self.private = isinstance(refusal, NonPublicAddress)


class PinnedTransport(httpx.BaseTransport):
    """A synchronous httpx transport that connects only to the addresses
    :func:`vetted_addresses_sync` approves for each request.

    Resolving the host again to connect would let one that answers DNS
    differently the second time reach a private address; the request goes to
    a vetted address instead, with the host name kept for the Host header and
    for TLS (SNI and the certificate check). The addresses are tried in the
    resolver's order, the next one only when connecting to one failed (nothing
    was sent to it): a dual-stack host whose IPv6 address this machine cannot
    reach is still reached over IPv4. The request's connect timeout bounds
    resolving and connecting together: each address but the last may take
    half of what is left of it, the last all the rest. ``allow_private`` is
    asked at each request, so a settings change applies to the next one. A
    refused URL raises :class:`AddressRefused`.

    Connections are kept alive in a pool of their own for each origin (scheme, host name, port) of
    the URLs asked for, at most :data:`PINNED_ORIGINS` origins, the least recently used forgotten
    first: the request reaches the pool under its vetted address, and a connection verified for
    one host name must never carry a request for another that resolves to the same address.
    """

    def __init__(self, *, allow_private: Callable[[], bool]) -> None:
        self._allow_private = allow_private
        self._pools: OrderedDict[tuple[str, str, int | None], httpx.HTTPTransport] = OrderedDict()
        self._pools_lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        attempts = _Attempts(request)
        try:
            addresses = vetted_addresses_sync(str(request.url), allow_private=self._allow_private())
        except URLRefused as exc:
            raise AddressRefused(exc, request=request) from exc
        pool = self._pool(request.url)
        for address in attempts.over(addresses):
            try:
                return pool.handle_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent: try the next
                attempts.failures.append((address, exc))
        raise attempts.failure()

    def _pool(self, url: httpx.URL) -> httpx.HTTPTransport:
        """The connection pool of ``url``'s origin, made on first use."""
        origin = (url.scheme, url.host, url.port)
        with self._pools_lock:
            pool = self._pools.pop(origin, None) or httpx.HTTPTransport(verify=ssl_context())
            self._pools[origin] = pool
            if len(self._pools) > PINNED_ORIGINS:
                # Not closed: a request may be using it still; its idle sockets close when it is collected.
                self._pools.popitem(last=False)
        return pool

    def close(self) -> None:
        with self._pools_lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()


class AsyncPinnedTransport(httpx.AsyncBaseTransport):
    """:class:`PinnedTransport` for ``httpx.AsyncClient``: the same vetting (resolved with
    :func:`vetted_addresses`), the same order and timeouts, the same :class:`AddressRefused`."""

    def __init__(self, *, allow_private: Callable[[], bool]) -> None:
        self._allow_private = allow_private
        self._inner = httpx.AsyncHTTPTransport(verify=ssl_context())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempts = _Attempts(request)
        try:
            addresses = await vetted_addresses(str(request.url), allow_private=self._allow_private())
        except URLRefused as exc:
            raise AddressRefused(exc, request=request) from exc
        for address in attempts.over(addresses):
            try:
                return await self._inner.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent: try the next
                attempts.failures.append((address, exc))
        raise attempts.failure()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Attempts:
    """The tries of one pinned request, made when it arrives (its connect timeout runs from then):
    :meth:`over` points the request at each vetted address in turn, with its share of the connect
    timeout; the caller records each failure to connect in :attr:`failures`."""

    def __init__(self, request: httpx.Request) -> None:
        self.request = request
        self.timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        connect_timeout = self.timeouts.get("connect")
        self.connect_by = None if connect_timeout is None else time.monotonic() + connect_timeout
        self.addresses: list[str] = []
        self.failures: list[tuple[str, httpx.TransportError]] = []

    def over(self, addresses: list[str]) -> Iterator[str]:
        """Each address to try, with the request pointed at it; stops when the time is up."""
        self.addresses = addresses
        request, host, url = self.request, self.request.url.host, self.request.url
        for address in addresses:
            share = self.timeouts.get("connect")
            if self.connect_by is not None:
                left = self.connect_by - time.monotonic()
                if left <= 0:
                    return
                share = left if len(self.failures) == len(addresses) - 1 else left / 2
            request.url = url.copy_with(host=address)
            request.extensions = {
                **request.extensions,
                "sni_hostname": host,
                "timeout": {**self.timeouts, "connect": share},
            }
            yield address

    def failure(self) -> httpx.TransportError:
        """The error of a request none of whose addresses was connected to: the failure itself
        when there was one address, a ``ConnectTimeout`` when resolving left no time to connect,
        else a ``ConnectError`` naming each address's failure."""
        request, addresses, failures = self.request, self.addresses, self.failures
        if not failures:
            return httpx.ConnectTimeout("resolving the host left no time to connect", request=request)
        if len(addresses) == len(failures) == 1:
            return failures[0][1]
        parts = [f"{address}: {exc or type(exc).__name__}" for address, exc in failures]
        if untried := len(addresses) - len(failures):
            parts.append(f"no time left for {untried} more address(es)")
        return httpx.ConnectError("; ".join(parts), request=request)
