"""The agent loop's sweep of lost broker messages: what it picks, what it leaves, and why sending a
step, an approved tool or a delegate's result again applies nothing twice.

Runs on Postgres and on the embedded default's SQLite: the selection is plain SQL on both.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.utils import timezone

from agents.models import Agent, Intent, Message, Question, Run, Tool
from agents.services import delegation, questions, runs, steps, sweeps
from tests.agents.conftest import step
from tests.chat_server import ChatServer, text, tool_calls

BOUND = timedelta(minutes=15)


def stalled() -> sweeps.Stalled:
    """What the sweep finds now, with a bound of :data:`BOUND`."""
    return sweeps.stalled_work(before=timezone.now() - BOUND)


def age(*rows: Run | Question, by: timedelta = BOUND + timedelta(minutes=1)) -> None:
    """Make each row last written ``by`` ago, as if nothing had touched it since."""
    for row in rows:
        type(row).across_tenants.filter(pk=row.pk).update(updated_at=timezone.now() - by)


def run_in(agent: Agent, status: str, *, task: str = "Go.") -> Run:
    intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement=task)
    return Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=status, task=task)


@pytest.mark.django_db
def test_the_sweep_picks_a_stepping_run_left_past_the_bound_and_leaves_every_other(agent: Agent) -> None:
    """A queued or running run untouched past the bound lost its step's message; the same within the
    bound has a step in flight; a run waiting on its party or a tool, or ended, wants no step."""
    lost_queued, lost_running = run_in(agent, Run.Status.QUEUED), run_in(agent, Run.Status.RUNNING)
    Run.across_tenants.filter(pk=lost_running.pk).update(step_count=3)
    in_flight = run_in(agent, Run.Status.RUNNING)
    asking, waiting = run_in(agent, Run.Status.NEEDS_INPUT), run_in(agent, Run.Status.WAITING)
    ended = [run_in(agent, status) for status in Run.ENDED]
    age(lost_queued, lost_running, asking, waiting, *ended)
    age(in_flight, by=BOUND - timedelta(minutes=1))

    found = stalled()

    assert sorted(found.steps) == sorted(
        [(str(lost_queued.pk), agent.tenant_id, 1), (str(lost_running.pk), agent.tenant_id, 4)]
    )
    assert (found.approvals, found.returns, found.pending) == ([], [], [])


@pytest.fixture
def delegating(agent: Agent) -> Tool:
    """A tool that runs another agent of the tenant: its result comes later, from the delegate."""
    helper = Agent.objects.create(tenant=agent.tenant, slug="helper", name="Helper", model="offline")
    return Tool.objects.create(
        tenant=agent.tenant,
        name="delegate",
        description="Ask the helper.",
        parameters={"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
        kind=Tool.Kind.AGENT,
        target_agent=helper,
    )


def waiting_on_call(agent: Agent, call_id: str = "c1", name: str = "delegate") -> Run:
    """A run waiting on its one tool call ``call_id``, made at step 1."""
    run = run_in(agent, Run.Status.WAITING)
    Run.across_tenants.filter(pk=run.pk).update(step_count=1)
    calls = [{"id": call_id, "name": name, "arguments": '{"task": "Look."}'}]
    Message.objects.create(
        tenant=agent.tenant, intent=run.intent, run=run, seq=1, role=Message.Role.USER, content="Go."
    )
    Message.objects.create(
        tenant=agent.tenant,
        intent=run.intent,
        run=run,
        seq=2,
        step=1,
        role=Message.Role.ASSISTANT,
        tool_calls=calls,
    )
    return run


def approval_of(run: Run, *, approved: bool | None, call_id: str = "c1") -> Question:
    return Question.objects.create(
        tenant=run.tenant,
        run=run,
        kind=Question.Kind.APPROVAL,
        tool_call_id=call_id,
        tool_name="delegate",
        arguments={"task": "Look."},
        question="May your agent call delegate?",
        approved=approved,
        answered_at=None if approved is None else timezone.now(),
    )


def result_for(run: Run, call_id: str = "c1") -> None:
    Message.objects.create(
        tenant=run.tenant,
        intent=run.intent,
        run=run,
        seq=3,
        step=1,
        role=Message.Role.TOOL,
        tool_call_id=call_id,
        name="delegate",
        content="Done.",
    )


@pytest.mark.django_db
def test_the_sweep_picks_an_approved_tool_that_never_ran_and_leaves_the_rest(agent: Agent) -> None:
    """Approved, not run, no result, its run waiting: its message was lost. Undecided (the party's to
    answer), rejected, already run (its result will come later), or with its result: left."""
    lost = approval_of(waiting_on_call(agent), approved=True)
    undecided = approval_of(waiting_on_call(agent), approved=None)
    rejected = approval_of(waiting_on_call(agent), approved=False)
    ran = approval_of(waiting_on_call(agent), approved=True)
    Question.across_tenants.filter(pk=ran.pk).update(tool_run_at=timezone.now())
    answered = approval_of(waiting_on_call(agent), approved=True)
    result_for(answered.run)
    recent = approval_of(waiting_on_call(agent), approved=True)
    age(lost, undecided, rejected, ran, answered)
    age(recent, by=BOUND - timedelta(minutes=1))

    assert stalled().approvals == [(str(lost.pk), agent.tenant_id)]


@pytest.mark.django_db
def test_the_sweep_picks_a_delegate_that_ended_while_its_caller_still_waits(agent: Agent) -> None:
    """A delegate that ended is picked while its caller waits on its call; one whose result the
    caller has, or whose caller stopped, is not; one still running is a stepping run."""
    waiting = waiting_on_call(agent)
    returned = waiting_on_call(agent)
    result_for(returned)
    stopped = waiting_on_call(agent)
    Run.across_tenants.filter(pk=stopped.pk).update(status=Run.Status.CANCELLED)
    children = {}
    for name, parent, status in [
        ("lost", waiting, Run.Status.DONE),
        ("returned", returned, Run.Status.DONE),
        ("stopped", stopped, Run.Status.FAILED),
    ]:
        child = run_in(agent, status, task=name)
        Run.across_tenants.filter(pk=child.pk).update(parent=parent, parent_tool_call_id="c1")
        children[name] = child
    age(*children.values())

    assert stalled().returns == [(str(children["lost"].pk), agent.tenant_id)]


@pytest.mark.django_db
def test_the_sweep_picks_a_thread_whose_pending_run_waits_behind_no_active_one(agent: Agent) -> None:
    behind_nothing = run_in(agent, Run.Status.PENDING)
    active = run_in(agent, Run.Status.RUNNING)
    behind_active = Run.objects.create(
        tenant=agent.tenant, agent=agent, intent=active.intent, status=Run.Status.PENDING, task="Next."
    )
    age(behind_nothing, behind_active)

    assert stalled().pending == [(str(behind_nothing.intent_id), agent.tenant_id)]


@pytest.mark.django_db
def test_sending_the_stalled_work_again_stamps_it_and_starts_a_pending_run(
    agent: Agent, settings: Any
) -> None:
    """What was sent is stamped, so the next sweep waits another bound for it; a pending run behind
    no active one starts (its task enters the thread and it is queued for step 1)."""
    settings.SWEEP_STALLED_AFTER = BOUND.total_seconds()
    lost = run_in(agent, Run.Status.RUNNING)
    pending = run_in(agent, Run.Status.PENDING, task="Start me.")
    age(lost, pending)

    found = sweeps.stalled_work_resend()

    assert found.steps == [(str(lost.pk), agent.tenant_id, 1)]
    assert found.pending == [(str(pending.intent_id), agent.tenant_id)]
    pending.refresh_from_db()
    assert pending.status == Run.Status.QUEUED
    assert list(pending.messages.values_list("role", "content")) == [("user", "Start me.")]
    assert len(sweeps.stalled_work_resend()) == 0


# A message that comes twice applies nothing twice.


@pytest.mark.django_db
def test_a_second_message_for_a_step_already_taken_takes_no_step(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    """Step 1 calls a tool the agent does not have (its error is the result) and the run goes on; the
    message for step 1 coming again asks no model and writes nothing, as does one for a step not yet
    due; the message for step 2 takes it."""
    chat.script(tool_calls(("c1", "missing", "{}")), text("Done."))
    run = runs.run_start(agent=llm_agent, intent=intent, task="Go.")
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=1)
    run.refresh_from_db()
    assert (run.status, run.step_count, len(chat.requests)) == (Run.Status.RUNNING, 1, 1)

    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=1)
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=3)

    run.refresh_from_db()
    assert (run.status, run.step_count, len(chat.requests)) == (Run.Status.RUNNING, 1, 1)
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=2)
    run.refresh_from_db()
    assert (run.status, run.step_count, run.output, len(chat.requests)) == (Run.Status.DONE, 2, "Done.", 2)


@pytest.mark.django_db
def test_an_approved_delegation_sent_twice_starts_one_delegate(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser, delegating: Tool
) -> None:
    """An approved tool whose result comes later (a delegate) leaves its call waiting after it ran:
    the approval's second message finds it run, and starts no second delegate."""
    delegating.requires_approval = True
    delegating.save()
    llm_agent.tools.add(delegating)
    chat.script(tool_calls(("c1", "delegate", '{"task": "Look."}')))
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))
    approval = Question.across_tenants.get(run=run)
    questions.approval_decide(question=approval, approve=True, user=principal)

    questions.approved_tool_run(question_id=approval.pk, tenant_id=run.tenant_id)
    questions.approved_tool_run(question_id=approval.pk, tenant_id=run.tenant_id)

    assert Run.across_tenants.filter(parent=run).count() == 1
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    age(approval)
    assert stalled().approvals == []


@pytest.mark.django_db
def test_a_delegates_result_sent_twice_is_recorded_once(
    llm_agent: Agent, intent: Intent, chat: ChatServer, delegating: Tool
) -> None:
    llm_agent.tools.add(delegating)
    chat.script(tool_calls(("c1", "delegate", '{"task": "Look."}')))
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))
    child = runs.run_cancel(run=Run.across_tenants.get(parent=run), user=None)

    delegation.delegate_return(run_id=child.pk, tenant_id=child.tenant_id)
    delegation.delegate_return(run_id=child.pk, tenant_id=child.tenant_id)

    assert Message.across_tenants.filter(run=run, role=Message.Role.TOOL, tool_call_id="c1").count() == 1
    run.refresh_from_db()
    assert (run.status, run.step_count) == (Run.Status.RUNNING, 1)
