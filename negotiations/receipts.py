"""Signed settlements: the canonical settlement, its signatures, and the receipt a third party checks.

The extension :data:`SETTLEMENT_EXTENSION` is ours (docs/settlement-signatures.md). A
settlement is signed as a JWS (RFC 7515, compact serialisation, payload attached) whose
payload is the RFC 8785 (JCS) canonical JSON of :func:`canonical_settlement`, made with the
tenant's ES256 key that signs its cards; the protected header names the key (``kid``) and the
key set it is in (``jku``), which must be the key set the party's card names. JCS is a2a-sdk's
(the one that canonicalises signed cards), JWS is PyJWT's.

Pure: no Django, no I/O. Fetching key sets is the caller's
(:mod:`negotiations.services.signatures`, the receipt views, the management command).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jwt
from a2a.utils._jcs import CanonicalizationError, canonicalize
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt import PyJWK
from jwt.algorithms import ECAlgorithm
from jwt.exceptions import PyJWKError, PyJWTError

# The extension a card names the party its agent acts for in (params.partyId), part of a party's
# identity here. A fixed URI, not one under PUBLIC_BASE_URL: an extension URI names the extension's
# meaning, which is the same on every Parley deployment, so a client can recognise it.
PARTY_EXTENSION = "https://parley.dev/ext/party/v1"
# The extension a card declares to sign settlements, a message lists when it carries a signature,
# and the key of that signature in the message's metadata. A fixed URI, as our other extensions'.
SETTLEMENT_EXTENSION = "https://parley.dev/ext/settlement-signature/v1"
ALGORITHM = "ES256"
Party = Literal["user", "agent"]
PARTIES: tuple[Party, ...] = ("user", "agent")


class ReceiptError(Exception):
    """A receipt, a signature or a key set that cannot be read or does not hold; the message says
    why, in a sentence for a person."""


class SettlementDiffers(ReceiptError):
    """A signature that holds, over another settlement than the one it is checked against."""


def identity(*, name: str, party_id: str, jwks: str) -> dict[str, str]:
    """A party as its card states it: the card's ``name``, the party extension's ``partyId``
    ("" when it names none) and the key set our extension's ``params.jwks`` names."""
    return {"name": name, "partyId": party_id, "jwks": jwks}


def identity_of_card(card: Mapping[str, Any]) -> dict[str, str] | None:
    """The party of the A2A 1.0 JSON ``card`` (:func:`identity`), or None when the card does not
    declare :data:`SETTLEMENT_EXTENSION` with the key set (``params.jwks``) it signs with."""
    extensions = [e for e in (card.get("capabilities") or {}).get("extensions") or [] if isinstance(e, dict)]
    declared = next((e for e in extensions if e.get("uri") == SETTLEMENT_EXTENSION), None)
    jwks = (declared.get("params") or {}).get("jwks") if declared is not None else None
    if not isinstance(jwks, str) or not jwks:
        return None
    party = next((e for e in extensions if e.get("uri") == PARTY_EXTENSION), {})
    party_id = (party.get("params") or {}).get("partyId")
    name = card.get("name")
    return identity(
        name=name if isinstance(name, str) else "",
        party_id=party_id if isinstance(party_id, str) else "",
        jwks=jwks,
    )


def canonical_settlement(
    *,
    task_id: str,
    context_id: str,
    parties: Mapping[Party, Mapping[str, str]],
    terms: Mapping[str, Any] | None,
    offer_id: str,
    verdict: str,
    basis: str,
) -> dict[str, Any]:
    """What both sides sign: ``{taskId, contextId, parties: {user, agent}, terms, offerId,
    verdict, basis}``. ``user`` is the side that sent the Task's requests, ``agent`` the side that
    answered (the A2A roles); ``offerId`` is the offer the closing move accepted ("" when the
    verdict rests on terms alone), ``verdict`` and ``basis`` are docs/wire-format.md#verdict's."""
    return {
        "taskId": task_id,
        "contextId": context_id,
        "parties": {role: dict(parties[role]) for role in PARTIES},
        "terms": dict(terms) if terms is not None else None,
        "offerId": offer_id,
        "verdict": verdict,
        "basis": basis,
    }


def canonical_bytes(settlement: Any) -> bytes:
    """RFC 8785 canonical UTF-8 of ``settlement``; ReceiptError when it has no canonical form (a
    number JSON cannot hold exactly, nesting too deep)."""
    try:
        return canonicalize(settlement).encode()
    except CanonicalizationError as exc:
        raise ReceiptError(f"The settlement has no canonical form: {exc}") from exc


def sign(settlement: Mapping[str, Any], *, private_pem: str, kid: str, jku: str) -> str:
    """A compact JWS over :func:`canonical_bytes` of ``settlement``: ES256 with the PEM key
    ``private_pem``, the header naming ``kid`` and ``jku``."""
    return jwt.api_jws.encode(
        canonical_bytes(settlement),
        private_pem,
        algorithm=ALGORITHM,
        headers={"kid": kid, "jku": jku, "typ": "JOSE"},
    )


def header_of(jws: str) -> dict[str, Any]:
    """The protected header of the compact JWS ``jws``, unverified; ReceiptError when it is no JWS."""
    try:
        return jwt.api_jws.get_unverified_header(jws)
    except PyJWTError as exc:
        raise ReceiptError(f"The signature is not a compact JWS: {exc}") from exc


def payload_of(jws: str) -> Any:
    """The JSON the compact JWS ``jws`` carries, unverified; ReceiptError when it carries none."""
    try:
        payload = jwt.api_jws.decode_complete(jws, options={"verify_signature": False})["payload"]
        return json.loads(payload)
    except (PyJWTError, ValueError) as exc:
        raise ReceiptError(f"The signature carries no JSON settlement: {exc}") from exc


def verify(
    jws: str, settlement: Mapping[str, Any], *, jwks: str, keys_for: Callable[[str], list[Any]]
) -> dict[str, Any]:
    """Check that ``jws`` signs exactly ``settlement`` with a key of the key set at ``jwks``, whose
    keys ``keys_for(jwks)`` gives (its JWKS ``keys``; called only once the header names that key
    set, so that a malformed signature fetches nothing; it raises :class:`ReceiptError` when it
    has none to give). Returns the key (a JWK dict) that the signature holds with.

    Raises :class:`ReceiptError` saying which: not a JWS; its header names another key set than
    ``jwks``, or an algorithm other than ES256; no key of that ``kid`` in the set, or one that is
    no ES256 key (an ``oct`` secret under that ``kid``, say); the signature does not hold; or it
    signs another settlement (naming the fields that differ).
    """
    header = header_of(jws)
    if header.get("alg") != ALGORITHM:
        raise ReceiptError(f"The signature uses {header.get('alg')!r}, not {ALGORITHM}.")
    if header.get("jku") != jwks:
        raise ReceiptError(
            f"The signature names the key set {header.get('jku')!r}, not the party's {jwks!r}."
        )
    kid = header.get("kid")
    key = next((k for k in keys_for(jwks) if isinstance(k, dict) and k.get("kid") == kid), None)
    if key is None:
        raise ReceiptError(f"The key set {jwks} has no key {kid!r}.")
    try:
        # The key is read as ES256's, whatever its own "kty" and "alg" say: a key of another type
        # under the kid is refused here rather than handed to ES256 to fail on.
        public = PyJWK(key, algorithm=ALGORITHM).key
        payload = jwt.api_jws.decode_complete(jws, key=public, algorithms=[ALGORITHM])["payload"]
    except (PyJWTError, PyJWKError) as exc:
        raise ReceiptError(f"The signature does not hold with key {kid!r} of {jwks}: {exc}") from exc
    if payload != canonical_bytes(settlement):
        try:
            signed = json.loads(payload)
        except ValueError:
            signed = None
        raise SettlementDiffers(
            f"The signature is over another settlement: {differences(signed, settlement)}."
        )
    return dict(key)


def same_key(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether the EC public keys (JWK dicts) ``a`` and ``b`` are one key: the members of their
    RFC 7638 thumbprint (``crv``, ``kty``, ``x``, ``y``) are equal, whatever their ``kid``."""
    members = ("crv", "kty", "x", "y")
    return all(a.get(m) == b.get(m) for m in members)


def public_jwk(private_pem: str) -> dict[str, Any]:
    """The public half of the PEM EC key ``private_pem`` as a JWK dict (``kty``, ``crv``, ``x``, ``y``)."""
    private = serialization.load_pem_private_key(private_pem.encode(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    return jwk


def differences(signed: Any, settlement: Mapping[str, Any]) -> str:
    """Which top-level fields of ``signed`` differ from ``settlement``, as "terms, offerId differ"."""
    if not isinstance(signed, dict):
        return "it signs no settlement object"
    fields = sorted(
        key
        for key in {*signed, *settlement}
        if canonical_or_none(signed.get(key)) != canonical_or_none(settlement.get(key))
    )
    return f"{', '.join(fields)} differ" if fields else "the same fields, written otherwise"


def canonical_or_none(value: Any) -> bytes | None:
    """:func:`canonical_bytes` of ``value``, or None when it has no canonical form."""
    try:
        return canonical_bytes(value)
    except ReceiptError:
        return None


def receipt(settlement: Mapping[str, Any], signatures: Mapping[Party, str]) -> dict[str, Any]:
    """The receipt: ``{"settlement", "signatures": {role: {"jws", "jwks"}}}`` for each role that
    signed, ``jwks`` the key set its signature names (where a verifier fetches the key)."""
    return {
        "settlement": dict(settlement),
        "signatures": {
            role: {"jws": jws, "jwks": str(header_of(jws).get("jku", ""))}
            for role, jws in signatures.items()
            if jws
        },
    }


@dataclass(frozen=True)
class ReceiptCheck:
    """Whether a receipt holds: ``valid`` when both parties' signatures hold; ``signatures`` maps
    each role to None (it holds) or why not; ``reason`` is a sentence for the whole."""

    valid: bool
    signatures: dict[str, str | None]
    reason: str


def key_sets_named(document: Any) -> list[str]:
    """The key set URLs a receipt's parties name, in role order ("user", then "agent"); those
    that are not strings are left out. For fetching before :func:`verify_receipt`."""
    parties = document.get("settlement", {}).get("parties") if isinstance(document, dict) else None
    if not isinstance(parties, dict):
        return []
    named = [p.get("jwks") for p in (parties.get(role) for role in PARTIES) if isinstance(p, dict)]
    return [url for url in named if isinstance(url, str) and url]


def verify_receipt(document: Any, keys_for: Callable[[str], list[Any]]) -> ReceiptCheck:
    """Check the receipt ``document`` (:func:`receipt`'s shape) with nothing but the parties' keys:
    ``keys_for(url)`` gives the ``keys`` of the key set at ``url`` (the key set each party of the
    settlement names), raising :class:`ReceiptError` when it has none to give.

    Each role's signature must sign the receipt's settlement, with a key of the key set that role's
    party names (:func:`verify`), and the two keys must differ (:func:`same_key`). Raises
    :class:`ReceiptError` only for a document that is no receipt at all (not an object, no
    settlement, no parties); a missing or failing signature is a :class:`ReceiptCheck` that is not
    valid, saying why.
    """
    if not isinstance(document, dict) or not isinstance(document.get("settlement"), dict):
        raise ReceiptError("A receipt is a JSON object with a settlement and its signatures.")
    settlement = document["settlement"]
    parties = settlement.get("parties")
    if not isinstance(parties, dict) or not all(isinstance(parties.get(role), dict) for role in PARTIES):
        raise ReceiptError("The settlement names no parties (parties.user and parties.agent).")
    signatures = document.get("signatures")
    signatures = signatures if isinstance(signatures, dict) else {}
    found: dict[str, str | None] = {}
    keys: dict[str, dict[str, Any]] = {}
    for role in PARTIES:
        entry = signatures.get(role)
        jws = entry.get("jws") if isinstance(entry, dict) else None
        jwks = parties[role].get("jwks")
        if not isinstance(jws, str) or not jws:
            found[role] = f"There is no signature of the {role} side."
            continue
        if not isinstance(jwks, str) or not jwks:
            found[role] = f"The {role} side names no key set."
            continue
        try:
            keys[role] = verify(jws, settlement, jwks=jwks, keys_for=keys_for)
            found[role] = None
        except ReceiptError as exc:
            found[role] = str(exc)
    if len(keys) == len(PARTIES) and same_key(keys["user"], keys["agent"]):
        # One key signed for both sides: nobody but its holder agreed to anything.
        found["agent"] = "It is made with the same key as the user side's: one party signed for both."
    failed = [f"{role}: {why}" for role, why in found.items() if why is not None]
    if failed:
        return ReceiptCheck(False, found, "The receipt does not hold. " + " ".join(failed))
    return ReceiptCheck(True, found, "Both signatures hold: each side signed exactly this settlement.")
