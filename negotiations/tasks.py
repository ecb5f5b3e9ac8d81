"""Celery interface of the negotiation engine: load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from negotiations.services import outbound, sweeps
from parley.celery import TaskQueue


@shared_task(
    queue=TaskQueue.NEGOTIATION.value,
    soft_time_limit=1800,
    time_limit=1860,
)
def pump(negotiation_id: str, tenant_id: int) -> None:
    """Take outbound turns of one negotiation until an event, unless it is being pumped already (see
    :func:`outbound.negotiation_pump_alone`)."""
    outbound.negotiation_pump_alone(negotiation_id=negotiation_id, tenant_id=tenant_id)


# On the agent queue: a busy negotiation queue (pumps take minutes) must not hold up the sweep.
@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=50, time_limit=55)
def stalled_pumps_resend() -> int:
    """Pump again the negotiations whose pump's message was lost (see
    :func:`sweeps.stalled_pumps_resend`); beat sends it every ``SWEEP_INTERVAL`` seconds."""
    return len(sweeps.stalled_pumps_resend())
