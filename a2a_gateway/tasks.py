"""Celery interface of the A2A gateway: load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from a2a_gateway import replies
from parley.celery import TaskQueue


# On the negotiation queue: it decides a move, as a negotiation's turn does, then pushes (each
# delivery within push.DELIVERY_TIMEOUT).
@shared_task(queue=TaskQueue.NEGOTIATION.value, soft_time_limit=300, time_limit=330)
def reply_push(negotiation_id: str, tenant_id: int) -> None:
    """Decide and push the reply to an answered inbound negotiation (see :func:`replies.reply_push`)."""
    replies.reply_push(negotiation_id=negotiation_id, tenant_id=tenant_id)
