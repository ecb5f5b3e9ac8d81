"""The periodic sweep of outbound negotiations whose pump's broker message was lost."""

from __future__ import annotations

from datetime import datetime

from agents.models import Run
from negotiations.models import Negotiation
from parley.celery import SWEEP_BATCH, stalled_resend


def stalled_pumps(*, before: datetime) -> list[tuple[str, int]]:
    """``(negotiation id, tenant id)`` of each outbound negotiation whose pump should be taking turns
    and has not moved since ``before``, across tenants, at most :data:`parley.celery.SWEEP_BATCH`,
    stalled longest first.

    That is one with nothing reported to its batch yet, whose run waits on it
    (a run that ended or was cancelled wants no more turns), and whose
    ``updated_at`` — written at every turn — is older than ``before``: one
    still open, or one that stopped (settled, waiting on the party, out of
    turns, failed) while its pump died before reporting it, which the pump sent
    again reports. A pump in the middle of a turn writes nothing until the turn
    is recorded, so ``before`` must be further back than a turn takes (a move's
    model call, then up to ``A2A_SEND_TIMEOUT`` for their answer).

    The rows returned are locked (``FOR UPDATE SKIP LOCKED``): call it in a
    transaction, and a sweep running at the same time skips them.
    """
    rows = (
        Negotiation.across_tenants.filter(
            direction=Negotiation.Direction.OUTBOUND,
            event__isnull=True,
            batch__run__status__in=Run.AWAITING,
            updated_at__lt=before,
        )
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("updated_at")
        .values_list("pk", "tenant_id")[:SWEEP_BATCH]
    )
    return [(str(pk), tenant_id) for pk, tenant_id in rows]


def stalled_pumps_resend() -> list[tuple[str, int]]:
    """Pump again the negotiations whose pump's message was lost (a Redis restart or flush): the
    periodic sweep (Celery beat, every ``SWEEP_INTERVAL`` seconds).

    Sends a pump for each of :func:`stalled_pumps` not moved for
    ``SWEEP_STALLED_AFTER`` seconds and stamps its ``updated_at``, so the next
    sweep waits another bound before sending it again (:func:`parley.celery.stalled_resend`).
    Returns what it found.
    """
    from negotiations.tasks import pump

    return stalled_resend(
        find=lambda before: stalled_pumps(before=before),
        task=pump,
        model=Negotiation,
        what="negotiations' pumps",
    )
