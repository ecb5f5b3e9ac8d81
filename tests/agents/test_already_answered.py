"""Why a question takes no second answer is said in one place, the service's refusal
(:meth:`agents.services.questions.QuestionAlreadyAnswered.said`): the dashboard and the API only write its
time, in the agent's timezone or in UTC."""

from __future__ import annotations

from datetime import UTC

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from agents.models import Agent, Intent, Question
from agents.services import questions
from tests.agents.pages import waiting_question

pytestmark = pytest.mark.django_db


def test_the_refusal_says_who_answered_and_when(
    agent: Agent, intent: Intent, principal: AbstractUser
) -> None:
    question = waiting_question(agent, intent)
    questions.question_answer(question=question, answer="At most 1,000 a day.", user=principal)

    with pytest.raises(questions.QuestionAlreadyAnswered) as refused:
        questions.question_answer(question=question, answer="Again.", user=principal)

    assert str(refused.value) == "This question was already answered."
    assert refused.value.said(when="noon") == "This question was already answered by tomas at noon."


def test_an_approval_decided_by_the_host_says_so(agent: Agent, intent: Intent) -> None:
    approval = waiting_question(agent, intent)
    Question.across_tenants.filter(pk=approval.pk).update(kind=Question.Kind.APPROVAL, tool_name="book")
    approval.refresh_from_db()
    questions.approval_decide(question=approval, approve=False, user=None)

    with pytest.raises(questions.QuestionAlreadyAnswered) as refused:
        questions.approval_decide(question=approval, approve=True, user=None)

    assert refused.value.said(when="noon") == "This approval was already rejected by the host at noon."


def test_the_dashboard_names_the_host_that_answered_through_its_api(
    logged_in: Client, agent: Agent, intent: Intent
) -> None:
    """As the API says it: the host answered, not "a former member"."""
    question = waiting_question(agent, intent)
    questions.question_answer(question=question, answer="At most 1,000 a day.", user=None)
    question.refresh_from_db()
    assert question.answered_at is not None
    when = question.answered_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")

    response = logged_in.post(
        reverse("agents:question-answer", kwargs={"tenant": "acme", "pk": question.pk}),
        {"answer": "Again."},
        follow=True,
    )

    assert f"This question was already answered by the host at {when} (UTC)." in response.content.decode()
