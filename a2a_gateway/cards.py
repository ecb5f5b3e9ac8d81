"""The AgentCard of each agent, derived from the agent (index-wire-protocol.md §4 "AgentCard derivation")."""

from __future__ import annotations

from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill
from django.conf import settings

from agents.models import Agent

MODES = ["application/json", "text/plain"]


def agent_url(agent: Agent) -> str:
    """The agent's public A2A endpoint; its card is at ``<url>/.well-known/agent-card.json``."""
    return f"{settings.PUBLIC_BASE_URL}/a2a/{agent.tenant.slug}/{agent.slug}"


def agent_card(agent: Agent) -> AgentCard:
    """The card counterparties fetch: identity, both protocol versions on one URL, the negotiate skill."""
    url = agent_url(agent)
    return AgentCard(
        name=agent.name,
        description=agent.description or f"Negotiates on behalf of {agent.name}.",
        version=agent.version,
        provider=AgentProvider(organization=agent.tenant.name, url=settings.PUBLIC_BASE_URL),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=[
            AgentSkill(
                id="negotiate",
                name="Negotiate",
                description=(
                    "Negotiates on its party's behalf over A2A message/send. "
                    f"Understands: {vocabulary(agent)}."
                ),
                tags=["negotiation"],
                input_modes=["application/json"],
                output_modes=["application/json"],
            )
        ],
    )


def vocabulary(agent: Agent) -> str:
    """The actions the agent uses, each ``name (description)`` or the bare name when it has none:
    "propose (put an offer on the table), counter (answer an offer with another), …"."""
    return ", ".join(
        f"{a['name']} ({a['description']})" if a.get("description") else a["name"]
        for a in agent.allowed_actions
    )


def capability_card() -> AgentCard:
    """The union of what any agent supports; it gates operations for the shared request handler."""
    return AgentCard(
        name="Parley agents",
        description="Capabilities shared by every Parley agent endpoint.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=settings.PUBLIC_BASE_URL, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=[
            AgentSkill(id="negotiate", name="Negotiate", description="Negotiates.", tags=["negotiation"])
        ],
    )
