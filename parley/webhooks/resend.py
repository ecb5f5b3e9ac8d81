"""The host's resend of a delivery: pending again, with a new retry window, sent at once."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from parley.models import WebhookDelivery
from parley.webhooks import attempts


class ResendRefused(Exception):
    """The delivery cannot be resent now; the message says why (an attempt is under way, the
    endpoint is inactive)."""


def delivery_resend(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send ``delivery`` again now, whatever its status: it is pending again, with the same
    ``webhook-id`` and body, and a new retry window from now. Returns it as saved.

    Raises :class:`ResendRefused` while an attempt is under way (resend once it
    has finished) or when its endpoint is inactive.
    """
    now = timezone.now()
    with transaction.atomic():
        locked = (
            WebhookDelivery.objects.for_tenant(delivery.tenant_id)
            .select_for_update(of=("self",))
            .select_related("endpoint")
            .get(pk=delivery.pk)
        )
        if locked.claimed_until is not None and locked.claimed_until > now:
            raise ResendRefused("An attempt of this delivery is under way; resend it once that has finished.")
        if not locked.endpoint.active:
            raise ResendRefused("The endpoint of this delivery is inactive; activate it first.")
        locked.status = WebhookDelivery.Status.PENDING
        locked.window_opened_at = now
        locked.window_attempts = 0
        locked.generation += 1
        locked.next_attempt_at = now
        locked.delivered_at = None
        locked.save()
        attempts.delivery_enqueue_on_commit(locked, countdown=0.0)
    return locked
