"""The API's periodic work."""

from celery import shared_task

from api import idempotency


@shared_task(time_limit=300)
def idempotency_keys_expire() -> int:
    """Delete stored Idempotency-Key responses older than ``IDEMPOTENCY_KEY_TTL``."""
    return idempotency.expire()
