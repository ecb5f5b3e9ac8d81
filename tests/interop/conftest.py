"""Interop fixtures: our agents on the live stack, facing Index-style peers (``index_peer``)."""

from __future__ import annotations

import pytest

from a2a_gateway.models import A2ATask
from agents.models import Agent, Intent, Run
from agents.services import runs
from negotiations.models import Negotiation, Settlement, Turn
from tests.conftest import LiveStack, wait_until

CEILING = {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}


@pytest.fixture
def buyer(agent: Agent) -> Agent:
    """Tomas's agent with his ceiling (1,100 EUR a day) as a guard, so it negotiates without asking."""
    agent.term_guards = [CEILING]
    agent.save()
    return agent


@pytest.fixture
def seller_url(live_stack: LiveStack, seller: Agent) -> str:
    """The public endpoint of the seller (floor 950 EUR a day, terms on), as handed to an Index client."""
    return f"{live_stack.url}/a2a/{seller.tenant.slug}/{seller.slug}"


def negotiate(buyer: Agent, intent: Intent, url: str) -> tuple[Run, Negotiation]:
    """Give ``buyer`` a task naming ``url`` and wait for its run to end; returns it and the negotiation."""
    run = runs.run_start(agent=buyer, intent=intent, task=f"Find me a fractional CFO. Talk to {url}")
    wait_until(
        lambda: Run.across_tenants.get(pk=run.pk).status not in Run.ACTIVE, timeout=60, what="the run to end"
    )
    run.refresh_from_db()
    return run, Negotiation.across_tenants.get(agent=buyer)


def counts() -> dict[str, int]:
    """Rows in every table an inbound message may write."""
    return {m.__name__: m.across_tenants.count() for m in (Negotiation, Turn, Settlement, A2ATask)}
