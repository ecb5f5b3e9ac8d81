"""What is sent: Standard Webhooks (https://www.standardwebhooks.com, "Standard Webhooks" spec v1).

Some live events (:mod:`parley.live`) are webhook events too, under the type
:data:`parley.webhooks.fan_out.WEBHOOK_TYPES` gives them. Each is POSTed to
every active endpoint of the tenant subscribed to its type::

    POST <endpoint url>
    content-type: application/json
    webhook-id: msg_3b0c…          (one per delivery: the same on every retry and resend)
    webhook-timestamp: 1767225600  (Unix seconds of this attempt)
    webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">

    {"data":{…the event's payload…},"timestamp":"2026-01-01T00:00:00.123456Z","type":"run.finished"}

The HMAC key is the base64-decoded part of the endpoint's secret after
``whsec_``. ``timestamp`` in the body is when the event happened (ISO 8601,
UTC); ``data`` is the live event's payload.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from datetime import UTC, datetime

from parley.models import WebhookDelivery

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh endpoint secret: ``whsec_`` + base64 of :data:`SECRET_BYTES` random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def sign(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>`` of ``"{msg_id}.{timestamp}.{body}"``
    keyed with the base64-decoded ``secret`` (its ``whsec_`` prefix removed)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def body_of(delivery: WebhookDelivery) -> bytes:
    """The bytes POSTed for ``delivery``: its payload as compact JSON with sorted keys, so every
    attempt sends the same bytes (jsonb does not keep key order)."""
    return json.dumps(delivery.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def iso(moment: datetime) -> str:
    """``moment`` as ISO 8601 in UTC with a ``Z``: ``2026-01-01T00:00:00.123456Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
