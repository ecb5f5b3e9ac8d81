"""Celery interface of the agent loop: load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from agents import services
from parley.celery import TaskQueue


@shared_task(
    queue=TaskQueue.AGENT.value,
    soft_time_limit=300,
    time_limit=330,
)
def run_step(run_id: str, tenant_id: int) -> None:
    """Take one step of a run (see :func:`agents.services.run_step`)."""
    services.run_step(run_id=run_id, tenant_id=tenant_id)
