"""An agent's host name through the API: how to prove it (GET /agents/{id}/host-name) and proving it
(POST /agents/{id}/host-name/verify), against a name server and an HTTP server on loopback."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient
from starlette.responses import PlainTextResponse

from agents.models import Agent
from tests.loopback import NameServer, PageServer

HOST = "vera.example.com"


@pytest.fixture
def claimed(api: APIClient, agent: Agent, resolve_to: dict[str, list[str]]) -> Agent:
    """The agent with a host name claimed through the API, which answers on loopback."""
    resolve_to[HOST] = ["127.0.0.1"]
    response = api.patch(f"/api/v1/agents/{agent.pk}", {"host_name": HOST}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["host_name_verified_at"] is None
    agent.refresh_from_db()
    return agent


def test_the_proof_is_read_then_made(
    api: APIClient, claimed: Agent, name_server: NameServer, host_web: PageServer
) -> None:
    token = claimed.host_name_token
    url = f"http://{HOST}:{host_web.port}/.well-known/parley-verification/{token}"
    value = f"parley-verification={token}"

    read = api.get(f"/api/v1/agents/{claimed.pk}/host-name")

    assert read.status_code == 200
    assert read.json() == {
        "host_name": HOST,
        "verified_at": None,
        "dns_record": {"name": f"_parley-challenge.{HOST}", "type": "TXT", "value": value},
        "http_token": {"url": url, "body": value},
    }

    refused = api.post(f"/api/v1/agents/{claimed.pk}/host-name/verify")

    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {
        "host_name": [
            f"DNS: no TXT record at _parley-challenge.{HOST} (the name does not exist).",
            f"HTTP: {url} answered 404, not 200.",
        ]
    }

    host_web.pages[f"/.well-known/parley-verification/{token}"] = PlainTextResponse(value)
    proved = api.post(f"/api/v1/agents/{claimed.pk}/host-name/verify")

    assert proved.status_code == 200
    assert proved.json()["verified_at"] is not None
    assert (
        api.get(f"/api/v1/agents/{claimed.pk}").json()["host_name_verified_at"]
        == proved.json()["verified_at"]
    )


def test_a_new_host_name_through_the_api_needs_a_new_proof(
    api: APIClient, claimed: Agent, name_server: NameServer
) -> None:
    name_server.records[f"_parley-challenge.{HOST}"] = [f'"parley-verification={claimed.host_name_token}"']
    assert api.post(f"/api/v1/agents/{claimed.pk}/host-name/verify").status_code == 200

    changed = api.patch(f"/api/v1/agents/{claimed.pk}", {"host_name": "vera.example.org"}, format="json")

    assert changed.json()["host_name_verified_at"] is None
    claim = api.get(f"/api/v1/agents/{claimed.pk}/host-name").json()
    assert claim["verified_at"] is None
    assert claim["dns_record"]["value"] != f"parley-verification={claimed.host_name_token}"


def test_another_tenants_agent_is_a_404(other_api: APIClient, claimed: Agent) -> None:
    assert other_api.get(f"/api/v1/agents/{claimed.pk}/host-name").status_code == 404
    assert other_api.post(f"/api/v1/agents/{claimed.pk}/host-name/verify").status_code == 404


def test_an_agent_without_a_host_name_has_no_proof(api: APIClient, agent: Agent) -> None:
    assert api.get(f"/api/v1/agents/{agent.pk}/host-name").status_code == 404
    refused = api.post(f"/api/v1/agents/{agent.pk}/host-name/verify")
    assert refused.json()["error"]["fields"] == {"host_name": ["The agent has no host name to verify."]}
