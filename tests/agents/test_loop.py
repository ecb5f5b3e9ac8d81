"""The agent loop: steps, suspend and resume, limits — on the offline model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import AbstractUser

from agents.instructions import system_message
from agents.models import Agent, Intent, Message, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES, NO_COUNTERPARTIES
from agents.services import questions, runs, steps
from parley.models import Membership
from tests.conftest import LiveStack, make_user, wait_until


def _step(run: Run) -> Run:
    """Take one step in this process, as a worker would."""
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
    run.refresh_from_db()
    return run


@pytest.mark.django_db(transaction=True)
def test_suspend_answer_resume_in_a_worker(
    live_stack: LiveStack, agent: Agent, intent: Intent, principal: AbstractUser
) -> None:
    run = runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO.")

    question = wait_until(lambda: Question.across_tenants.filter(run=run).first(), what="the question")
    run.refresh_from_db()
    assert run.status == Run.Status.NEEDS_INPUT
    assert question.question == ASK_FOR_COUNTERPARTIES

    questions.question_answer(question=question, answer="Nobody yet.", user=principal)

    wait_until(
        lambda: Run.across_tenants.get(pk=run.pk).status == Run.Status.DONE,
        what="the run to resume and finish",
    )
    run.refresh_from_db()
    assert run.output == NO_COUNTERPARTIES
    assert run.step_count == 2
    history = list(
        Message.across_tenants.filter(intent=intent)
        .order_by("seq")
        .values_list("role", "tool_call_id", "content")
    )
    assert history == [
        ("user", "", "Find me a fractional CFO."),
        ("assistant", "", ""),
        ("tool", question.tool_call_id, "Nobody yet."),
        ("assistant", "", NO_COUNTERPARTIES),
    ]
    question.refresh_from_db()
    assert (question.answer, question.answered_by_id) == ("Nobody yet.", principal.pk)


@pytest.mark.django_db
def test_the_answer_is_the_suspended_calls_result_not_a_user_message(
    agent: Agent, intent: Intent, principal: AbstractUser
) -> None:
    run = _step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    question = Question.across_tenants.get(run=run)
    call = Message.across_tenants.get(run=run, role=Message.Role.ASSISTANT).tool_calls[0]
    assert (call["id"], call["name"]) == (question.tool_call_id, "ask_user")

    questions.question_answer(question=question, answer="Nobody yet.", user=principal)

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    result = Message.across_tenants.get(run=run, role=Message.Role.TOOL)
    assert (result.tool_call_id, result.name, result.content) == (
        question.tool_call_id,
        "ask_user",
        "Nobody yet.",
    )
    assert Message.across_tenants.filter(run=run, role=Message.Role.USER).count() == 1


@pytest.mark.django_db
def test_without_a_principal_ask_user_is_refused_and_the_offline_model_finishes_saying_why(
    agent: Agent, intent: Intent
) -> None:
    """An agent with nobody to ask never asks: its ask_user call gets an error naming why, no question
    waits in any inbox, and the run ends saying so instead of waiting for an answer that cannot come."""
    agent.principal = None
    agent.save()

    run = _step(_step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO.")))

    refusal = (
        "Error: ask_user cannot ask: this agent has no principal to ask, so nobody would answer. Go on "
        "without asking, or finish and say what you would need to know."
    )
    assert not Question.across_tenants.filter(run=run).exists()
    assert list(
        Message.across_tenants.filter(run=run, role=Message.Role.TOOL).values_list("name", "content")
    ) == [("ask_user", refusal)]
    assert (run.status, run.output) == (
        Run.Status.DONE,
        f"I could not ask: {refusal.removeprefix('Error: ')}\n{NO_COUNTERPARTIES}",
    )


@pytest.mark.django_db
def test_answering_twice_is_refused_and_changes_nothing(
    agent: Agent, intent: Intent, principal: AbstractUser
) -> None:
    run = _step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    question = Question.across_tenants.get(run=run)
    questions.question_answer(question=question, answer="First answer.", user=principal)
    messages_before = list(Message.across_tenants.filter(run=run).values_list("seq", "content"))

    with pytest.raises(questions.QuestionAlreadyAnswered, match="already answered"):
        questions.question_answer(question=question, answer="Second answer.", user=principal)

    question.refresh_from_db()
    assert question.answer == "First answer."
    assert list(Message.across_tenants.filter(run=run).values_list("seq", "content")) == messages_before


@pytest.mark.django_db
def test_an_empty_answer_is_refused(agent: Agent, intent: Intent, principal: AbstractUser) -> None:
    run = _step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    question = Question.across_tenants.get(run=run)
    with pytest.raises(runs.RunError, match=r"^The answer is empty\.$"):
        questions.question_answer(question=question, answer="   ", user=principal)
    question.refresh_from_db()
    assert question.is_open


@pytest.mark.django_db
def test_a_second_run_on_a_busy_thread_is_refused(agent: Agent, intent: Intent) -> None:
    first = runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO.")
    with pytest.raises(runs.RunError, match=f"Run {first.pk} of this intent is still queued"):
        runs.run_start(agent=agent, intent=intent, task="And another thing.")
    assert Run.across_tenants.filter(intent=intent).count() == 1
    assert Message.across_tenants.filter(intent=intent).count() == 1


@pytest.mark.django_db
def test_a_run_stops_at_its_step_cap(agent: Agent, intent: Intent, principal: AbstractUser) -> None:
    agent.max_steps = 1
    agent.save()
    run = _step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    questions.question_answer(
        question=Question.across_tenants.get(run=run), answer="Nobody yet.", user=principal
    )

    run = _step(run)

    assert (run.status, run.step_count, run.end_reason) == (Run.Status.MAX_STEPS, 1, "Stopped after 1 steps.")


@pytest.mark.django_db
def test_a_step_taken_twice_is_applied_once(agent: Agent, intent: Intent) -> None:
    run = _step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    run = _step(run)  # the same step delivered again: the run waits on its question, nothing is added
    assert run.step_count == 1
    assert Question.across_tenants.filter(run=run).count() == 1
    assert Message.across_tenants.filter(run=run).count() == 2


@pytest.mark.django_db
def test_the_system_message_carries_prompt_identity_date_and_intent(agent: Agent, intent: Intent) -> None:
    agent.timezone = "Pacific/Auckland"
    text = system_message(agent=agent, intent=intent, now=datetime(2026, 11, 29, 23, 0, tzinfo=UTC))
    assert text.split("\n\n") == [
        "You act for Tomas.",
        "You are Tomas's agent, acting on behalf of acme:user:tomas.",
        "Today is Monday, 30 November 2026 (Pacific/Auckland). Record dates as absolute dates.",
        "Call only the tools you are offered.",
        "Current intent: Bring in a fractional CFO.\nEverything you do in this session serves that intent.",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Membership.Role.VIEWER, Membership.Role.PRINCIPAL, None])
def test_only_the_party_or_staff_may_answer(agent: Agent, intent: Intent, role: str | None) -> None:
    """A viewer, another party of the tenant, and a stranger are refused by the service itself."""
    run = _step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    question = Question.across_tenants.get(run=run)
    someone = make_user("someone")
    if role is not None:
        Membership.objects.create(user=someone, tenant=agent.tenant, role=role)

    with pytest.raises(runs.NotAllowed, match=r"^Only the agent's party, an owner or an operator"):
        questions.question_answer(question=question, answer="Sure.", user=someone)

    question.refresh_from_db()
    run.refresh_from_db()
    assert question.is_open
    assert run.status == Run.Status.NEEDS_INPUT
    assert Message.across_tenants.filter(run=run, role=Message.Role.TOOL).count() == 0
