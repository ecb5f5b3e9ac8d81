"""A token issuer for Agent Exchange tests: an EC P-256 key, its public JWKS, and signed tokens.

It stands for the party's authorisation server, which is not ours: the recipient verifies what
it signs against the JWKS its operator configured (:class:`exchange.models.ExchangeProfile`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

ISSUER = "https://auth.party.example"
SCOPE = "agent-exchange"


class Issuer:
    """Signs delegation tokens and standing mandates with its own key (``kid``)."""

    def __init__(self, kid: str = "party-key-1") -> None:
        self.kid = kid
        self.key = ec.generate_private_key(ec.SECP256R1())

    @property
    def jwks(self) -> dict[str, Any]:
        """The public key set an operator gives the recipient's profile."""
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "ES256"}]}

    def sign(self, claims: dict[str, Any], *, typ: str = "JWT") -> str:
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": self.kid, "typ": typ})

    def token(self, audience: str, **claims: Any) -> str:
        """A delegation token (typed ``at+jwt``, RFC 9068) for ``audience``: subject ``party:tomas``,
        the scope, an hour to live; ``claims`` override or (as None) remove any of them."""
        now = int(time.time())
        base = {
            "iss": ISSUER,
            "sub": "party:tomas",
            "aud": audience,
            "scope": SCOPE,
            "iat": now,
            "exp": now + 3600,
        }
        return self.sign({k: v for k, v in {**base, **claims}.items() if v is not None}, typ="at+jwt")

    def mandate(self, audience: str, *, max_uses: int = 2, **claims: Any) -> str:
        """A standing mandate of ``max_uses`` exchanges with ``audience``, granted by ``party:tomas``."""
        now = int(time.time())
        base = {
            "iss": ISSUER,
            "sub": "party:tomas",
            "aud": audience,
            "jti": f"mandate-{uuid.uuid4().hex[:8]}",
            "maxUses": max_uses,
            "exp": now + 86400,
        }
        return self.sign({k: v for k, v in {**base, **claims}.items() if v is not None})


def request_for(recipient: str, token: str, **members: Any) -> dict[str, Any]:
    """A complete Agent Exchange request to ``recipient`` (its A2A URL) delegated by ``token``."""
    return {
        "exchangeId": f"ex-{uuid.uuid4().hex[:12]}",
        "recipient": recipient,
        "purpose": "Book a repair visit for the boiler",
        "instruction": "Book the earliest repair visit next week and confirm the slot.",
        "expiresAt": int(time.time()) + 600,
        "delegation": {"accessToken": token},
        "protected": {"mailbox": {"user": "tomas@example.com", "password": "hunter2-secret"}},
        **members,
    }
