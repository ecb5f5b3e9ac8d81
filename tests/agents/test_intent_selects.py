"""An intent select offers the newest ``INTENTS_SHOWN`` intents and the one chosen, however many an
agent has, and still accepts any of them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.forms import RunFilterForm, RunStartForm
from agents.models import Agent, Intent


@pytest.fixture
def intents(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> list[Intent]:
    """Four intents of ``agent``, oldest first, where a select shows three."""
    monkeypatch.setattr("agents.forms.INTENTS_SHOWN", 3)
    made = [
        Intent.objects.create(tenant=agent.tenant, agent=agent, statement=f"Intent {i}.") for i in range(4)
    ]
    for age, intent in enumerate(reversed(made)):
        Intent.objects.for_tenant(agent.tenant).filter(pk=intent.pk).update(
            created_at=timezone.now() - timedelta(days=age)
        )
    return made


def offered(form: RunStartForm | RunFilterForm) -> list[str]:
    return [str(value) for value, _ in form.fields["intent"].choices if value]


def test_the_newest_are_offered_and_an_older_one_is_still_accepted(
    agent: Agent, intents: list[Intent]
) -> None:
    assert offered(RunStartForm(agent=agent)) == [str(i.pk) for i in reversed(intents[1:])]

    form = RunStartForm({"intent": str(intents[0].pk), "task": "Go on."}, agent=agent)

    assert form.is_valid(), form.errors
    assert form.cleaned_data["intent"] == intents[0]
    assert str(intents[0].pk) in offered(form)


def test_a_filter_keeps_an_older_intent_chosen_and_ignores_a_malformed_one(
    agent: Agent, intents: list[Intent]
) -> None:
    agents = Agent.objects.for_tenant(agent.tenant)
    chosen = RunFilterForm({"intent": str(intents[0].pk)}, tenant=agent.tenant, agents=agents)
    malformed = RunFilterForm({"intent": "not-an-id"}, tenant=agent.tenant, agents=agents)

    assert offered(chosen)[-1] == str(intents[0].pk)
    assert len(offered(chosen)) == 4
    assert f'<option value="{intents[0].pk}" selected>' in str(chosen["intent"])
    assert len(offered(malformed)) == 3
    assert not malformed.is_valid()
