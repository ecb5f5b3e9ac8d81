"""Inbound auth: who is calling an agent's endpoint, from the request's credentials or its address.

An agent's ``inbound_auth`` says what a JSON-RPC call must carry (A2A 1.0 §7.4:
the server authenticates every request against what its card declares; the
card side is :mod:`a2a_gateway.cards`):

* ``api_key`` — an :class:`~a2a_gateway.models.InboundKey` of the agent in the
  ``X-API-Key`` header;
* ``bearer`` — the same kind of key as ``Authorization: Bearer <key>``;
* ``anonymous`` — nothing; a valid key of the agent, in either place, still
  names the caller (its tasks then follow the key, not the address), while a
  credential that is not one is ignored.

A call without what its agent requires is answered by the gateway's edge with
HTTP 401 and a JSON-RPC error (:class:`parley.edge.Unauthenticated`), before the SDK reads
the body: nothing is written and no model runs.

**Keys.** Shown once as ``<prefix>.<secret>`` and stored as a keyed hash
(:mod:`parley.keys`, as the REST API's keys are). An unknown prefix, a wrong
secret, a revoked key and another agent's key all get the same answer.

**Callers.** Each call gets a :class:`Caller` (as the ASGI scope's ``user``,
from which a2a-sdk builds ``ServerCallContext.user``), and its ``user_name``
partitions the caller's tasks (:func:`a2a_gateway.store.owner_of`):
``key:<prefix>`` for a key, ``anon:<digest>`` for anyone else — see
:func:`parley.edge.client_address` for what tells anonymous counterparties apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import F, FilteredRelation, Q
from django.utils import timezone
from starlette.authentication import BaseUser
from starlette.datastructures import Headers
from starlette.types import Scope

from a2a_gateway.models import InboundKey
from agents.models import Agent
from parley import keys
from parley.edge import API_KEY_HEADER, Unauthenticated, client_address

BEARER = "bearer"
_BEARER = re.compile(r"^bearer[ \t]+(?P<token>\S+)[ \t]*$", re.IGNORECASE)


@dataclass(frozen=True)
class Caller(BaseUser):
    """The caller of one request, as Starlette's ``scope["user"]``.

    ``name`` is ``key:<prefix>`` (authenticated: it presented that key) or
    ``anon:<digest>`` (an anonymous counterparty, see :func:`parley.edge.client_address`).
    """

    name: str
    key_id: int | None = None

    @property
    def is_authenticated(self) -> bool:
        return self.key_id is not None

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        return self.name


def inbound_key_create(*, agent: Agent, name: str) -> tuple[InboundKey, str]:
    """Issue a key for ``agent`` held by ``name``; returns the row and the key as shown once,
    ``"<prefix>.<secret>"`` (the only time the secret exists outside the caller's hands)."""
    secret = keys.new_secret()
    key = InboundKey(tenant_id=agent.tenant_id, agent=agent, name=name, secret_hash=keys.secret_hash(secret))

    def insert(prefix: str) -> None:
        key.prefix = prefix
        key.save(force_insert=True)

    keys.issue(insert)
    return key, f"{key.prefix}.{secret}"


def inbound_key_revoke(*, key: InboundKey) -> InboundKey:
    """Revoke ``key`` from now on; revoking it again keeps the first ``revoked_at``."""
    InboundKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), updated_at=timezone.now()
    )
    key.refresh_from_db(fields=["revoked_at", "updated_at"])
    return key


async def agent_at(tenant: str, slug: str, scope: Scope) -> tuple[Agent | None, dict[str, InboundKey]]:
    """The agent ``slug`` of the tenant ``tenant`` (with its tenant and Agent Exchange profile), or
    None, and, for a POST, its unrevoked keys among those the request presents
    (:func:`presented_prefixes`), by prefix: what :func:`authenticate` is given.

    One query: the keys come joined to the agent's row (one row per key found), as read
    at this request, so a key revoked or deleted before it is refused.
    """
    rows = Agent.across_tenants.select_related("tenant", "exchange_profile").filter(
        tenant__slug=tenant, slug=slug
    )
    prefixes = presented_prefixes(scope) if scope["method"] == "POST" else set()
    if not prefixes:
        return await rows.afirst(), {}
    live = Q(inbound_keys__prefix__in=prefixes, inbound_keys__revoked_at__isnull=True)
    found = [
        row
        async for row in rows.annotate(live_key=FilteredRelation("inbound_keys", condition=live)).annotate(
            key_pk=F("live_key__id"),
            key_tenant=F("live_key__tenant_id"),
            key_prefix=F("live_key__prefix"),
            key_hash=F("live_key__secret_hash"),
            key_used_at=F("live_key__last_used_at"),
        )
    ]
    if not found:
        return None, {}
    agent = found[0]
    live_keys = {}
    for row in found:
        # A key is its agent's tenant's, as every row is; a row that said otherwise is no key.
        if row.key_pk is None or row.key_tenant != agent.tenant_id:
            continue
        # As a query would load it: the fields not read here are deferred, so reading one asks
        # the database rather than finding a default.
        key = InboundKey.from_db(
            row._state.db,
            _KEY_FIELDS,
            [row.key_pk, row.key_tenant, agent.pk, row.key_prefix, row.key_hash, row.key_used_at],
        )
        key.agent = agent
        live_keys[key.prefix] = key
    return agent, live_keys


# The fields of an InboundKey that agent_at reads with the agent, in its values' order.
_KEY_FIELDS = ["id", "tenant_id", "agent_id", "prefix", "secret_hash", "last_used_at"]


def presented_prefixes(scope: Scope) -> set[str]:
    """The prefixes of the keys the request ``scope`` presents, in either place (bearer token,
    :data:`~parley.edge.API_KEY_HEADER`), that can be keys of ours (:func:`parley.keys.split`)."""
    headers = Headers(scope=scope)
    presented = (keys.split(p) for p in (_bearer(headers), headers.get(API_KEY_HEADER)) if p)
    return {parts[0] for parts in presented if parts is not None}


async def authenticate(agent: Agent, scope: Scope, live_keys: dict[str, InboundKey]) -> Caller:
    """The caller of the HTTP request ``scope`` to ``agent``'s JSON-RPC endpoint, given the
    agent's unrevoked keys among those presented, by prefix (:func:`agent_at`).

    Raises:
        Unauthenticated: 401 — the agent requires a key and the request carries none in
            its place ("This agent requires an API key in the X-API-Key header." / "…a
            bearer token: Authorization: Bearer <key>."), or one that is not a live key of
            the agent ("The API key is not valid for this agent." / "The bearer token is
            not valid for this agent."); 400 — an anonymous caller without an address
            (:func:`parley.edge.client_address`).
    """
    headers = Headers(scope=scope)
    required = agent.inbound_auth
    if required == Agent.InboundAuth.ANONYMOUS:
        presented = _bearer(headers) or headers.get(API_KEY_HEADER)
        key = await _live_key(agent, live_keys, presented) if presented else None
        return _key_caller(key) if key else Caller(name=f"anon:{_digest(client_address(scope))}")
    bearer = required == Agent.InboundAuth.BEARER
    presented = _bearer(headers) if bearer else headers.get(API_KEY_HEADER)
    if not presented:
        raise Unauthenticated(
            "This agent requires a bearer token: Authorization: Bearer <key>."
            if bearer
            else f"This agent requires an API key in the {API_KEY_HEADER} header.",
            challenge=_challenge(agent, error=None) if bearer else None,
        )
    key = await _live_key(agent, live_keys, presented)
    if key is None:
        raise Unauthenticated(
            f"The {'bearer token' if bearer else 'API key'} is not valid for this agent.",
            challenge=_challenge(agent, error="invalid_token") if bearer else None,
        )
    return _key_caller(key)


def _digest(address: str) -> str:
    """A keyed digest of the address: owners are stored (tasks, intake requests) and logged,
    addresses are personal data."""
    return keys.keyed_digest(f"client:{address}")[:32]


def _bearer(headers: Headers) -> str | None:
    match = _BEARER.match(headers.get("authorization", ""))
    return match["token"] if match else None


def _challenge(agent: Agent, *, error: str | None) -> str:
    realm = f'{BEARER.capitalize()} realm="{agent.tenant.slug}/{agent.slug}"'
    return f'{realm}, error="{error}"' if error else realm


def _key_caller(key: InboundKey) -> Caller:
    return Caller(name=f"key:{key.prefix}", key_id=key.pk)


async def _live_key(agent: Agent, live_keys: dict[str, InboundKey], presented: str) -> InboundKey | None:
    """The unrevoked key of ``agent`` (one of ``live_keys``) that ``presented`` (``<prefix>.<secret>``)
    is, or None; its use is written once a minute at most."""
    parts = keys.split(presented)
    if parts is None:
        return None
    prefix, secret = parts
    key = live_keys.get(prefix)
    if key is None or not keys.matches(secret, key.secret_hash):
        return None
    now = timezone.now()
    if keys.use_is_stale(key.last_used_at, now):
        await (
            InboundKey.objects.for_tenant(agent.tenant_id)
            .filter(keys.stale_use(now), pk=key.pk)
            .aupdate(last_used_at=now)
        )
    return key
