"""What the API keeps of its own: the responses it gave to requests with an Idempotency-Key."""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from parley.models import ApiKey, TenantOwnedModel


class IdempotencyKey(TenantOwnedModel):
    """The first response to a POST that carried ``Idempotency-Key: <key>``, replayed to retries.

    ``fingerprint`` is a SHA-256 of the method, path and body: the same key with
    another request is refused. ``status_code`` is null while the first request
    is still being handled. Kept for ``IDEMPOTENCY_KEY_TTL`` seconds.
    """

    key = models.CharField(max_length=255)
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key"], name="one_response_per_key")]
        indexes = [models.Index(fields=["created_at"])]

    def __str__(self) -> str:
        return f"{self.key} → {self.status_code or 'in flight'}"
