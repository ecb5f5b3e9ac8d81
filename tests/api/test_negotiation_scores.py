"""``/api/v1/negotiations``: each negotiation's ``score`` for its own side, in the list and the read,
as the dashboard shows it (negotiations.selectors.negotiation_score); tenancy."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent, Intent
from negotiations.models import Negotiation
from tests.negotiations.pages import AGREED_AT_1000, CEILING, FLOOR, inbound_deal, outbound

pytestmark = pytest.mark.django_db


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def agreed(agent: Agent, intent: Intent) -> Negotiation:
    agent.term_guards = CEILING
    agent.save()
    n = outbound(agent, "Idris Haddad", intent=intent, status="settled", turns=4, settlement=AGREED_AT_1000)
    n.input_tokens, n.output_tokens, n.cost = 900, 100, Decimal("0.25")
    n.save()
    return n


def test_a_settled_negotiation_is_scored_for_our_side(api: APIClient, agreed: Negotiation) -> None:
    body = ok(api.get(f"/api/v1/negotiations/{agreed.pk}"))

    assert body["score"] == {
        "term": "amount",
        "currency": "EUR",
        "limit": 1100.0,
        "limit_kind": "ceiling",
        "aspiration": pytest.approx(770.0),
        "agreed": 1000.0,
        "surplus": 100.0,
        "share": pytest.approx(100 / 330),
        "turns": 4,
        "input_tokens": 900,
        "output_tokens": 100,
        "cost": "0.250000",
    }


def test_the_list_scores_each_row_as_the_read_does(api: APIClient, agreed: Negotiation) -> None:
    (row,) = ok(api.get("/api/v1/negotiations"))["results"]

    assert row["score"] == ok(api.get(f"/api/v1/negotiations/{agreed.pk}"))["score"]


def test_a_seller_is_scored_above_its_floor(api: APIClient, agent: Agent) -> None:
    agent.term_guards = FLOOR
    agent.save()
    deal = inbound_deal(agent)

    score = ok(api.get(f"/api/v1/negotiations/{deal.pk}"))["score"]

    assert (score["limit"], score["limit_kind"]) == (950.0, "floor")
    assert score["surplus"] == score["agreed"] - 950 > 0


def test_without_a_limit_or_a_deal_those_are_null(api: APIClient, agent: Agent) -> None:
    n = outbound(agent, "Idris Haddad", turns=2)

    score = ok(api.get(f"/api/v1/negotiations/{n.pk}"))["score"]

    assert {
        k: score[k] for k in ("limit", "limit_kind", "aspiration", "agreed", "surplus", "share")
    } == dict.fromkeys(("limit", "limit_kind", "aspiration", "agreed", "surplus", "share"))
    assert score["turns"] == 2


def test_another_tenants_score_is_not_to_be_had(other_api: APIClient, agreed: Negotiation) -> None:
    assert other_api.get(f"/api/v1/negotiations/{agreed.pk}").status_code == 404
    assert ok(other_api.get("/api/v1/negotiations"))["results"] == []
