"""Calls to URLs a tenant or a counterparty chose: :mod:`parley.netguard`'s policy under one setting.

With open sign-up every URL an organisation configures is a stranger's input, and so is every URL a
counterparty's card names. Whatever Parley fetches from such a URL — an agent's evaluation hook
(:mod:`negotiations.evaluation`), a model endpoint (:mod:`agents.chat_completions`), a host
operation (:mod:`agents.host_operations`), a counterparty's card, key set and endpoint
(:mod:`negotiations.client`), Agent Exchange's preparation endpoint (:mod:`exchange.client`) —
goes to public addresses only, unless ``settings.OUTBOUND_ALLOW_PRIVATE`` allows private, loopback
and link-local ones too (the embedded default, whose demo peers and local models are on loopback):

* where such a URL is stored, :data:`url_validator` refuses it at save time — not http(s), or a
  host that is, or resolves to, an address that is not public — at the field, in the model's own
  words, so the dashboard and the host API say the same;
* every call goes through :func:`client` or :func:`async_client`, whose transports vet the
  address again at each request (resolution can change after the save) and connect only to the
  address they vetted; a refusal is a :class:`parley.netguard.AddressRefused` naming the host and
  the policy, and nothing is sent. A redirect is not followed by any of these callers, and would
  be vetted like any request if it were.

The setting is read at each check, so a change applies to the next call.
"""

from __future__ import annotations

import http.cookiejar
import os
import threading
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.utils.deconstruct import deconstructible

from parley import netguard

HTTP_ONLY = "Enter an http:// or https:// URL."


def allow_private() -> bool:
    """Whether calls to tenants' URLs may go to private, loopback and link-local addresses
    (``settings.OUTBOUND_ALLOW_PRIVATE``)."""
    return bool(settings.OUTBOUND_ALLOW_PRIVATE)


@deconstructible(path="parley.outbound.OutboundURLValidator")
class OutboundURLValidator(URLValidator):
    """A URL Parley may call: http or https (:data:`HTTP_ONLY` otherwise), and, unless
    :func:`allow_private`, a host that is not, and does not resolve to, an address that is not
    public ("The host '127.0.0.1' resolves to a private address; Parley does not call private
    addresses.", code ``private_address``).

    A host that does not resolve now passes: the call resolves it again and refuses it then.
    """

    def __init__(self) -> None:
        super().__init__(schemes=["http", "https"], message=HTTP_ONLY)

    def __call__(self, value: Any) -> None:
        super().__call__(value)
        if allow_private():
            return
        try:
            netguard.vetted_addresses_sync(str(value), allow_private=False)
        except netguard.NonPublicAddress as exc:
            raise ValidationError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.", code="private_address") from None
        except netguard.URLRefused:
            return


url_validator = OutboundURLValidator()


def client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` with ``options`` (timeout, headers…) whose every request is vetted and
    pinned (:class:`parley.netguard.PinnedTransport` under :func:`allow_private`)."""
    return httpx.Client(transport=netguard.PinnedTransport(allow_private=allow_private), **options)


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Refuses every cookie: a shared client must carry nothing from one tenant's call to the next."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


_shared: tuple[int, httpx.Client] | None = None
_shared_lock = threading.Lock()


def shared_client() -> httpx.Client:
    """This process's :func:`client`, made on first use, whose connections are kept alive from one
    call to the next (a step's model call and host operation, then the next step's).

    It holds nothing of any caller's: no headers, no timeout (pass both with each request), no
    cookies (every one refused), and redirects are not followed. A forked child makes its own
    (the parent's sockets are not shared). :func:`close_shared_client` closes it.
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            jar = http.cookiejar.CookieJar(policy=_NoCookies())
            _shared = (os.getpid(), client(timeout=None, follow_redirects=False, cookies=jar))
        return _shared[1]


def close_shared_client() -> None:
    """Close this process's :func:`shared_client`, if it made one (at a worker process's end)."""
    global _shared
    with _shared_lock:
        shared, _shared = _shared, None
    if shared is not None and shared[0] == os.getpid():
        shared[1].close()


def async_client(**options: Any) -> httpx.AsyncClient:
    """:func:`client` for asyncio (:class:`parley.netguard.AsyncPinnedTransport`)."""
    return httpx.AsyncClient(transport=netguard.AsyncPinnedTransport(allow_private=allow_private), **options)


def refusal(exc: BaseException) -> netguard.AddressRefused | None:
    """The policy's refusal that ``exc`` is or was raised from (a library may wrap it), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, netguard.AddressRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
