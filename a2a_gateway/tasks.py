"""Celery interface of the A2A gateway: load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from a2a_gateway import abandoned, replies
from parley.celery import TaskQueue


# On the negotiation queue: it decides a move, as a negotiation's turn does, then pushes (each
# delivery within push.DELIVERY_TIMEOUT).
@shared_task(queue=TaskQueue.NEGOTIATION.value, soft_time_limit=300, time_limit=330)
def reply_push(negotiation_id: str, tenant_id: int) -> None:
    """Decide and push the reply to an answered inbound negotiation (see :func:`replies.reply_push`)."""
    replies.reply_push(negotiation_id=negotiation_id, tenant_id=tenant_id)


# On the agent queue, as the other sweeps: a busy negotiation queue must not hold it up.
@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=50, time_limit=55)
def abandoned_tasks_answer() -> int:
    """Answer the A2A Tasks a stopped web process left under way (see
    :func:`abandoned.abandoned_tasks_answer`); beat sends it every ``SWEEP_INTERVAL`` seconds."""
    return len(abandoned.abandoned_tasks_answer())
