"""Celery interface of the agent loop: load ids, call one service."""

from __future__ import annotations

from celery import shared_task

from agents.services import delegation, questions, steps, sweeps
from parley.celery import TaskQueue


@shared_task(
    queue=TaskQueue.AGENT.value,
    soft_time_limit=300,
    time_limit=330,
)
def run_step(run_id: str, tenant_id: int, step: int | None = None) -> None:
    """Take step ``step`` of a run, and its next steps for up to ``steps.TASK_SECONDS`` (see
    :func:`agents.services.steps.run_step`)."""
    steps.run_step(run_id=run_id, tenant_id=tenant_id, step=step, seconds=steps.TASK_SECONDS)


@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=50, time_limit=55)
def runs_expire_due() -> None:
    """End the runs whose deadline passed (see :func:`agents.services.sweeps.runs_expire_due`); beat
    sends it every minute, so it must finish within one."""
    sweeps.runs_expire_due()


@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=300, time_limit=330)
def approved_tool_run(question_id: str, tenant_id: int) -> None:
    """Run an approved tool call (see :func:`agents.services.questions.approved_tool_run`)."""
    questions.approved_tool_run(question_id=question_id, tenant_id=tenant_id)


@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=60, time_limit=90)
def delegate_return(run_id: str, tenant_id: int) -> None:
    """Give an ended delegate run's result to its caller (see
    :func:`agents.services.delegation.delegate_return`)."""
    delegation.delegate_return(run_id=run_id, tenant_id=tenant_id)


@shared_task(queue=TaskQueue.AGENT.value, soft_time_limit=50, time_limit=55)
def stalled_work_resend() -> int:
    """Send again the steps, approved tools and delegates' results whose message was lost (see
    :func:`agents.services.sweeps.stalled_work_resend`); beat sends it every ``SWEEP_INTERVAL`` seconds."""
    return len(sweeps.stalled_work_resend())
