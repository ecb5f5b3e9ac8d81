"""What the dashboard tests of the agent loop share: page addresses, members, a run waiting on a question."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.urls import reverse

from agents.models import Agent, Intent, Message, Question, Run
from parley.models import Membership, Tenant
from tests.conftest import make_user

QUESTION = "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"


def waiting_question(agent: Agent, intent: Intent, text: str = QUESTION) -> Question:
    """A run suspended on its ``ask_user`` call, as the loop leaves it, and the question it asked."""
    run = Run.objects.create(
        tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.NEEDS_INPUT, step_count=1
    )
    Message.objects.create(
        tenant=agent.tenant, intent=intent, run=run, seq=1, role=Message.Role.USER, content="Find me a CFO."
    )
    Message.objects.create(
        tenant=agent.tenant,
        intent=intent,
        run=run,
        seq=2,
        step=1,
        role=Message.Role.ASSISTANT,
        tool_calls=[{"id": "call-1", "name": "ask_user", "arguments": '{"question": "limit?"}'}],
        model="offline",
    )
    return Question.objects.create(tenant=agent.tenant, run=run, tool_call_id="call-1", question=text)


def run_url(run: Run, tenant: Tenant | None = None) -> str:
    return reverse("agents:run", kwargs={"tenant": (tenant or run.tenant).slug, "pk": run.pk})


def start_url(agent: Agent, tenant: Tenant | None = None) -> str:
    return reverse("agents:run-start", kwargs={"tenant": (tenant or agent.tenant).slug, "pk": agent.pk})


def member(tenant: Tenant, username: str, role: str) -> AbstractUser:
    user = make_user(username)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user
