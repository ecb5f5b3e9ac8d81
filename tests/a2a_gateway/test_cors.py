"""CORS per agent on the live stack: preflights and readable answers for the agent's listed origins only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError
from google.protobuf.json_format import MessageToDict

from a2a_gateway.cors import check_cors_origins
from agents.models import Agent
from tests.a2a_gateway.conftest import Endpoint, proposal, user_message
from tests.conftest import LiveStack

APP = "https://app.example.com"
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,a2a-version",
}


@pytest.fixture
def allowing(seller: Agent, seller_endpoint: Endpoint) -> Endpoint:
    seller.cors_origins = [APP]
    seller.save()
    return seller_endpoint


def options(url: str, origin: str, **headers: str) -> httpx.Response:
    return httpx.options(url, headers={"Origin": origin, **headers}, timeout=30)


def send_body() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": MessageToDict(user_message(proposal()))},
    }


@pytest.mark.django_db(transaction=True)
def test_a_preflight_from_a_listed_origin_is_answered(allowing: Endpoint) -> None:
    response = options(allowing.url, APP, **PREFLIGHT)

    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == APP
    assert response.headers["access-control-allow-methods"] == "POST"
    assert response.headers["access-control-allow-headers"] == (
        "Content-Type, A2A-Version, A2A-Extensions, X-A2A-Extensions, Authorization, X-API-Key"
    )
    assert response.headers["access-control-max-age"] == "600"
    assert response.headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in response.headers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "headers"),
    [
        ("https://evil.example.com", PREFLIGHT),
        ("https://app.example.com.evil.example", PREFLIGHT),
        ("null", PREFLIGHT),
        (APP, {"Access-Control-Request-Method": "GET"}),  # the JSON-RPC URL serves POST only
        (APP, {}),  # a plain OPTIONS, no preflight
    ],
)
def test_any_other_options_request_gets_the_urls_405(
    allowing: Endpoint, origin: str, headers: dict[str, str]
) -> None:
    response = options(allowing.url, origin, **headers)

    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"] == {"code": -32600, "message": "Use POST for JSON-RPC."}
    assert "access-control-allow-methods" not in response.headers
    if origin != APP:
        assert "access-control-allow-origin" not in response.headers


@pytest.mark.django_db(transaction=True)
def test_an_agent_with_no_origins_allows_none(seller_endpoint: Endpoint) -> None:
    response = options(seller_endpoint.url, APP, **PREFLIGHT)

    assert response.status_code == 405
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("origin", "allowed"), [(APP, True), ("https://evil.example.com", False)])
def test_json_rpc_answers_are_readable_by_listed_origins_only(
    allowing: Endpoint, origin: str, allowed: bool
) -> None:
    response = httpx.post(
        allowing.url, json=send_body(), headers={"Origin": origin, "A2A-Version": "1.0"}, timeout=30
    )

    assert response.status_code == 200
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert response.headers.get("access-control-allow-origin") == (origin if allowed else None)
    assert response.headers["vary"] == "Origin"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("card_path", ["/.well-known/agent-card.json", "/.well-known/agent.json"])
def test_the_card_is_readable_by_listed_origins(allowing: Endpoint, card_path: str) -> None:
    preflight = options(f"{allowing.url}{card_path}", APP, **{"Access-Control-Request-Method": "GET"})
    refused = options(
        f"{allowing.url}{card_path}", "https://evil.example.com", **{"Access-Control-Request-Method": "GET"}
    )
    card = httpx.get(f"{allowing.url}{card_path}", headers={"Origin": APP}, timeout=30)

    assert (preflight.status_code, preflight.headers["access-control-allow-methods"]) == (204, "GET")
    assert preflight.headers["access-control-allow-origin"] == APP
    assert (refused.status_code, refused.headers["allow"]) == (405, "GET, HEAD")
    assert "access-control-allow-origin" not in refused.headers
    assert card.status_code == 200
    assert card.headers["access-control-allow-origin"] == APP


@pytest.mark.django_db(transaction=True)
def test_a_refusal_at_the_edge_is_readable_too(allowing: Endpoint) -> None:
    """A browser must be able to read why it was refused, not just see a network error."""
    response = httpx.post(
        allowing.url, content=b"{" + b" " * 70_000 + b"}", headers={"Origin": APP}, timeout=30
    )

    assert response.status_code == 413
    assert response.headers["access-control-allow-origin"] == APP


@pytest.mark.django_db(transaction=True)
def test_any_origin_with_a_star(seller: Agent, seller_endpoint: Endpoint) -> None:
    seller.cors_origins = ["*"]
    seller.save()

    anyone = options(seller_endpoint.url, "https://anyone.example", **PREFLIGHT)
    opaque = options(seller_endpoint.url, "null", **PREFLIGHT)

    assert (anyone.status_code, anyone.headers["access-control-allow-origin"]) == (
        204,
        "https://anyone.example",
    )
    assert opaque.status_code == 405


@pytest.mark.django_db(transaction=True)
def test_an_unknown_agent_allows_no_one(live_stack: LiveStack, seller: Agent) -> None:
    seller.cors_origins = ["*"]
    seller.save()

    response = options(f"{live_stack.url}/a2a/globex/nobody", APP, **PREFLIGHT)

    assert response.status_code == 404
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(
    ("origins", "error"),
    [
        ([], None),
        (["*"], None),
        ([APP, "http://localhost:5173", "http://[::1]:8080", "https://app.example.com/"], None),
        (["app.example.com"], "'app.example.com' is not an origin (https://host[:port])."),
        (
            ["https://app.example.com/path"],
            "'https://app.example.com/path' is not an origin (https://host[:port]).",
        ),
        (
            ["https://user@app.example.com"],
            "'https://user@app.example.com' is not an origin (https://host[:port]).",
        ),
        (
            ["https://app.example.com:port"],
            "'https://app.example.com:port' is not an origin (https://host[:port]).",
        ),
        (["ftp://app.example.com"], "'ftp://app.example.com' is not an origin (https://host[:port])."),
        ("https://app.example.com", "List origins, such as https://app.example.com."),
        ([1], "List origins, such as https://app.example.com."),
    ],
)
def test_origins_are_checked_at_save_time(origins: Any, error: str | None) -> None:
    agent = Agent(cors_origins=origins)

    if error is None:
        check_cors_origins(agent)
    else:
        with pytest.raises(ValidationError) as raised:
            check_cors_origins(agent)
        assert raised.value.message_dict == {"cors_origins": [error]}
