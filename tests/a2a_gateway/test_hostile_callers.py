"""Hostile callers of the public A2A endpoint.

A stranger may send forged ListTasks page tokens, a NUL in a list filter, deeply nested
JSON, a flood of push configs on one task, push URLs whose IPv6 address embeds a private
IPv4 address, a message refused for its push URL (which must count no turn), and
subscriptions to a task parked on its caller (which must not stay open idle); a tenant may
set card overrides that would misdirect callers or impersonate another party. Each is
refused cleanly, naming nothing internal. The endpoint is driven over real HTTP on the live
stack; the push-address policy and the card overrides, which need no server, are called
directly.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError

from a2a_gateway.cards import check_overrides
from a2a_gateway.models import InboundContext, PushConfig
from a2a_gateway.push import MAX_CONFIGS_PER_TASK, PushURLRefused, vetted_address
from agents.addresses import agent_url
from agents.models import Agent
from negotiations import receipts
from tests.a2a_gateway.conftest import Endpoint, proposal
from tests.a2a_gateway.rpc import call, message, task_of

pytestmark = pytest.mark.django_db(transaction=True)

INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
# Words that only an internal fault puts in an answer: the database's, Django's or Python's own.
INTERNALS = ("PostgreSQL", "bigint", "Negative indexing", "recursion", "Traceback", "psycopg")


def page_token(offset: str) -> str:
    """A ListTasks page token as a2a-sdk's ``encode_page_token`` makes it, for ``offset``."""
    return base64.b64encode(offset.encode()).decode()


def assert_clean_refusal(response: httpx.Response, *, codes: tuple[int, ...]) -> None:
    """A JSON-RPC error with one of ``codes`` whose message names none of the :data:`INTERNALS`."""
    assert response.status_code < 500, response.text
    error = response.json()["error"]
    leaked = [word for word in INTERNALS if word.lower() in error["message"].lower()]
    assert not leaked, f"internal detail {leaked} in {error}"
    assert error["code"] in codes, error


# --- ListTasks: forged tokens and filters -------------------------------------------------------


@pytest.mark.parametrize("offset", ["-5", "99999999999999999999999"], ids=["negative", "beyond-bigint"])
def test_a_forged_list_page_token_is_invalid_params(seller_endpoint: Endpoint, offset: str) -> None:
    """A page token no listing issued (a negative or beyond-bigint offset) is -32602, naming
    nothing internal."""
    task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))

    response = call(seller_endpoint.url, "ListTasks", {"pageToken": page_token(offset)})

    assert_clean_refusal(response, codes=(INVALID_PARAMS,))


def test_a_list_filter_with_a_nul_finds_nothing_and_names_no_internals(seller_endpoint: Endpoint) -> None:
    """A contextId containing a NUL names no context: an empty page or -32602, never the
    database's error."""
    response = call(seller_endpoint.url, "ListTasks", {"contextId": "\x00"})

    assert response.status_code == 200, response.text
    body = response.json()
    if "error" in body:
        assert_clean_refusal(response, codes=(INVALID_PARAMS,))
    else:
        assert body["result"]["tasks"] == []


# --- Deeply nested JSON -------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", None], ids=["1.0", "0.3"])
def test_a_deeply_nested_body_is_a_parse_error_in_our_own_words(
    seller_endpoint: Endpoint, version: str | None
) -> None:
    """A body nested past Python's recursion limit (30,000 arrays, 60 kB) is -32700 or -32600,
    without the interpreter's words."""
    depth = 30_000
    body = "[" * depth + "]" * depth

    response = seller_endpoint.post(body.encode(), version=version)

    assert_clean_refusal(response, codes=(PARSE_ERROR, INVALID_REQUEST))


# --- Push notifications ------------------------------------------------------------------------


def test_a_task_takes_a_bounded_number_of_push_configs(seller_endpoint: Endpoint) -> None:
    """A task stores at most ``MAX_CONFIGS_PER_TASK`` push configs; one more is -32602 naming
    the limit. Every event is POSTed to every config, so an unbounded set would be a flood."""
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))
    attempts = MAX_CONFIGS_PER_TASK + 3
    # Public address literals: they resolve without DNS, and none is ever delivered to here.
    answers = [
        call(
            seller_endpoint.url,
            "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], "id": f"c{n}", "url": f"https://8.8.8.8/hook/{n}"},
        ).json()
        for n in range(attempts)
    ]

    refused = [a for a in answers if "error" in a]
    assert refused, f"all {attempts} push configs were accepted"
    assert all("error" not in a for a in answers[:MAX_CONFIGS_PER_TASK]), answers
    assert len(refused) == attempts - MAX_CONFIGS_PER_TASK, answers
    for answer in refused:
        assert answer["error"]["code"] == INVALID_PARAMS, answer
        assert str(MAX_CONFIGS_PER_TASK) in answer["error"]["message"], answer
    assert PushConfig.across_tenants.filter(task_id=task["id"]).count() < attempts
    assert PushConfig.across_tenants.filter(task_id=task["id"]).count() == MAX_CONFIGS_PER_TASK


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # NAT64 of 169.254.169.254
        "http://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
        "http://[2002:7f00:1::1]/hook",  # 6to4 of 127.0.0.1
        "http://[::127.0.0.1]/hook",  # IPv4-compatible 127.0.0.1
    ],
)
def test_a_push_url_embedding_a_private_ipv4_address_is_refused(settings: Any, url: str) -> None:
    """An IPv6 push address that embeds an IPv4 address (NAT64, 6to4, IPv4-compatible) is
    judged by that IPv4 address: private, loopback or link-local is refused. Through NAT64,
    ``64:ff9b::a9fe:a9fe`` reaches the metadata service."""
    settings.A2A_PUSH_ALLOW_PRIVATE = False

    with pytest.raises(PushURLRefused):
        asyncio.run(vetted_address(url))


def test_a_message_refused_for_its_push_url_counts_no_turn(seller_endpoint: Endpoint, seller: Agent) -> None:
    """A message refused for its inline push URL (-32602) writes nothing: no InboundContext
    row, no turn of its conversation counted."""
    params = message(proposal(800))
    params["message"]["contextId"] = "attack-ctx"
    params["configuration"] = {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/hook"}}

    response = call(seller_endpoint.url, "SendMessage", params)

    assert response.json()["error"]["code"] == INVALID_PARAMS
    assert not InboundContext.across_tenants.filter(agent=seller, context_id="attack-ctx").exists()


# --- SubscribeToTask on a parked task -------------------------------------------------------------


def test_a_subscription_to_a_task_waiting_for_input_yields_the_task_and_ends(
    seller_endpoint: Endpoint,
) -> None:
    """Subscribing to a task in TASK_STATE_INPUT_REQUIRED yields the Task and ends. Nothing
    changes until the caller sends again, so an open stream would only hold a connection idle."""
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task["id"]}}

    async def subscribe() -> tuple[list[Any], bool]:
        events: list[Any] = []
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(30, read=10)) as http,
            http.stream("POST", seller_endpoint.url, json=body, headers={"A2A-Version": "1.0"}) as response,
        ):
            try:
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        events.append(json.loads(line[5:]))
            except httpx.ReadTimeout:
                return events, False
        return events, True

    events, ended = asyncio.run(subscribe())

    assert events
    assert events[0]["result"]["task"]["id"] == task["id"]
    assert ended, "the subscription was still open, idle, 10 s after its snapshot"


# --- Card overrides -------------------------------------------------------------------------------


def test_card_fields_cannot_point_the_card_at_another_endpoint(seller: Agent, agent: Agent) -> None:
    """The card's interfaces follow the agent's URL and host name: ``card_fields`` replacing
    ``supportedInterfaces`` (here with another tenant's agent URL) is refused."""
    seller.card_fields = {
        "supportedInterfaces": [
            {"url": agent_url(agent), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]
    }

    with pytest.raises(ValidationError):
        check_overrides(seller)


def test_card_fields_cannot_claim_another_party(seller: Agent) -> None:
    """The party extension follows the agent's party id: ``card_fields`` setting it to
    another party is refused."""
    seller.card_fields = {
        "capabilities": {
            "extensions": [{"uri": receipts.PARTY_EXTENSION, "params": {"partyId": "acme:user:tomas"}}]
        }
    }

    with pytest.raises(ValidationError):
        check_overrides(seller)
