"""Verifying what delegates a party's authority: an OAuth access token and a standing mandate.

Both are signed with a key of the JSON Web Key Set the recipient's operator configured
(:attr:`exchange.models.ExchangeProfile.jwks`) and checked by PyJWT. The access token is a JWT
(RFC 9068): ``iss``, ``aud``, ``exp`` and ``sub`` are required, and its ``scope`` (space-separated,
RFC 8693 §4.2) must include the profile's scope. A standing mandate is a compact JWS (RFC 7515)
whose JSON payload says who granted it (``sub``, the token's subject), to whom (``aud``), until
when (``exp``), its id (``jti``) and how many exchanges it allows (``maxUses``).

Only asymmetric algorithms are accepted, each key with the one algorithm it names or implies:
a published key set must never hold the secret that forges a signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jwt
from django.core.exceptions import ValidationError

from exchange.wire import MAX_EXACT
from negotiations.client import SIGNATURE_ALGORITHMS

# Clock skew allowed between the token's issuer and us, in seconds.
LEEWAY = 30
# The JOSE "typ" of a JWT access token (RFC 9068 §2.1; "application/at+jwt" is the same type).
ACCESS_TOKEN_TYPE = "at+jwt"


class DelegationError(Exception):
    """The token or mandate does not authorise the exchange; the message says why, naming no secret."""


@dataclass(frozen=True)
class Delegation:
    """A verified access token: who delegated (``subject``) and the scopes granted."""

    subject: str
    scopes: frozenset[str]


@dataclass(frozen=True)
class Mandate:
    """A verified standing mandate: its id (``jti``) and the number of exchanges it allows."""

    mandate_id: str
    max_uses: int


def check_jwks(jwks: Any) -> None:
    """Raise ``ValidationError`` unless ``jwks`` is a key set ({"keys": [...]}) of public keys PyJWT can
    use with an asymmetric algorithm (:data:`negotiations.client.SIGNATURE_ALGORITHMS`)."""
    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list) or not jwks["keys"]:
        raise ValidationError('A JSON Web Key Set is an object with a non-empty "keys" list.', code="invalid")
    for index, key in enumerate(jwks["keys"]):
        if not isinstance(key, dict):
            raise ValidationError(f"keys[{index}] is not a JSON Web Key (an object).", code="invalid")
        try:
            jwk = jwt.PyJWK(key)
        except (jwt.PyJWKError, jwt.InvalidKeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"keys[{index}] is not a usable key ({exc}).", code="invalid") from None
        if jwk.algorithm_name not in SIGNATURE_ALGORITHMS:
            raise ValidationError(
                f"keys[{index}] signs with {jwk.algorithm_name}; only asymmetric algorithms are accepted.",
                code="invalid",
            )
        if any(member in key for member in ("d", "p", "q", "k")):
            raise ValidationError(f"keys[{index}] holds private key material; give the public key only.")
        if key.get("use", "sig") != "sig":
            raise ValidationError(
                f'keys[{index}] is for "use": {key["use"]!r}; these keys must sign ("sig").'
            )


def verify_token(
    token: str, *, jwks: dict[str, Any], issuer: str, audience: str | list[str], scope: str
) -> Delegation:
    """The delegation ``token`` grants, once verified (see the module docstring).

    ``audience``: the ``aud`` it must have, or any of several. Its JOSE header's ``typ`` must be
    ``at+jwt`` (RFC 9068 §2.1, §4), so that no other JWT the issuer signs passes for one.

    Raises :class:`DelegationError` naming the first check that failed ("The delegation token's
    audience is not this agent.", "… has expired.", "… lacks the scope 'agent-exchange'.", …).
    """
    try:
        typ = str(jwt.get_unverified_header(token).get("typ", ""))
    except jwt.PyJWTError:
        raise DelegationError("The delegation token is not a valid signed token.") from None
    if typ.lower().removeprefix("application/") != ACCESS_TOKEN_TYPE:
        raise DelegationError(f"The delegation token is not typed {ACCESS_TOKEN_TYPE} (RFC 9068).")
    claims = _decode(token, "delegation token", jwks=jwks, issuer=issuer, audience=audience)
    granted = claims.get("scope", "")
    scopes = frozenset(granted.split()) if isinstance(granted, str) else frozenset()
    if scope not in scopes:
        raise DelegationError(f"The delegation token lacks the scope {scope!r}.")
    return Delegation(subject=str(claims["sub"]), scopes=scopes)


def verify_mandate(
    mandate: str, *, jwks: dict[str, Any], issuer: str, audience: str | list[str], subject: str
) -> Mandate:
    """The standing ``mandate``, once verified; it must be granted by ``subject`` (the token's).

    Raises :class:`DelegationError` naming the first check that failed.
    """
    claims = _decode(mandate, "mandate", jwks=jwks, issuer=issuer, audience=audience, also=["jti"])
    if claims["sub"] != subject:
        raise DelegationError("The mandate was granted by someone other than the delegation token's subject.")
    uses = claims.get("maxUses")
    if not isinstance(uses, int) or isinstance(uses, bool) or not 1 <= uses <= MAX_EXACT:
        raise DelegationError(f"The mandate's maxUses is not an integer from 1 to {MAX_EXACT}.")
    mandate_id = claims["jti"]
    if not isinstance(mandate_id, str) or not 0 < len(mandate_id) <= 200:
        raise DelegationError("The mandate's jti is not an id of 1 to 200 characters.")
    return Mandate(mandate_id=mandate_id, max_uses=uses)


def _decode(
    token: str,
    what: str,
    *,
    jwks: dict[str, Any],
    issuer: str,
    audience: str | list[str],
    also: list[str] | None = None,
) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
        key = _key(jwks, header.get("kid"), what)
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=[key.algorithm_name],
            audience=audience,
            issuer=issuer,
            leeway=LEEWAY,
            options={"require": ["exp", "iss", "aud", "sub", *(also or [])]},
        )
    except jwt.ExpiredSignatureError:
        raise DelegationError(f"The {what} has expired.") from None
    except jwt.InvalidAudienceError:
        raise DelegationError(f"The {what}'s audience is not this agent.") from None
    except jwt.InvalidIssuerError:
        raise DelegationError(f"The {what} was not issued by the issuer this agent trusts.") from None
    except jwt.MissingRequiredClaimError as exc:
        raise DelegationError(f"The {what} lacks the {exc.claim!r} claim.") from None
    except jwt.InvalidSignatureError:
        raise DelegationError(f"The {what}'s signature does not verify.") from None
    except jwt.InvalidAlgorithmError:
        raise DelegationError(f"The {what} is signed with an algorithm its key does not use.") from None
    except jwt.PyJWTError:
        raise DelegationError(f"The {what} is not a valid signed token.") from None
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise DelegationError(f"The {what}'s subject is not a string.")
    return claims


def _key(jwks: dict[str, Any], kid: Any, what: str) -> jwt.PyJWK:
    keys = [key for key in jwks.get("keys", []) if kid is None or key.get("kid") == kid]
    if not keys:
        raise DelegationError(f"No key of this agent's key set signed the {what}.")
    if len(keys) > 1:
        raise DelegationError(
            f"The {what} names no key id (kid) and the key set holds several keys."
            if kid is None
            else f"The {what}'s key id (kid) names several keys of this agent's key set."
        )
    jwk = jwt.PyJWK(keys[0])
    if jwk.algorithm_name not in SIGNATURE_ALGORITHMS:
        raise DelegationError(f"The {what}'s key uses a symmetric algorithm.")
    return jwk
