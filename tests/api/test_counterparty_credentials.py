"""Counterparty credentials through the host API: what an agent presents to another platform's agent.

The secret is taken and never shown; a row that cannot be sent as a header is refused at its field;
another tenant's credential is a 404 and another tenant's agent a 400. That the client presents it
is tests/exchange/test_round_trip.py's and the negotiation client's to show.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent
from negotiations.client import credential_headers
from negotiations.models import CounterpartyCredential

pytestmark = pytest.mark.django_db

URL = "/api/v1/counterparty-credentials"
PEER = "https://peer.example/a2a/globex/helpdesk"


def body(agent: Agent | None, **fields: Any) -> dict[str, Any]:
    return {
        "agent": str(agent.pk) if agent else None,
        "url_prefix": PEER,
        "scheme": "api_key",
        "header": "X-API-Key",
        "secret": "abc123.s3cret-value",
        **fields,
    }


def test_a_credential_is_added_presented_and_its_secret_never_shown(api: APIClient, agent: Agent) -> None:
    created = api.post(URL, body(agent), format="json")

    assert created.status_code == 201, created.content
    shown = created.json()
    assert "secret" not in shown
    assert (shown["agent"], shown["url_prefix"], shown["scheme"]) == (str(agent.pk), PEER, "api_key")
    assert "s3cret-value" not in api.get(URL).content.decode()
    assert "s3cret-value" not in api.get(f"{URL}/{shown['id']}").content.decode()
    assert credential_headers(agent=agent, url=f"{PEER}/x") == {"X-API-Key": "abc123.s3cret-value"}


def test_a_credential_is_changed_and_deleted(api: APIClient, agent: Agent) -> None:
    created = api.post(URL, body(None), format="json").json()

    changed = api.patch(f"{URL}/{created['id']}", {"scheme": "bearer", "secret": "t0ken"}, format="json")

    assert changed.status_code == 200, changed.content
    assert credential_headers(agent=agent, url=PEER) == {"Authorization": "Bearer t0ken"}
    assert api.delete(f"{URL}/{created['id']}").status_code == 204
    assert not CounterpartyCredential.across_tenants.exists()


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"url_prefix": "ftp://peer.example/x"}, "url_prefix", "Give an http or https URL."),
        ({"header": "X API Key"}, "header", "Give an HTTP header name"),
        ({"header": "Host"}, "header", "a header the client sets itself"),
        ({"secret": "line\r\nX-Evil: 1"}, "secret", "no line breaks"),
        ({"secret": "clé→"}, "secret", "Latin-1 characters only"),
        ({"scheme": "basic"}, "scheme", "is not a valid choice"),
    ],
    ids=["url", "header-space", "own-header", "crlf", "non-latin-1", "scheme"],
)
def test_a_credential_that_cannot_be_sent_is_refused_at_its_field(
    api: APIClient, agent: Agent, fields: dict[str, Any], field: str, said: str
) -> None:
    refused = api.post(URL, body(agent, **fields), format="json")

    assert refused.status_code == 400, refused.content
    assert said in " ".join(refused.json()["error"]["fields"][field])
    assert not CounterpartyCredential.across_tenants.exists()


def test_another_tenants_credential_and_agent_are_not_this_tenants(
    api: APIClient, other_api: APIClient, agent: Agent, seller: Agent
) -> None:
    theirs = other_api.post(URL, body(seller), format="json").json()

    assert api.get(f"{URL}/{theirs['id']}").status_code == 404
    assert api.patch(f"{URL}/{theirs['id']}", {"secret": "x"}, format="json").status_code == 404
    assert api.delete(f"{URL}/{theirs['id']}").status_code == 404
    assert api.get(URL).json()["results"] == []
    refused = api.post(URL, body(seller), format="json")
    assert refused.status_code == 400
    assert "This tenant has no agent" in refused.json()["error"]["fields"]["agent"][0]
    assert CounterpartyCredential.across_tenants.get().secret == "abc123.s3cret-value"
