"""Events: each is stored for the webhooks with the change it reports (all but ``run.updated``), and pushed
live only after commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import transaction

from agents.models import Agent, Intent, Question
from agents.services import questions, runs, steps
from parley import live
from parley.models import Event, Tenant
from parley.webhooks import fan_out
from tests.conftest import Listener


@pytest.mark.django_db
def test_an_event_is_stored_at_once_and_pushed_after_commit(
    tenant: Tenant, listener: Listener, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    payload = {"negotiation": "n-1", "seq": 3, "terms": {"amount": 900, "currency": "EUR"}}

    with django_capture_on_commit_callbacks(execute=True):
        live.publish_on_commit(event="negotiation.turn", tenant_id=tenant.pk, party_id=None, payload=payload)
        stored = Event.across_tenants.get()
        assert (stored.tenant_id, stored.kind, stored.payload) == (tenant.pk, "negotiation.turn", payload)
        assert listener.pushed() == []

    assert listener.pushed() == [{"type": "live.event", "event": "negotiation.turn", "payload": payload}]


@pytest.mark.django_db(transaction=True)
def test_an_event_of_a_change_rolled_back_is_neither_stored_nor_pushed(
    tenant: Tenant, listener: Listener
) -> None:
    def change_that_fails() -> None:
        with transaction.atomic():
            live.publish_on_commit(
                event="question.opened", tenant_id=tenant.pk, party_id=None, payload={"run": "r-1"}
            )
            raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError):
        change_that_fails()

    assert not Event.across_tenants.exists()
    assert listener.pushed() == []


@pytest.mark.django_db
def test_an_unknown_event_is_refused_before_anything_is_written(tenant: Tenant, listener: Listener) -> None:
    with pytest.raises(ValueError, match=r"^unknown live event 'negotiation\.haggled'$"):
        live.publish_on_commit(event="negotiation.haggled", tenant_id=tenant.pk, party_id=None, payload={})

    assert not Event.across_tenants.exists()
    assert listener.pushed() == []


@pytest.mark.django_db
def test_run_and_question_events_are_stored_for_the_webhooks(
    agent: Agent, intent: Intent, principal: AbstractUser, listener: Listener
) -> None:
    run = runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO.")
    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
    question = Question.across_tenants.get(run=run)
    questions.question_answer(question=question, answer="Nobody yet.", user=principal)

    events = [(e.kind, e.payload) for e in Event.across_tenants.filter(tenant=agent.tenant)]
    ids = {"run": str(run.pk), "question": str(question.pk), "kind": "question"}
    assert events == [("question.opened", ids), ("question.answered", ids)]


@pytest.mark.django_db
def test_run_updated_is_pushed_after_commit_and_not_stored(
    tenant: Tenant, listener: Listener, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    payload = {"run": "r-1", "status": "running"}

    with django_capture_on_commit_callbacks(execute=True):
        live.publish_on_commit(event="run.updated", tenant_id=tenant.pk, party_id=None, payload=payload)
        assert listener.pushed() == []

    assert listener.pushed() == [{"type": "live.event", "event": "run.updated", "payload": payload}]
    assert not Event.across_tenants.exists()


def test_no_event_a_webhook_or_a_run_timeline_reads_goes_unstored() -> None:
    read_back = set(fan_out.WEBHOOK_TYPES) | live.RUN_TIMELINE_EVENTS

    assert live.UNSTORED_EVENTS <= live.EVENTS
    assert not live.UNSTORED_EVENTS & read_back
