"""The API's open questions are the inbox's: one filter (:data:`agents.selectors.OPEN_QUESTION`),
unanswered and of a run that is still active."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from agents import selectors
from agents.models import Agent, Intent, Question, Run
from parley.models import Membership, Tenant
from tests.agents.pages import waiting_question

pytestmark = pytest.mark.django_db


def ids(response: Any) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_open_answered_and_closed_are_the_selectors(
    api: APIClient, tenant: Tenant, agent: Agent, owner: AbstractUser
) -> None:
    def asked(statement: str) -> Question:
        return waiting_question(agent, Intent.objects.create(tenant=tenant, agent=agent, statement=statement))

    waiting, answered, closed = asked("Open."), asked("Answered."), asked("Closed.")
    Question.across_tenants.filter(pk=answered.pk).update(answer="Yes.", answered_at=answered.created_at)
    Run.across_tenants.filter(pk=closed.run_id).update(status=Run.Status.CANCELLED)
    inbox = selectors.open_questions_for(tenant=tenant, membership=Membership.objects.get(user=owner))

    assert {str(q.pk) for q in inbox} == {str(waiting.pk)}
    assert ids(api.get("/api/v1/questions", {"status": "open"})) == {str(waiting.pk)}
    assert ids(api.get("/api/v1/questions", {"status": "answered"})) == {str(answered.pk)}
    assert ids(api.get("/api/v1/questions", {"status": "closed"})) == {str(closed.pk)}
    for question, shown in ((waiting, [str(waiting.pk)]), (answered, []), (closed, [])):
        run = api.get(f"/api/v1/runs/{question.run_id}").json()
        assert [q["id"] for q in run["open_questions"]] == shown
