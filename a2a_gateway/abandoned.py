"""Tasks a web process left unanswered when it stopped in the middle of a turn.

A turn is answered within its agent's ``turn_timeout``: with our reply, or, when it runs out of
time, with the try-again text, the Task ``input-required`` (:func:`a2a_gateway.executor._in_time`,
the answer contract). A web process that is killed or crashes while a turn runs answers nothing,
and the Task it stored stays ``working`` (or ``submitted``) for good: no process is left to move
it. The periodic sweep (:func:`abandoned_tasks_answer`, Celery beat) answers such a Task as its own
process would have: with the reply the turn recorded, when it committed before the process
stopped (:func:`negotiations.services.inbound.inbound_turn`), or else with the try-again text,
so the counterparty sends its message again, on the same Task or a new one, and it is applied
once (:mod:`a2a_gateway.resends`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime, timedelta

from a2a.helpers import new_text_part
from a2a.types import Artifact, Message, Role, Task, TaskState, TaskStatus
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from google.protobuf.json_format import ParseDict

from a2a_gateway import executor, push
from a2a_gateway.claims import task_claimed
from a2a_gateway.events import publish_task
from a2a_gateway.models import A2ATask
from a2a_gateway.replies import artifacts_add, task_save
from a2a_gateway.store import stored_task
from agents.models import Agent
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import inbound
from parley.celery import SWEEP_BATCH

logger = logging.getLogger(__name__)

# Seconds past its agent's turn_timeout before a Task still being answered counts as abandoned: the
# time a live process takes to store an answer given at the turn timeout, with a wide margin.
ABANDONED_GRACE_SECONDS = 60.0
# The states of a Task whose turn is under way.
UNANSWERED = (TaskState.Name(TaskState.TASK_STATE_SUBMITTED), TaskState.Name(TaskState.TASK_STATE_WORKING))


def abandoned_tasks_answer(*, now: datetime | None = None) -> list[str]:
    """Answer every A2A Task left under way by a web process that stopped; the ids answered.

    A Task counts as abandoned once it has been ``submitted`` or ``working`` (its row unchanged)
    for longer than its agent's ``turn_timeout`` + :data:`ABANDONED_GRACE_SECONDS` before ``now``
    (default: the present), and no web process holds the claim of a message on it
    (:func:`a2a_gateway.claims.task_claimed`: a turn still running, under a ``turn_timeout``
    since lowered, keeps it). Each gets the reply its turn recorded or the try-again text
    (:func:`answer_left`), is published to its subscribers on every web process and pushed to its
    push configs (best-effort). Reads across tenants, as the sweeps do. At most
    :data:`parley.celery.SWEEP_BATCH` a call, those left longest first.
    """
    now = now or timezone.now()
    timeouts = set(
        Agent.across_tenants.filter(a2a_tasks__state__in=UNANSWERED).values_list("turn_timeout", flat=True)
    )
    if not timeouts:
        return []
    due = Q()
    for timeout in timeouts:
        due |= Q(
            agent__turn_timeout=timeout,
            updated_at__lt=now - timedelta(seconds=timeout + ABANDONED_GRACE_SECONDS),
        )
    rows = (
        A2ATask.across_tenants.filter(due, state__in=UNANSWERED)
        .order_by("updated_at")
        .values_list("task_id", "owner", "context_id")[:SWEEP_BATCH]
    )
    answered = []
    for task_id, owner, context_id in rows:
        if task_claimed(owner=owner, task_id=task_id, context_id=context_id):
            continue
        task = answer_left(task_id)
        if task is None:
            continue
        answered.append(task_id)
        publish_task(task)
        asyncio.run(push.push_task(task))
    if answered:
        logger.warning("answered %d A2A tasks abandoned mid-turn: %s", len(answered), ", ".join(answered))
    return answered


def answer_left(task_id: str) -> Task | None:
    """Answer the Task ``task_id``, which a web process that stopped left ``submitted`` or
    ``working``, as it would have: with the reply its turn recorded (history, the reply and outcome
    artifacts, the state it stamped), or else the agent's try-again text, ``input-required``.

    The caller has found that no process answers it any more. Returns the Task; None when it is
    no longer under way, or another caller holds its row.
    """
    with transaction.atomic():
        row = (
            A2ATask.across_tenants.select_for_update(skip_locked=True)
            .select_related("agent")
            .filter(task_id=task_id, state__in=UNANSWERED)
            .first()
        )
        if row is None:
            return None
        task = stored_task(row)
        recorded = _recorded_reply(row, task)
        if recorded is not None:
            reply, message = recorded
            artifacts = executor.reply_artifacts(reply, message)
            state = executor.STATES[reply.state]
        else:
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_AGENT,
                task_id=task.id,
                context_id=task.context_id,
                parts=[new_text_part(executor.try_again_text(row.agent))],
            )
            artifacts = [
                Artifact(artifact_id=executor.REPLY_ARTIFACT_ID, name="reply", parts=list(message.parts))
            ]
            state = TaskState.TASK_STATE_INPUT_REQUIRED
        task.history.append(message)
        artifacts_add(task, artifacts)
        task.status.CopyFrom(TaskStatus(state=state))
        task.status.timestamp.GetCurrentTime()
        task_save(row, task)
    return task


def _recorded_reply(row: A2ATask, task: Task) -> tuple[inbound.InboundReply, Message] | None:
    """Our reply to the Task's last message from the counterparty, as the agent's inbound negotiation
    on it recorded it (the turn committed before its process stopped), or None."""
    theirs = [m for m in task.history if m.role == Role.ROLE_USER]
    if not theirs:
        return None
    negotiation = (
        Negotiation.objects.for_tenant(row.tenant_id)
        .filter(agent=row.agent, direction=Negotiation.Direction.INBOUND, task_id=row.task_id)
        .first()
    )
    if negotiation is None:
        return None
    turns = negotiation.turns.all()
    received = turns.filter(side=Turn.Side.THEIRS, raw__messageId=theirs[-1].message_id).first()
    ours = received and turns.filter(seq=received.seq + 1, side=Turn.Side.OURS).first()
    if not ours:
        return None
    settlement = Settlement.objects.for_tenant(row.tenant_id).filter(negotiation=negotiation).first()
    reply = inbound.InboundReply(message=ours.raw, state=ours.task_state, settlement=settlement)
    return reply, ParseDict(ours.raw, Message())
