"""Keys shown once as ``<prefix>.<secret>`` and kept as a keyed hash: the public endpoint's inbound
keys (:mod:`a2a_gateway.auth`) and the REST API's keys (:func:`parley.services.api_key_create`).

The prefix (12 hex digits) is a public, unique key id; the secret is 256
random bits. Only ``hmac-sha256$<hex>`` of the secret is stored, keyed by
``settings.KEY_HASH_SECRET`` (default ``SECRET_KEY``; changing it invalidates
every key). A fast keyed hash is enough where a password hash would be needed
for guessable secrets: nobody guesses 256 random bits, and a leaked table alone
verifies nothing without the server's key. Secrets are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

HASH_SCHEME = "hmac-sha256"
PREFIX_BYTES = 6
SECRET_BYTES = 32
# Anything longer is not a key of ours: refused before it is hashed.
MAX_KEY_CHARS = 200
# last_used_at is written at most this often per key: a busy key costs one UPDATE a minute.
LAST_USED_EVERY = timedelta(minutes=1)
_PREFIX = re.compile(rf"[0-9a-f]{{{2 * PREFIX_BYTES}}}")


def keyed_digest(message: str) -> str:
    """HMAC-SHA256 of ``message`` under ``settings.KEY_HASH_SECRET``, as 64 hex digits."""
    return hmac.new(str(settings.KEY_HASH_SECRET).encode(), message.encode(), hashlib.sha256).hexdigest()


def secret_hash(secret: str) -> str:
    """What is stored for ``secret``: ``hmac-sha256$<hex>``."""
    return f"{HASH_SCHEME}${keyed_digest(secret)}"


def new_secret() -> str:
    """A fresh secret: 256 random bits, URL-safe base64."""
    return secrets.token_urlsafe(SECRET_BYTES)


def issue(insert: Callable[[str], None]) -> str:
    """Draw a prefix and call ``insert(prefix)`` (which saves the row) until it is unique; returns it.

    ``insert`` runs in a savepoint of its own, so a collision (48 random bits)
    rolls back only the failed insert before the next draw.
    """
    while True:
        prefix = secrets.token_hex(PREFIX_BYTES)
        try:
            with transaction.atomic():
                insert(prefix)
        except IntegrityError:
            continue
        return prefix


def split(presented: object) -> tuple[str, str] | None:
    """``(prefix, secret)`` of a key as presented, or None when it cannot be one of ours (not a
    string, longer than :data:`MAX_KEY_CHARS`, no dot, a prefix that is not 12 hex digits, no secret)."""
    if not isinstance(presented, str) or len(presented) > MAX_KEY_CHARS:
        return None
    prefix, _, secret = presented.partition(".")
    if not _PREFIX.fullmatch(prefix) or not secret:
        return None
    return prefix, secret


def matches(secret: str, stored: str) -> bool:
    """Whether ``secret`` is the one ``stored`` (a :func:`secret_hash`) was made from; constant time."""
    return hmac.compare_digest(secret_hash(secret), stored)


def use_is_stale(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether a use at ``now`` should be written (the last one written is older than a minute)."""
    return last_used_at is None or last_used_at < now - LAST_USED_EVERY


def stale_use(now: datetime) -> Q:
    """:func:`use_is_stale` in SQL, to filter the ``UPDATE``: of processes racing, about one writes."""
    return Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_EVERY)
