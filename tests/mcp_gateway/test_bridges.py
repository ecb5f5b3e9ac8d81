"""list_bridges and get_bridge_card through ``mcp``'s client on the live stack: this tenant's agents
only, and each card exactly as its public card URL serves it."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import create_signature_verifier
from jwt import PyJWK

from a2a_gateway.signing import signing_key_create
from agents.models import Agent
from parley.models import Tenant
from tests.a2a_gateway.conftest import counts
from tests.conftest import LiveStack
from tests.mcp_gateway.conftest import call_tool, mcp_url, structured, tool_error

pytestmark = pytest.mark.django_db(transaction=True)

NOTHING = {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def bridge(live_stack: LiveStack, agent: Agent) -> dict[str, str]:
    endpoint = f"{live_stack.url}/a2a/{agent.tenant.slug}/{agent.slug}"
    return {
        "slug": agent.slug,
        "name": agent.name,
        "description": agent.description,
        "card_url": f"{endpoint}/.well-known/agent-card.json",
        "endpoint_url": endpoint,
    }


def served_card(live_stack: LiveStack, agent: Agent) -> dict[str, Any]:
    response = httpx.get(bridge(live_stack, agent)["card_url"], timeout=30)
    assert response.status_code == 200, response.text
    card: dict[str, Any] = response.json()
    return card


# --- list_bridges ---------------------------------------------------------------------------


def test_list_bridges_lists_this_tenants_agents_and_no_others(
    live_stack: LiveStack, agent: Agent, vera: Agent, seller: Agent
) -> None:
    ours = structured(call_tool(mcp_url(live_stack, agent.tenant), "list_bridges", {}))
    theirs = structured(call_tool(mcp_url(live_stack, seller.tenant), "list_bridges", {}))

    assert ours == {"bridges": [bridge(live_stack, agent), bridge(live_stack, vera)]}
    assert theirs == {"bridges": [bridge(live_stack, seller)]}


def test_a_tenant_without_agents_lists_none(live_stack: LiveStack, tenant: Tenant, seller: Agent) -> None:
    assert structured(call_tool(mcp_url(live_stack, tenant), "list_bridges", {})) == {"bridges": []}


def test_the_listed_urls_serve_the_card_and_the_endpoint(live_stack: LiveStack, vera: Agent) -> None:
    [listed] = structured(call_tool(mcp_url(live_stack, vera.tenant), "list_bridges", {}))["bridges"]

    card = httpx.get(listed["card_url"], timeout=30).json()
    assert card["name"] == "Vera Studio"
    assert [i["url"] for i in card["supportedInterfaces"]] == [listed["endpoint_url"]] * 2


# --- get_bridge_card ------------------------------------------------------------------------


def test_get_bridge_card_is_the_card_as_served(live_stack: LiveStack, agent: Agent) -> None:
    agent.card_fields = {"documentationUrl": "https://acme.example/tomas"}
    agent.save(update_fields=["card_fields", "updated_at"])

    card = structured(call_tool(mcp_url(live_stack, agent.tenant), "get_bridge_card", {"agent": "tomas"}))

    assert card == served_card(live_stack, agent)
    assert card["name"] == "Tomas's agent"
    assert card["documentationUrl"] == "https://acme.example/tomas"  # the operator's override, as served


def verifies(card: dict[str, Any]) -> None:
    """a2a-sdk's verifier accepts the card's signature, its key fetched from the ``jku`` it names."""

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None
        [key] = [k for k in httpx.get(jku, timeout=10).json()["keys"] if k["kid"] == kid]
        return PyJWK(key)

    # A copy: the parser takes the 0.3 fields out of the dict it is given.
    create_signature_verifier(key_provider, ["ES256"])(parse_agent_card(copy.deepcopy(card)))


def test_a_signed_card_stays_signed(live_stack: LiveStack, agent: Agent) -> None:
    signing_key_create(tenant=agent.tenant)

    card = structured(call_tool(mcp_url(live_stack, agent.tenant), "get_bridge_card", {"agent": "tomas"}))

    verifies(card)
    served = served_card(live_stack, agent)
    # ES256 signs afresh on every fetch; everything else is the same bytes.
    assert (len(card.pop("signatures")), len(served.pop("signatures"))) == (1, 1)
    assert card == served


@pytest.mark.parametrize("slug", ["idris", "nobody", "../globex/idris", "x" * 300])
def test_a_card_of_an_agent_the_tenant_lacks_is_a_tool_error(
    live_stack: LiveStack, agent: Agent, seller: Agent, slug: str
) -> None:
    result = call_tool(mcp_url(live_stack, agent.tenant), "get_bridge_card", {"agent": slug})

    assert tool_error(result) == (
        f"Error executing tool get_bridge_card: There is no agent {slug[:100]!r} in tenant 'acme'; "
        "list_bridges names them."
    )
    assert counts() == NOTHING
