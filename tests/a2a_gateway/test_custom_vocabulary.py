"""A custom vocabulary end to end: what is agreed is an introduction, not a price (seed example 04).

Mara introduces founders who already have paying customers and refers the
rest to a colleague's programme. Her actions: propose (open), introduce
(ends completed), refer and decline (end rejected).
"""

from __future__ import annotations

import pytest
from a2a.helpers import get_data_parts
from a2a.types import Role, TaskState

from agents.models import Agent
from negotiations.models import Negotiation, Settlement
from parley.models import Tenant
from tests.a2a_gateway.conftest import Endpoint, endpoint_of, move, user_message
from tests.conftest import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

VOCABULARY = [
    {"name": "propose", "description": "suggest what you could do", "terminal": False, "state": ""},
    {"name": "introduce", "description": "make the introduction", "terminal": True, "state": "completed"},
    {"name": "refer", "description": "point them to the programme", "terminal": True, "state": "rejected"},
    {"name": "decline", "description": "say no", "terminal": True, "state": "rejected"},
]


@pytest.fixture
def mara(live_stack: LiveStack, other_tenant: Tenant) -> Endpoint:
    agent = Agent.objects.create(
        tenant=other_tenant,
        slug="mara",
        name="Mara Vidal",
        terms="customers (number, paying)",
        allowed_actions=VOCABULARY,
        max_turns=3,
        term_guards=[{"term": "customers", "op": ">=", "value": 1, "aspiration": 2}],
    )
    return endpoint_of(live_stack, agent)


def test_a_founder_with_customers_is_introduced(mara: Endpoint) -> None:
    asked = move("propose", "Could you introduce me? We have 2 paying retailers.", terms={"customers": 2})

    task = mara.send(user_message(asked))

    reply = get_data_parts(task.history[-1].parts)[0]
    assert (reply["action"], reply["acceptsOfferId"], reply["terms"]) == (
        "introduce",
        asked["offerId"],
        {"customers": 2},
    )
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    settlement = Settlement.across_tenants.get(negotiation__agent__slug="mara")
    assert (settlement.outcome, settlement.basis, settlement.terms) == (
        "agreed",
        "reference",
        {"customers": 2},
    )


def test_a_founder_without_customers_is_referred_at_her_deadline(mara: Endpoint) -> None:
    task = None
    for _ in range(3):
        task = mara.send(
            user_message(
                move("propose", "Still looking for a first customer.", terms={"customers": 0}), task=task
            )
        )
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            break

    assert task is not None
    actions = [get_data_parts(m.parts)[0]["action"] for m in task.history if m.role == Role.ROLE_AGENT]
    assert actions == ["propose", "propose", "refer"]
    assert task.status.state == TaskState.TASK_STATE_REJECTED
    negotiation = Negotiation.across_tenants.get(agent__slug="mara")
    assert (negotiation.settlement.outcome, negotiation.settlement.basis) == ("declined", "state")
