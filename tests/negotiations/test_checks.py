"""The agent fields the negotiator reads are refused at save time, each at its field."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agents import configuration
from agents.models import Agent, default_actions

pytestmark = pytest.mark.django_db


def refused(agent: Agent, **fields: Any) -> dict[str, list[str]]:
    for name, value in fields.items():
        setattr(agent, name, value)
    with pytest.raises(ValidationError) as caught:
        configuration.full_clean(agent)
    return caught.value.message_dict


def test_the_default_configuration_is_accepted(agent: Agent) -> None:
    configuration.full_clean(agent)


@pytest.mark.parametrize(
    ("guards", "says"),
    [
        ({"term": "amount"}, "must be a list"),
        ([{"term": "amount", "op": "<", "value": 1}], "has op '<'"),
        ([{"op": ">=", "value": 1}], "names no term"),
        ([{"term": "currency", "op": "in", "value": []}], "non-empty list"),
    ],
)
def test_a_malformed_term_guard_is_refused(agent: Agent, guards: Any, says: str) -> None:
    assert says in refused(agent, term_guards=guards)["term_guards"][0]


def test_a_relative_date_guard_is_accepted(agent: Agent) -> None:
    agent.terms = "amount (number, EUR per day), start (date)"
    agent.term_guards = [{"term": "start", "op": ">=", "value": "next Monday"}]
    configuration.full_clean(agent)


@pytest.mark.parametrize(
    ("actions", "says"),
    [
        ({"name": "offer"}, "list of actions"),
        ([{"description": "no name"}], "list of actions"),
        ([*default_actions(), {"name": "propose", "description": "again"}], "name of its own"),
        ([a for a in default_actions() if not a.get("terminal")], "open action"),
        ([a for a in default_actions() if a.get("state") != "completed"], "ends completed"),
    ],
)
def test_actions_the_negotiator_cannot_play_are_refused(agent: Agent, actions: Any, says: str) -> None:
    assert says in refused(agent, allowed_actions=actions)["allowed_actions"][0]


def test_an_unknown_time_zone_is_refused(agent: Agent) -> None:
    assert "not a known time zone" in refused(agent, timezone="Mars/Olympus_Mons")["timezone"][0]
