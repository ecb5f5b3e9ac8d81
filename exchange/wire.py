"""Agent Exchange on the wire: the extension, the request, its reference and the receipt.

Agent Exchange carries a delegated request that must not travel in the clear
(docs/agent-exchange.md has the whole profile). The complete request — the
delegation token, a standing mandate, protected values such as mailbox
credentials or account references — goes once, over HTTPS, to the
recipient's preparation endpoint (or a channel the host trusts); A2A then
carries only its **reference**: ``sha256:`` and the unpadded base64url
SHA-256 digest of the request's canonical JSON (RFC 8785). Either side
derives it alone, so a client can check that a preparation endpoint stored
exactly what it sent, and a task history holds nothing that could be replayed
elsewhere.

Everything here is pure: no database, no network.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

import jwt
import rfc8785
from a2a.types import Message
from google.protobuf.json_format import MessageToDict
from jsonschema import Draft202012Validator, ValidationError

# The profile's URI: what a card advertises in capabilities.extensions and a client activates with the
# A2A-Extensions service parameter. Ours, since our reference is a digest (see docs/agent-exchange.md).
EXTENSION_URI = "urn:parley:extension:agent-exchange:v1"
PREPARATION_MEDIA_TYPE = "application/vnd.absolutejs.agent-exchange-preparation+json"
REFERENCE_MEDIA_TYPE = "application/vnd.absolutejs.agent-exchange-reference+json"
RECEIPT_MEDIA_TYPE = "application/vnd.absolutejs.agent-exchange-receipt+json"
# Served under the agent's A2A URL: /a2a/<tenant>/<agent>/agent-exchange/preparation.
PREPARATION_PATH = "/agent-exchange/preparation"
RECEIPT_ARTIFACT_ID = "agent-exchange:receipt"
PROCESSING_MODE = "tool-confined"
# Bounds of a receipt, so that a peer cannot hand us (or a task store) an unbounded one.
MAX_RECEIPT_BYTES = 2048
# The largest integer an IEEE 754 double holds exactly (I-JSON, RFC 7493 §2.2).
MAX_EXACT = 2**53 - 1
# Characters a protected value needs to be redacted from a peer's words (:func:`redacted`).
MIN_REDACTED = 4
# 9999-12-31T23:59:59Z, the last second a date can name.
LAST_SECOND = 253402300799
# Text that is more than white space.
_SAID = r"\S"
_REFERENCE_PATTERN = r"^sha256:[A-Za-z0-9_-]{43}$"

REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["exchangeId", "recipient", "purpose", "instruction", "expiresAt", "delegation"],
    "properties": {
        "exchangeId": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"},
        "recipient": {"type": "string", "minLength": 1, "maxLength": 500},
        "purpose": {"type": "string", "pattern": _SAID, "maxLength": 500},
        "instruction": {"type": "string", "pattern": _SAID, "maxLength": 20000},
        "expiresAt": {"type": "integer", "minimum": 0, "maximum": LAST_SECOND},
        "delegation": {
            "type": "object",
            "additionalProperties": False,
            "required": ["accessToken"],
            "properties": {"accessToken": {"type": "string", "minLength": 1, "maxLength": 8192}},
        },
        "mandate": {"type": "string", "minLength": 1, "maxLength": 8192},
        "protected": {"type": "object", "maxProperties": 32},
    },
}
RECEIPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "exchangeId",
        "reference",
        "status",
        "completedAt",
        "processingMode",
        "modelObservedSecret",
    ],
    "properties": {
        "exchangeId": REQUEST_SCHEMA["properties"]["exchangeId"],
        "reference": {"type": "string", "pattern": _REFERENCE_PATTERN},
        "status": {"const": "submitted"},
        "completedAt": {"type": "integer", "minimum": 1, "maximum": MAX_EXACT},
        "processingMode": {"const": PROCESSING_MODE},
        "modelObservedSecret": {"const": False},
        "mandateId": {"type": "string", "minLength": 1, "maxLength": 200},
        "usesRemaining": {"type": "integer", "minimum": 0, "maximum": MAX_EXACT},
    },
}
REFERENCE_DATA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reference"],
    "properties": {"reference": {"type": "string", "pattern": _REFERENCE_PATTERN}},
}


class WireError(ValueError):
    """Input that is not what the profile allows; the message names the field and the rule."""


def reference_of(request: dict[str, Any]) -> str:
    """The reference of ``request``: ``sha256:<43 base64url characters>`` over its RFC 8785 JSON.

    Raises :class:`WireError` when ``request`` is not a valid request (:func:`check_request`) or
    has no canonical form (a number outside IEEE 754 doubles' exact integers, RFC 8785 §3.2.2.3).
    """
    check_request(request)
    try:
        canonical = rfc8785.dumps(request)
    except rfc8785.CanonicalizationError:
        raise WireError("request: has no canonical JSON form (RFC 8785)") from None
    digest = hashlib.sha256(canonical).digest()
    return "sha256:" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def check_request(request: Any) -> dict[str, Any]:
    """``request`` if it is an Agent Exchange request (:data:`REQUEST_SCHEMA`, and no number beyond
    ±:data:`MAX_EXACT`); else :class:`WireError` naming each field that breaks a rule
    (``request.delegation.accessToken: …``)."""
    _check(request, REQUEST_SCHEMA, "request")
    _check_numbers(request, "request")
    return request


def check_receipt(receipt: Any) -> dict[str, Any]:
    """``receipt`` if it is a receipt (:data:`RECEIPT_SCHEMA`) of at most :data:`MAX_RECEIPT_BYTES`
    bytes; else :class:`WireError`."""
    _check(receipt, RECEIPT_SCHEMA, "receipt")
    _check_numbers(receipt, "receipt")
    if len(rfc8785.dumps(receipt)) > MAX_RECEIPT_BYTES:
        raise WireError(f"receipt: longer than {MAX_RECEIPT_BYTES} bytes")
    return receipt


def check_reference_data(data: Any) -> str:
    """The reference a message's reference part carries (``{"reference": "sha256:…"}``, nothing
    else); :class:`WireError` when the part holds anything else."""
    _check(data, REFERENCE_DATA_SCHEMA, "reference")
    return str(data["reference"])


def exchange_part(message: Message) -> Any | None:
    """The data of ``message``'s reference part when it is an Agent Exchange message, else None.

    A message is one when it lists :data:`EXTENSION_URI` in ``extensions``; it then has exactly
    one data part, of media type :data:`REFERENCE_MEDIA_TYPE` or none (the 0.3 wire carries no
    media type on data parts). Raises :class:`WireError` when it has another shape.
    """
    if EXTENSION_URI not in message.extensions:
        return None
    data = [part for part in message.parts if part.HasField("data")]
    if len(data) != 1 or data[0].media_type not in ("", REFERENCE_MEDIA_TYPE):
        raise WireError(f"message: an Agent Exchange message has one data part, of {REFERENCE_MEDIA_TYPE}")
    return MessageToDict(data[0])["data"]


def claims_exchange(message: Message) -> bool:
    """Whether ``message`` presents itself as an Agent Exchange message, in its ``extensions`` or by
    a part of media type :data:`REFERENCE_MEDIA_TYPE`."""
    return EXTENSION_URI in message.extensions or any(
        part.media_type == REFERENCE_MEDIA_TYPE for part in message.parts
    )


def mandate_id_of(request: Any) -> str | None:
    """The id (``jti``) of the standing mandate ``request`` carries, read without verifying it (the
    recipient verifies it); None when it carries none, or one whose payload names no string ``jti``."""
    mandate = request.get("mandate") if isinstance(request, dict) else None
    if not isinstance(mandate, str):
        return None
    try:
        jti = jwt.decode(mandate, options={"verify_signature": False}).get("jti")
    except jwt.PyJWTError:
        return None
    return jti if isinstance(jti, str) else None


def redacted(text: str, request: Any) -> str:
    """``text`` (a peer's words about ``request``) with every secret of the request replaced by
    ``[redacted]``: the delegation token, the mandate, and each string or number of ``protected``
    of at least :data:`MIN_REDACTED` characters (a shorter one would blot out ordinary words)."""
    if not isinstance(request, dict):
        return text
    secrets = [request.get("mandate"), (request.get("delegation") or {}).get("accessToken")]
    secrets += _leaves(request.get("protected"))
    shown = {str(secret) for secret in secrets if secret is not None}
    for secret in sorted((s for s in shown if len(s) >= MIN_REDACTED), key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if isinstance(value, bool) or value is None else [value]


def _check_numbers(value: Any, path: str) -> None:
    """Raise :class:`exchange.WireError` for a number beyond ±(2**53 - 1) in ``value``.

    Both sides keep the request in a ``jsonb`` column, and Postgres gives back a float such as
    ``1e16`` as the integer ``10000000000000000``, which has no RFC 8785 form: the request would
    no longer digest to its reference. Within I-JSON's range (RFC 7493 §2.2) it comes back
    exactly as it went in.
    """
    if isinstance(value, bool):
        return
    if isinstance(value, int | float) and abs(value) > MAX_EXACT:
        raise WireError(f"{path}: a number beyond ±(2**53 - 1), which JSON cannot carry exactly")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, f"{path}[{index}]")


def _check(value: Any, schema: dict[str, Any], name: str) -> None:
    """Raise :class:`WireError` listing where ``value`` breaks ``schema`` and which rule, never what
    it holds there: a request's values are tokens and protected values, and errors are shown,
    stored (an idempotent answer) and logged."""
    problems = sorted(
        Draft202012Validator(schema).iter_errors(value), key=lambda p: list(map(str, p.absolute_path))
    )
    if problems:
        raise WireError("; ".join(f"{_where(name, p.absolute_path)}: {_rule(p)}" for p in problems))


def _where(name: str, path: Iterable[str | int]) -> str:
    return name + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)


def _rule(problem: ValidationError) -> str:
    """The rule ``problem`` breaks, in words that name the schema's terms only."""
    rule, bound = problem.validator, problem.validator_value
    if rule in ("required", "additionalProperties"):
        return str(problem.message)  # names properties, not values
    said = {
        "type": f"must be of type {bound}",
        "pattern": "is empty or not in the expected form" if bound == _SAID else f"must match {bound}",
        "minLength": f"must be at least {bound} characters",
        "maxLength": f"must be at most {bound} characters",
        "minimum": f"must be at least {bound}",
        "maximum": f"must be at most {bound}",
        "maxProperties": f"must have at most {bound} members",
        "const": f"must be {bound!r}",
    }
    return said.get(str(rule), f"breaks the rule {rule}")
