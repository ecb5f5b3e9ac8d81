"""Signed AgentCards: a per-tenant ES256 key, the card's JWS, and the JSON Web Key Set it names.

The A2A 1.0 specification's "Agent Card Signing": the signature is a detached JWS (RFC 7515
Appendix F) over the card's RFC 8785 (JCS) canonical JSON, signatures and
empty values left out, as a2a-sdk's :func:`a2a.utils.signing.create_agent_card_signer`
computes it. The protected header carries ``alg`` ES256, the key's ``kid``
(its RFC 7638 thumbprint) and ``jku``, the URL of the key set: served under
each agent's own URL (``<agent url>/.well-known/jwks.json``, and at
``/.well-known/jwks.json`` on an agent's own host name), so that a verifier
who fetches keys only from the card's origin, as ours does, finds them.

A tenant has at most one active key; creating one retires the others, and
the key set lists active keys only. ECDSA signatures are randomised, so a
signed card's ``signatures`` differ from one response to the next while
everything they sign stays byte-identical.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from a2a.types import AgentCard
from a2a.utils.signing import ProtectedHeader, create_agent_card_signer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.db import transaction
from jwt.algorithms import ECAlgorithm
from starlette.requests import Request
from starlette.responses import JSONResponse

from a2a_gateway.models import SigningKey
from parley.models import Tenant

ALGORITHM = "ES256"
JWKS_PATH = "/.well-known/jwks.json"
# Seconds a verifier may cache the key set: a retired key stops verifying within this time.
JWKS_MAX_AGE = 300


def signing_key_create(*, tenant: Tenant) -> SigningKey:
    """Make a new ES256 (P-256) key the tenant's only active one; its earlier keys are retired.

    ``public_jwk`` is the public half as a JWK (``kty``, ``crv``, ``x``, ``y``,
    ``kid``, ``use`` ``sig``, ``alg`` ES256); ``private_pem`` is PKCS#8 PEM.
    """
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = json.loads(ECAlgorithm.to_jwk(private.public_key()))
    kid = _thumbprint(public)
    jwk = {**public, "kid": kid, "use": "sig", "alg": ALGORITHM}
    with transaction.atomic():
        SigningKey.objects.for_tenant(tenant.pk).filter(active=True).update(active=False)
        return SigningKey.objects.create(tenant=tenant, kid=kid, private_pem=pem, public_jwk=jwk, active=True)


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: base64url SHA-256 of the EC key's required members, sorted, without whitespace."""
    members = {name: jwk[name] for name in ("crv", "kty", "x", "y")}
    digest = hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def active_signing_key(tenant_id: int) -> SigningKey | None:
    """The key the tenant's cards are signed with, or None: its cards are served unsigned."""
    return SigningKey.objects.for_tenant(tenant_id).filter(active=True).order_by("-created_at").first()


def sign_card(card: AgentCard, key: SigningKey, *, jku: str) -> AgentCard:
    """A copy of ``card`` with one more signature, by ``key``, naming the key set at ``jku``."""
    signed = AgentCard()
    signed.CopyFrom(card)
    header: ProtectedHeader = {"alg": ALGORITHM, "kid": key.kid, "jku": jku, "typ": "JOSE"}
    return create_agent_card_signer(key.private_pem, header)(signed)


async def jwks_endpoint(request: Request) -> JSONResponse:
    """``GET <agent url>/.well-known/jwks.json``: the JSON Web Key Set (RFC 7517 §5) of the agent's
    tenant, its active public keys (``{"keys": []}`` when it signs nothing)."""
    agent = request.scope["state"]["agent"]
    active = SigningKey.objects.for_tenant(agent.tenant_id).filter(active=True).order_by("-created_at")
    keys = [key.public_jwk async for key in active]
    return JSONResponse({"keys": keys}, headers={"Cache-Control": f"public, max-age={JWKS_MAX_AGE}"})
