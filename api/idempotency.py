"""``Idempotency-Key`` on every POST: a retried request gets the first response and changes nothing.

The scheme of the IETF draft "The Idempotency-Key HTTP Header Field"
(draft-ietf-httpapi-idempotency-key-header): the key is the client's, unique
per request it means; the server stores the first response and replays it,
answers 422 when the key comes back with another request and 409 while the
first one is still being handled. Responses of 500 and above are not kept, so
a retry after a server error runs again. Keys are scoped to the tenant and
kept for ``settings.IDEMPOTENCY_KEY_TTL`` seconds.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from api.models import IdempotencyKey
from parley.models import ApiKey

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# A key left in flight this long was abandoned (its process died): a retry may take it over.
IN_FLIGHT_FOR = timedelta(minutes=5)
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


class KeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"
    default_detail = f"This {HEADER} was used for a different request; use a new key for a new request."


class KeyInFlight(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "idempotency_key_in_flight"
    default_detail = f"A request with this {HEADER} is still being handled; retry later."


class Replay(Exception):
    """Raised to answer with the stored first response instead of handling the request again."""

    def __init__(self, record: IdempotencyKey) -> None:
        super().__init__(record.key)
        self.record = record


def fingerprint(request: Request) -> str:
    """SHA-256 (hex) of the request's method, full path and body."""
    digest = hashlib.sha256(f"{request.method} {request.get_full_path()}\n".encode())
    digest.update(request._request.body)  # the raw bytes: two encodings of one JSON are two requests
    return digest.hexdigest()


def begin(request: Request, *, api_key: ApiKey) -> IdempotencyKey | None:
    """Claim the request's key, or None when it carries none (or is not a POST).

    Raises :class:`Replay` with the stored response for a retry,
    :class:`KeyReused` (422) for the key with another request,
    :class:`KeyInFlight` (409) while the first is handled, and a validation
    error naming the header for a key that is not 1 to 255 visible ASCII
    characters.
    """
    key = request.headers.get(HEADER)
    if key is None or request.method != "POST":
        return None
    if not _KEY.fullmatch(key):
        raise exceptions.ValidationError({HEADER: ["Must be 1 to 255 visible ASCII characters."]})
    tenant_id, print_ = api_key.tenant_id, fingerprint(request)
    now = timezone.now()
    expired = now - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    with transaction.atomic():
        record = IdempotencyKey.objects.for_tenant(tenant_id).select_for_update().filter(key=key).first()
        if record is not None and record.created_at < expired:
            record.delete()
            record = None
        if record is None:
            try:
                with transaction.atomic():
                    return IdempotencyKey.objects.create(
                        tenant_id=tenant_id, key=key, api_key=api_key, fingerprint=print_
                    )
            except IntegrityError:  # claimed by a concurrent request a moment ago
                raise KeyInFlight() from None
        if record.fingerprint != print_:
            raise KeyReused()
        if record.status_code is not None:
            raise Replay(record)
        if record.updated_at > now - IN_FLIGHT_FOR:
            raise KeyInFlight()
        record.api_key = api_key
        record.save(update_fields=["api_key", "updated_at"])
        return record


def finish(record: IdempotencyKey, response: Response, *, shown_once: tuple[str, ...] = ()) -> None:
    """Keep ``response`` as the answer to ``record``'s key; forget the key after a server error.

    The top-level fields named in ``shown_once`` (a secret answered only when it is made) are
    kept as null: a replay says the request was done without showing the secret again.
    """
    if response.status_code >= 500:
        record.delete()
        return
    data = response.data
    if shown_once and isinstance(data, dict):
        data = {name: None if name in shown_once else value for name, value in data.items()}
    record.status_code, record.response = response.status_code, data
    record.save(update_fields=["status_code", "response", "updated_at"])


def replay(record: IdempotencyKey) -> Response:
    """The stored first response, marked with ``Idempotent-Replayed: true``."""
    assert record.status_code is not None
    return Response(record.response, status=record.status_code, headers={REPLAYED_HEADER: "true"})


def expire() -> int:
    """Delete the keys older than ``IDEMPOTENCY_KEY_TTL``; how many went. Across tenants: a sweep."""
    cutoff = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    deleted, _ = IdempotencyKey.across_tenants.filter(created_at__lt=cutoff).delete()
    return deleted
