"""Celery interface of the platform: webhook deliveries. Load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from parley.celery import TaskQueue
from parley.webhooks import attempts, sweeps


# Limits above WEBHOOK_TIMEOUT (at most 60 s): an attempt bounds itself; these catch a stuck database.
@shared_task(queue=TaskQueue.EVENTS.value, soft_time_limit=120, time_limit=150)
def webhook_deliver(delivery_id: str, tenant_id: int, generation: int) -> None:
    """Make one attempt of a webhook delivery (see :func:`parley.webhooks.attempts.delivery_attempt`)."""
    attempts.delivery_attempt(delivery_id=delivery_id, tenant_id=tenant_id, generation=generation)


@shared_task(queue=TaskQueue.EVENTS.value, soft_time_limit=240, time_limit=270)
def webhook_deliveries_overdue() -> int:
    """Send again the deliveries whose attempt was lost (see
    :func:`parley.webhooks.sweeps.deliveries_overdue_enqueue`); beat sends it every five minutes."""
    return sweeps.deliveries_overdue_enqueue()
