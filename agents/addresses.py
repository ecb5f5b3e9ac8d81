"""Where an agent is reached: its A2A endpoint, on this deployment or on its own host name, and its card.

The public face that answers there is :mod:`a2a_gateway`; what the card says is
:mod:`a2a_gateway.cards`. Here are only the addresses, which the host API, the
MCP gateway and the demo name too.
"""

from __future__ import annotations

from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from django.conf import settings

from agents.models import Agent


def agent_url(agent: Agent) -> str:
    """The agent's public A2A endpoint; its card is at ``<url>/.well-known/agent-card.json``."""
    return f"{settings.PUBLIC_BASE_URL}/a2a/{agent.tenant.slug}/{agent.slug}"


def endpoint_url(agent: Agent, *, host_name: str | None = None) -> str:
    """The JSON-RPC URL a card names: :func:`agent_url`, or ``<scheme>://<host_name>/`` for the card
    served on the agent's own host name.

    The scheme is ``PUBLIC_BASE_URL``'s (``https`` in production), not the request's: behind a
    proxy that terminates TLS every request arrives as ``http``, and the card must say the same to
    every caller. A host name is served on the default port of that scheme.
    """
    if host_name is None:
        return agent_url(agent)
    scheme = settings.PUBLIC_BASE_URL.partition("://")[0]
    return f"{scheme}://{host_name}/"


def card_url(endpoint: str) -> str:
    """Where the card of the agent at ``endpoint`` (its JSON-RPC URL) is served (A2A 1.0's
    well-known path; A2A 0.3 clients fetch ``/.well-known/agent.json``, served too)."""
    return f"{endpoint.rstrip('/')}{AGENT_CARD_WELL_KNOWN_PATH}"
