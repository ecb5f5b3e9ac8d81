"""Fan-out: a live event that is a webhook event becomes a delivery to each subscribed endpoint.

:func:`event_fan_out` runs inside the transaction that makes the change (from
:func:`parley.live.publish_on_commit`): it writes one
:class:`~parley.models.WebhookDelivery` per subscribed endpoint and enqueues
each after the commit, so nothing is lost and nothing is announced that rolled
back. What is sent: :mod:`parley.webhooks.signing`; how it is attempted:
:mod:`parley.webhooks.attempts`.
"""

from __future__ import annotations

from django.utils import timezone

from parley.models import Event, WebhookDelivery, WebhookEndpoint, WebhookEventType
from parley.webhooks import attempts, signing

# Live event kind → webhook event type. Live events not listed here are not sent as webhooks.
WEBHOOK_TYPES: dict[str, str] = {
    "question.opened": WebhookEventType.RUN_NEEDS_INPUT,
    "run.finished": WebhookEventType.RUN_FINISHED,
    "question.answered": WebhookEventType.QUESTION_ANSWERED,
    "negotiation.turn": WebhookEventType.NEGOTIATION_TURN,
    "negotiation.settled": WebhookEventType.NEGOTIATION_SETTLED,
    "intake.received": WebhookEventType.INTAKE_RECEIVED,
    "exchange.completed": WebhookEventType.EXCHANGE_COMPLETED,
    "exchange.failed": WebhookEventType.EXCHANGE_FAILED,
}


def event_fan_out(*, event: Event) -> list[WebhookDelivery]:
    """Write a delivery of ``event`` for each active endpoint of its tenant subscribed to its type,
    and send each once the transaction commits; returns them.

    Call it in the transaction that stored ``event`` (as
    :func:`parley.live.publish_on_commit` does): the deliveries commit or roll
    back with the change. One query when the tenant has no endpoint, none for
    an event that is not a webhook type.
    """
    event_type = WEBHOOK_TYPES.get(event.kind)
    if event_type is None:
        return []
    # In Python rather than SQL: JSON containment is Postgres-only, and a tenant has few endpoints.
    endpoints = WebhookEndpoint.objects.for_tenant(event.tenant_id).filter(active=True).only("pk", "events")
    subscribed = [endpoint for endpoint in endpoints if event_type in endpoint.events]
    if not subscribed:
        return []
    now = timezone.now()
    payload = {"type": event_type, "timestamp": signing.iso(event.created_at), "data": event.payload}
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            tenant_id=event.tenant_id,
            endpoint=endpoint,
            event=event,
            event_type=event_type,
            payload=payload,
            window_opened_at=now,
            next_attempt_at=now,
        )
        for endpoint in subscribed
    )
    for delivery in deliveries:
        attempts.delivery_enqueue_on_commit(delivery, countdown=0.0)
    return deliveries
