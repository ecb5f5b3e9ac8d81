"""Where an agent is reached: its A2A endpoint, on this deployment or on its own host name, and its card.

The public face that answers there is :mod:`a2a_gateway`; what the card says is
:mod:`a2a_gateway.cards`. Here are the addresses, which the host API, the MCP
gateway and the demo name too, and the card as served, for the host API's
preview: the A2A edge registers how it builds one when it is ready
(:func:`register_card_document`), so that the API, another edge, need not
import it (docs/layers.md).
"""

from __future__ import annotations

from typing import Any, Protocol

from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from django.conf import settings

from agents.models import Agent


class CardDocument(Protocol):
    """How the public endpoint builds an agent's card as served, by host name (None: under
    ``PUBLIC_BASE_URL``)."""

    def __call__(self, agent: Agent, *, host_name: str | None = None) -> dict[str, Any]: ...


_card_documents: list[CardDocument] = []


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


def register_card_document(document: CardDocument) -> None:
    """Serve :func:`card_document` with ``document(agent, host_name=…)``; a later registration
    replaces an earlier one. The A2A edge registers its own (:func:`a2a_gateway.cards.card_document`)."""
    _card_documents[:] = [document]


def card_document(agent: Agent, *, host_name: str | None = None) -> dict[str, Any]:
    """The card's JSON as the public endpoint serves it at ``card_url(endpoint_url(agent,
    host_name=host_name))``: the registered builder's (:func:`register_card_document`).

    Raises ``LookupError`` when no app registered one (the A2A edge is not installed).
    """
    if not _card_documents:
        raise LookupError("No app serves AgentCards: a2a_gateway registers its card when it is ready.")
    return _card_documents[0](agent, host_name=host_name)
