"""The periodic sweep of webhook deliveries whose message was lost with the broker, or whose worker
died: each is sent again (at least once; a receiver tells a repeat by its ``webhook-id``)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from parley.celery import enqueue_each
from parley.models import WebhookDelivery

# A pending delivery whose attempt is this late was lost on the way (a broker restart): send it again.
OVERDUE_AFTER = timedelta(minutes=5)
# Overdue deliveries sent again per sweep.
OVERDUE_BATCH = 1000


def deliveries_overdue_enqueue() -> int:
    """Send again the pending deliveries whose attempt is more than :data:`OVERDUE_AFTER` late and
    not under way (its message was lost, or its worker died); returns how many were sent, at most
    :data:`OVERDUE_BATCH`. A broker still down refuses the first and the rest wait for the next
    sweep (:func:`parley.celery.enqueue_each`).

    Across tenants, as the periodic sweep it is: each is sent as its own
    tenant's. A delivery sent twice this way is attempted once.
    """
    from parley.tasks import webhook_deliver

    now = timezone.now()
    overdue = (
        WebhookDelivery.across_tenants.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lt=now - OVERDUE_AFTER
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("next_attempt_at")
        .values_list("pk", "tenant_id", "generation")[:OVERDUE_BATCH]
    )
    return len(enqueue_each(webhook_deliver, [(str(pk), tenant_id, gen) for pk, tenant_id, gen in overdue]))
