"""Celery interface of Agent Exchange: load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from exchange import outbound, services
from parley.celery import TaskQueue


# On the negotiation queue: like a negotiation's pump, it waits on another agent over A2A. Its limits
# outlast one send (at most A2A_SEND_TIMEOUT, 180 s by default).
@shared_task(queue=TaskQueue.NEGOTIATION.value, soft_time_limit=300, time_limit=330)
def exchange_send(exchange_id: int, tenant_id: int) -> None:
    """Send one queued Agent Exchange request (see :func:`exchange.outbound.exchange_send`)."""
    outbound.exchange_send(exchange_id=exchange_id, tenant_id=tenant_id)


@shared_task
def prepared_expire() -> int:
    """Delete prepared requests whose time ran out (see :func:`exchange.services.prepared_expire`)."""
    return services.prepared_expire()


# On the agent queue, as the other sweeps: the negotiation queue may be busy for minutes.
@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=50, time_limit=55)
def stalled_sends_resend() -> int:
    """Send again the exchanges whose message was lost (see :func:`outbound.stalled_sends_resend`);
    beat sends it every ``SWEEP_INTERVAL`` seconds."""
    return len(outbound.stalled_sends_resend())
