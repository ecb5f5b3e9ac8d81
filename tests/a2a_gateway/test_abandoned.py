"""A Task left under way by a web process that stopped mid-turn is answered by the sweep
(:mod:`a2a_gateway.abandoned`) as that process would have answered it, and so is one whose message
is sent again.

The killed process itself is tests/parley/test_process_faults.py's (a first message whose turn
never committed gets the try-again text). Here the turn committed and the process stopped before it
stored the answer: a real turn answered through the live stack, its stored Task then put back as the
process left it — ``working``, its last message theirs, no reply artifact.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from a2a.types import Task, TaskState
from django.utils import timezone
from google.protobuf.json_format import MessageToDict

from a2a_gateway.abandoned import ABANDONED_GRACE_SECONDS, abandoned_tasks_answer
from a2a_gateway.models import A2ATask
from a2a_gateway.replies import task_save
from a2a_gateway.store import stored_task
from agents.models import Agent
from parley.celery import SWEEP_BATCH
from parley.models import Tenant
from tests.a2a_gateway.conftest import Endpoint, proposal, user_message
from tests.a2a_gateway.test_resends import opening

pytestmark = pytest.mark.django_db(transaction=True)


def as_left_mid_turn(answered: Task, *, minutes_ago: float) -> None:
    """Store ``answered`` as a process that stopped after the turn committed left it."""
    row = A2ATask.across_tenants.get(task_id=answered.id)
    left = Task()
    left.CopyFrom(answered)
    del left.history[-1]
    del left.artifacts[:]
    left.status.state = TaskState.TASK_STATE_WORKING
    task_save(row, left)
    A2ATask.across_tenants.filter(task_id=answered.id).update(
        updated_at=timezone.now() - timedelta(minutes=minutes_ago)
    )


def test_a_task_whose_turn_committed_gets_the_recorded_reply(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    answered = seller_endpoint.send(user_message(proposal(800)))
    assert answered.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    waited = (seller.turn_timeout + ABANDONED_GRACE_SECONDS) / 60
    as_left_mid_turn(answered, minutes_ago=waited + 1)

    assert abandoned_tasks_answer() == [answered.id]

    task = stored_task(A2ATask.across_tenants.get(task_id=answered.id))
    assert task.status.state == answered.status.state
    assert [MessageToDict(m) for m in task.history] == [MessageToDict(m) for m in answered.history]
    assert [MessageToDict(a) for a in task.artifacts] == [MessageToDict(a) for a in answered.artifacts]
    assert abandoned_tasks_answer() == []


def test_a_task_still_within_its_turn_timeout_is_left_to_its_process(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    answered = seller_endpoint.send(user_message(proposal(800)))
    as_left_mid_turn(answered, minutes_ago=seller.turn_timeout / 60)

    assert abandoned_tasks_answer() == []
    row = A2ATask.across_tenants.get(task_id=answered.id)
    assert row.state == TaskState.Name(TaskState.TASK_STATE_WORKING)
    later = timezone.now() + timedelta(seconds=ABANDONED_GRACE_SECONDS + 1)
    assert abandoned_tasks_answer(now=later) == [answered.id]


def test_a_message_sent_again_to_a_task_left_after_its_turn_committed_gets_the_recorded_reply(
    seller_endpoint: Endpoint,
) -> None:
    message = opening(proposal(800))
    answered = seller_endpoint.send(message)
    as_left_mid_turn(answered, minutes_ago=0)

    again = seller_endpoint.send(message)

    assert again.status.state == answered.status.state
    assert [MessageToDict(m) for m in again.history] == [MessageToDict(m) for m in answered.history]
    stored = stored_task(A2ATask.across_tenants.get(task_id=answered.id))
    assert [MessageToDict(a) for a in stored.artifacts] == [MessageToDict(a) for a in answered.artifacts]


def test_tasks_not_due_yet_do_not_hold_up_those_due(seller_endpoint: Endpoint, seller: Agent) -> None:
    """A full batch of Tasks of a slow agent, left but within its long turn timeout, and one of the
    seller's, overdue: the sweep answers the seller's."""
    answered = seller_endpoint.send(user_message(proposal(800)))
    as_left_mid_turn(answered, minutes_ago=(seller.turn_timeout + ABANDONED_GRACE_SECONDS) / 60 + 1)
    tenant = Tenant.objects.create(slug="slow", name="Slow")
    slow = Agent.objects.create(tenant=tenant, slug="slow", name="Slow", turn_timeout=3600.0)
    left = timezone.now() - timedelta(minutes=30)
    A2ATask.objects.bulk_create(
        A2ATask(
            tenant=tenant,
            agent=slow,
            task_id=f"slow-{n}",
            owner=f"{slow.pk}|anon:x",
            context_id=f"slow-{n}",
            state=TaskState.Name(TaskState.TASK_STATE_WORKING),
            data={"id": f"slow-{n}", "contextId": f"slow-{n}", "status": {"state": "TASK_STATE_WORKING"}},
        )
        for n in range(SWEEP_BATCH)
    )
    A2ATask.across_tenants.filter(agent=slow).update(updated_at=left)

    assert abandoned_tasks_answer() == [answered.id]
