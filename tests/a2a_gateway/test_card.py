"""The AgentCard each agent publishes, as a2a-sdk's resolver reads it; 404 for agents not there."""

from __future__ import annotations

import pytest
from a2a.client import A2ACardResolver
from a2a.client.errors import AgentCardResolutionError
from a2a.types import AgentCard

from agents.models import Agent, Intent
from agents.services import runs
from tests.a2a_gateway.conftest import Endpoint, run
from tests.conftest import LiveStack, runs_settle

pytestmark = pytest.mark.django_db(transaction=True)


def test_card_is_served_and_parsed_by_the_sdk(seller_endpoint: Endpoint, live_stack: LiveStack) -> None:
    card = seller_endpoint.card()

    assert isinstance(card, AgentCard)
    assert card.name == "Idris Haddad"
    assert card.description == "Negotiates on behalf of Idris Haddad."
    assert card.version == "1.0.0"
    assert card.provider.organization == "Globex"
    assert card.provider.url == live_stack.url
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (seller_endpoint.url, "JSONRPC", "1.0"),
        (seller_endpoint.url, "JSONRPC", "0.3"),
    ]
    assert card.capabilities.streaming
    assert card.capabilities.push_notifications
    # A move is JSON; plain text it takes only where its representative face answers it (test_move_rules).
    assert list(card.default_input_modes) == ["application/json"]
    assert list(card.default_output_modes) == ["application/json", "text/plain"]
    [skill] = card.skills
    assert skill.id == "negotiate"
    assert skill.name == "Negotiate"
    assert skill.description == (
        "Negotiates on its party's behalf over A2A message/send. "
        "Understands: propose (put an offer on the table), counter (answer an offer with another), "
        "accept (accept an offer on the table), reject (end without a deal). "
        "Terms: amount (number, EUR per day), currency."
    )
    assert list(skill.tags) == ["negotiation"]
    assert list(skill.input_modes) == ["application/json"]
    # Its holding reply and its try-again text are text.
    assert list(skill.output_modes) == ["application/json", "text/plain"]


def test_card_lists_the_agents_own_actions(seller_endpoint: Endpoint, seller: Agent) -> None:
    seller.description = "Fractional CFO, two days a week."
    seller.allowed_actions = [
        {"name": "introduce", "description": "", "terminal": True, "state": "completed"},
        {"name": "refer", "description": "", "terminal": False, "state": ""},
        {"name": "decline", "description": "", "terminal": True, "state": "rejected"},
    ]
    seller.save()

    card = seller_endpoint.card()

    assert card.description == "Fractional CFO, two days a week."
    assert card.skills[0].description.endswith(
        "Understands: introduce, refer, decline. Terms: amount (number, EUR per day), currency."
    )


def test_card_carries_the_v0_3_fields(seller_endpoint: Endpoint) -> None:
    """0.3 clients (Index peers) read ``url``, ``preferredTransport`` and ``protocolVersion``."""
    body = run(lambda http: http.get(seller_endpoint.card_url)).json()

    assert body["url"] == seller_endpoint.url
    assert body["preferredTransport"] == "JSONRPC"
    assert body["protocolVersion"] == "0.3"
    assert body["defaultInputModes"] == ["application/json"]
    assert body["defaultOutputModes"] == ["application/json", "text/plain"]


def test_card_is_served_at_the_legacy_path_too(seller_endpoint: Endpoint) -> None:
    """A2A 0.3 clients fetch ``/.well-known/agent.json`` (docs/wire-format.md#cards)."""
    legacy = run(lambda http: http.get(f"{seller_endpoint.url}/.well-known/agent.json"))
    current = run(lambda http: http.get(seller_endpoint.card_url))

    assert legacy.status_code == 200
    assert legacy.headers["content-type"] == "application/json"
    assert legacy.json() == current.json()
    card = run(
        lambda http: A2ACardResolver(
            http, seller_endpoint.url, agent_card_path="/.well-known/agent.json"
        ).get_agent_card()
    )
    assert card == seller_endpoint.card()


def test_scoping_the_agent_to_an_intent_leaves_its_card_byte_identical(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    """An intent changes the work and the system message, never the identity."""
    unscoped = run(lambda http: http.get(seller_endpoint.card_url)).content
    intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell two days a month.")
    runs.run_start(agent=seller, intent=intent, task="Find a client for two days a month.")

    scoped = run(lambda http: http.get(seller_endpoint.card_url)).content

    assert scoped == unscoped
    runs_settle()


CARD_PATHS = ["/.well-known/agent-card.json", "/.well-known/agent.json"]


@pytest.mark.parametrize("card_path", CARD_PATHS)
@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("globex/nobody", "agent 'nobody' in tenant 'globex'"),
        ("initech/idris", "agent 'idris' in tenant 'initech'"),
        # The agent exists, but in another tenant: its slug under this tenant is no one.
        ("acme/idris", "agent 'idris' in tenant 'acme'"),
    ],
)
def test_card_of_an_agent_that_is_not_there_is_404(
    live_stack: LiveStack, seller: Agent, agent: Agent, path: str, named: str, card_path: str
) -> None:
    url = f"{live_stack.url}/a2a/{path}"

    response = run(lambda http: http.get(f"{url}{card_path}"))

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["message"] == f"There is no {named}."

    with pytest.raises(AgentCardResolutionError) as raised:
        run(lambda http: A2ACardResolver(http, url, agent_card_path=card_path).get_agent_card())
    assert raised.value.status_code == 404
