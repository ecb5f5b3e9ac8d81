"""Proof that a tenant owns the host name it claims for an agent (``Agent.host_name``).

A host name serves the agent (:mod:`a2a_gateway.hosts`) only once proved: until then requests to it
are answered as for any host Parley does not know. Each claim gets a random token of its own
(:func:`claim`: a new one whenever the host name changes, which also forgets an earlier proof), and
the operator proves the name one of two ways, as ACME (RFC 8555) and the big site-verification
services ask:

* a DNS TXT record at ``_parley-challenge.<host>`` whose value is ``parley-verification=<token>``
  (the name as ACME's ``_acme-challenge``, RFC 8555 §8.4; the value as Google's
  ``google-site-verification=``), asked of ``settings.HOST_NAME_DNS_SERVERS`` or the system's name
  servers; a CNAME there is followed, so the record may live in another zone;
* or ``http://<host>/.well-known/parley-verification/<token>`` (RFC 8615's well-known path, as
  ACME's http-01, RFC 8555 §8.3) answering 200 with that same value as its body (surrounding
  whitespace aside), fetched through :mod:`parley.outbound` (public addresses only, unless
  ``OUTBOUND_ALLOW_PRIVATE``), on port ``settings.HOST_NAME_HTTP_PORT`` (80; production settings
  force it), redirects followed (to https, say), each hop vetted again.

The HTTP token must be served by whatever answers the host now: before it points at Parley, or by
the tenant's own proxy in front of it. Parley itself serves nothing at that path on any host, so once
the host points at Parley, only the DNS record proves it.

:func:`verify` checks both now (DNS first) and records ``host_name_verified_at`` at the first that
holds; each check may take ``settings.HOST_NAME_CHECK_TIMEOUT`` seconds. Any number of agents, of
any tenants, may claim one host name; one only may hold it proved (the ``agent_verified_host_name``
constraint), so no one can keep a name from its owner by claiming it first. A subdomain of the
platform's own (``ALLOWED_HOSTS``' ``.parley.example``) needs no proof: the first agent to claim it
holds it.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver
import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from parley import netguard, outbound

DNS_LABEL = "_parley-challenge"
VALUE_PREFIX = "parley-verification="
WELL_KNOWN_PATH = "/.well-known/parley-verification/"
# Bytes of the HTTP token's body read: the value is about 60; a page is not a token.
MAX_BODY_BYTES = 1024
MAX_REDIRECTS = 5

NO_HOST_NAME = "The agent has no host name to verify."
TAKEN = "Another agent already serves this host name."
CHANGED = "The host name changed while it was checked; verify the new one."


@dataclass(frozen=True)
class Challenge:
    """What proves ``host_name``: a TXT record named ``dns_name`` holding ``value``, or ``http_url``
    answering ``value``."""

    host_name: str
    dns_name: str
    value: str
    http_url: str


def new_token() -> str:
    """A claim's token: 32 random bytes, URL-safe base64 (43 characters: fits a DNS label, a path)."""
    return secrets.token_urlsafe(32)


def claim(agent: Agent, *, previous: str | None) -> None:
    """Set, unsaved, what ``agent``'s host name needs now that it was ``previous``: nothing when it is
    the same; else a new token (none without a host name), and no proof, but for a subdomain of the
    platform's (:func:`platform_subdomain`), proved at once."""
    if (agent.host_name or None) == (previous or None):
        return
    agent.host_name_token = new_token() if agent.host_name else ""
    given = agent.host_name and platform_subdomain(agent.host_name)
    agent.host_name_verified_at = timezone.now() if given else None


def platform_subdomain(host: str) -> bool:
    """Whether ``host`` is under a subdomain pattern of ``ALLOWED_HOSTS`` (``.parley.example``): the
    platform's own names, where agents' subdomains live. No tenant could prove one (the platform
    holds its DNS and answers its HTTP), so the platform gives them, first come, first served."""
    patterns = [entry.lower() for entry in settings.ALLOWED_HOSTS if entry.startswith(".")]
    return any(host.endswith(pattern) for pattern in patterns)


def challenge(agent: Agent) -> Challenge | None:
    """What proves ``agent``'s host name, or None when it has none."""
    if not agent.host_name or not agent.host_name_token:
        return None
    host, token = agent.host_name, agent.host_name_token
    port = settings.HOST_NAME_HTTP_PORT
    origin = f"http://{host}" if port == 80 else f"http://{host}:{port}"
    return Challenge(
        host_name=host,
        dns_name=f"{DNS_LABEL}.{host}",
        value=f"{VALUE_PREFIX}{token}",
        http_url=f"{origin}{WELL_KNOWN_PATH}{token}",
    )


def taken(agent: Agent) -> bool:
    """Whether another agent, of any tenant, holds ``agent``'s host name proved."""
    if not agent.host_name:
        return False
    others = Agent.across_tenants.filter(host_name=agent.host_name).exclude(host_name_verified_at=None)
    return others.exclude(pk=agent.pk).exists()


def verify(*, agent: Agent) -> Agent:
    """Prove ``agent``'s host name now: by its DNS TXT record, else by its HTTP token (module
    docstring); on success record ``host_name_verified_at`` and return the agent as saved. One
    already proved is returned as it is.

    Raises ``ValidationError`` keyed ``host_name`` with what was wrong: :data:`NO_HOST_NAME`,
    :data:`TAKEN`, :data:`CHANGED`, or one message for each way of proof that failed, naming
    the record or URL and what was found there (no TXT record, another value, an HTTP status,
    no answer in time, an address Parley does not call).
    """
    wanted = challenge(agent)
    if wanted is None:
        raise ValidationError({"host_name": NO_HOST_NAME})
    if agent.host_name_verified_at is not None:
        return agent
    if taken(agent):
        raise ValidationError({"host_name": TAKEN})
    # Checked outside any transaction: no row stays locked while a name server or a host is slow.
    problems = []
    for check in (dns_problem, http_problem):
        problem = check(wanted)
        if problem is None:
            return _proved(agent, wanted)
        problems.append(problem)
    raise ValidationError({"host_name": problems})


def _proved(agent: Agent, proved: Challenge) -> Agent:
    try:
        with transaction.atomic():
            locked = Agent.objects.for_tenant(agent.tenant_id).select_for_update().get(pk=agent.pk)
            if (locked.host_name, locked.host_name_token) != (proved.host_name, agent.host_name_token):
                raise ValidationError({"host_name": CHANGED})
            if locked.host_name_verified_at is None:
                locked.host_name_verified_at = timezone.now()
                locked.save(update_fields=["host_name_verified_at"])
    except IntegrityError as exc:  # another agent's proof of the same name committed first
        raise ValidationError({"host_name": TAKEN}) from exc
    return locked


def txt_value(rdata: Any) -> str:
    """A TXT record's value: its character-strings joined (a value over 255 bytes is split into
    several, RFC 7208 §3.3), as text (bytes that are not UTF-8 replaced)."""
    return b"".join(rdata.strings).decode("utf-8", "replace")


def dns_problem(wanted: Challenge) -> str | None:
    """None when a TXT record at ``wanted.dns_name`` holds ``wanted.value``; else what is wrong."""
    name, timeout = wanted.dns_name, settings.HOST_NAME_CHECK_TIMEOUT
    try:  # the system's resolver is read in here: its configuration missing is a DNSException too
        answer = _resolver().resolve(name, dns.rdatatype.TXT, lifetime=timeout, search=False)
    except dns.resolver.NXDOMAIN:
        return f"DNS: no TXT record at {name} (the name does not exist)."
    except dns.resolver.NoAnswer:
        return f"DNS: no TXT record at {name}."
    except dns.resolver.LifetimeTimeout:
        return f"DNS: no answer for {name} within {timeout:g} s."
    except dns.exception.DNSException as exc:
        return f"DNS: the lookup of {name} failed: {exc}"
    values = [txt_value(rdata) for rdata in answer]
    if wanted.value in values:
        return None
    found = ", ".join(repr(value) for value in values[:3]) + (" …" if len(values) > 3 else "")
    return f"DNS: the TXT record at {name} holds {found}, not {wanted.value!r}."


def _resolver() -> dns.resolver.Resolver:
    servers = settings.HOST_NAME_DNS_SERVERS
    if not servers:
        return dns.resolver.Resolver()
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = [dns.nameserver.Do53Nameserver(*name_server(entry)) for entry in servers]
    return resolver


def name_server(entry: str) -> tuple[str, int]:
    """(address, port) of an entry of ``HOST_NAME_DNS_SERVERS``: ``IP``, ``IPv4:port`` or
    ``[IPv6]:port``. Raises ``ValueError`` naming an entry that is none of these."""
    try:
        return str(ipaddress.ip_address(entry)), 53
    except ValueError:
        pass
    try:
        parts = urlsplit(f"//{entry}")
        address, port = parts.hostname, parts.port
        if address is None or port is None:
            raise ValueError(entry)
        return str(ipaddress.ip_address(address)), port
    except ValueError:
        raise ValueError(
            f"HOST_NAME_DNS_SERVERS: {entry!r} is not an IP address, IPv4:port or [IPv6]:port."
        ) from None


def http_problem(wanted: Challenge) -> str | None:
    """None when ``wanted.http_url`` answers 200 with ``wanted.value``; else what is wrong."""
    url, timeout = wanted.http_url, settings.HOST_NAME_CHECK_TIMEOUT
    try:
        with (
            outbound.client(timeout=timeout, follow_redirects=True, max_redirects=MAX_REDIRECTS) as http,
            http.stream("GET", url) as response,
        ):
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    break
    except netguard.AddressRefused as exc:
        return f"HTTP: {url} was not fetched: {exc}."
    except httpx.TimeoutException:
        return f"HTTP: {url} did not answer within {timeout:g} s."
    except httpx.TooManyRedirects:
        return f"HTTP: {url} redirected more than {MAX_REDIRECTS} times."
    except httpx.HTTPError as exc:
        return f"HTTP: {url} could not be fetched: {str(exc) or type(exc).__name__}."
    if response.status_code != 200:
        return f"HTTP: {url} answered {response.status_code}, not 200."
    if body.decode("utf-8", "replace").strip() != wanted.value:
        return f"HTTP: {url} answered 200, but its body is not {wanted.value!r}."
    return None
