"""The reply to an inbound negotiation its party has just answered, sent at once where the
counterparty asked for push notifications.

An inbound ``ask`` parks the negotiation and the counterparty gets the holding
reply (:func:`negotiations.services.inbound.inbound_turn`). Once the party answers, the
reply waits for the counterparty's next message — unless the Task's owner
registered a push notification config on it. Then a worker decides the reply
now (:func:`negotiations.services.inbound.inbound_reply_decided`), puts it on the stored
Task as a synchronous reply would be (history, the
:data:`a2a_gateway.executor.REPLY_ARTIFACT_ID` artifact, the outcome on a
terminal reply, the evaluation hook's artifacts, the state its action stamps),
sends it to its subscribers on every web process (:func:`a2a_gateway.events.publish_task`)
and pushes the Task (:func:`a2a_gateway.push.push_task`).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import Artifact, Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus
from django.db import transaction
from google.protobuf.json_format import ParseDict

from a2a_gateway import executor, push
from a2a_gateway.events import publish_task
from a2a_gateway.models import A2ATask
from a2a_gateway.store import row_fields, stored_task
from negotiations.models import Negotiation
from negotiations.services import inbound
from negotiations.wire import task_record_from_proto
from parley.celery import enqueue_on_commit


def on_answered(negotiation: Negotiation) -> None:
    """The hook :func:`negotiations.services.parking.register_answered_hook` calls: :func:`reply_push` for
    ``negotiation`` in a worker, once the answer is committed."""
    from a2a_gateway.tasks import reply_push as task

    enqueue_on_commit(task, str(negotiation.pk), negotiation.tenant_id)


def reply_push(*, negotiation_id: Any, tenant_id: int) -> None:
    """Decide, record, put on the Task, publish and push the reply to the inbound negotiation
    ``negotiation_id``, whose party has answered.

    Quietly does nothing for a negotiation or Task that is gone, a Task
    without a push config of its owner (:func:`a2a_gateway.push.dispatch_configs`),
    or no reply to decide (their next message was answered first; a decision
    that asks the party again parks it instead). The reply is kept only if the
    Task still ends with our holding reply when it is put there. The push is
    best-effort, as every push of the gateway. Raises
    :class:`negotiations.negotiator.NegotiatorError` when no move can be made.
    """
    negotiation = (
        Negotiation.objects.for_tenant(tenant_id)
        .select_related("agent")
        .filter(pk=negotiation_id, direction=Negotiation.Direction.INBOUND)
        .first()
    )
    if negotiation is None:
        return
    row = (
        A2ATask.objects.for_tenant(tenant_id)
        .filter(agent=negotiation.agent, task_id=negotiation.task_id)
        .first()
    )
    if row is None or not push.dispatch_configs(row.task_id):
        return
    task = stored_task(row)
    if not task.history:
        return
    reply = inbound.inbound_reply_decided(
        agent=negotiation.agent,
        task_id=row.task_id,
        prior=task_record_from_proto(task),
        put=partial(_put, tenant_id, row.task_id, task.history[-1].message_id),
    )
    if reply is None:
        return
    replied = _add(tenant_id, row.task_id, executor.evaluation_artifacts(reply))
    publish_task(replied)
    asyncio.run(push.push_task(replied))


def _put(tenant_id: int, task_id: str, after: str, reply: inbound.InboundReply) -> None:
    """Put ``reply`` on the stored Task ``task_id``, whose last message must still be ``after`` (our
    holding reply) and its state input-required; else raise :class:`inbound.TaskMovedOn`."""
    row = A2ATask.objects.for_tenant(tenant_id).select_for_update().get(task_id=task_id)
    task = stored_task(row)
    if not task.history or task.history[-1].message_id != after:
        raise inbound.TaskMovedOn(f"task {task_id} has a message after our holding reply")
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        raise inbound.TaskMovedOn(f"task {task_id} is {TaskState.Name(task.status.state)}")
    message = ParseDict(reply.message, Message())
    task.history.append(message)
    artifacts_add(task, executor.reply_artifacts(reply, message))
    task.status.CopyFrom(TaskStatus(state=executor.STATES[reply.state]))
    task.status.timestamp.GetCurrentTime()
    task_save(row, task)


def _add(tenant_id: int, task_id: str, artifacts: list[Artifact]) -> Task:
    """The stored Task ``task_id`` with ``artifacts`` added (none: as it is)."""
    with transaction.atomic():
        row = A2ATask.objects.for_tenant(tenant_id).select_for_update().get(task_id=task_id)
        task = stored_task(row)
        if artifacts:
            artifacts_add(task, artifacts)
            task_save(row, task)
    return task


def artifacts_add(task: Task, artifacts: list[Artifact]) -> None:
    """Add ``artifacts`` to ``task`` as the SDK applies an artifact event: one of the same id is replaced."""
    for artifact in artifacts:
        append_artifact_to_task(
            task, TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, artifact=artifact)
        )


def task_save(row: A2ATask, task: Task) -> None:
    """Store ``task``, changed outside the SDK, in its (locked) ``row``."""
    fields = row_fields(task)
    for name, value in fields.items():
        setattr(row, name, value)
    row.save(update_fields=[*fields, "updated_at"])
