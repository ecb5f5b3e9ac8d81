"""ask_bridge through ``mcp``'s client on the live stack: a real agent's answer, the endpoint's own
auth and caps applied as to any caller, and clear errors for what cannot be sent."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from mcp_types import CallToolResult

from a2a_gateway.auth import inbound_key_create
from a2a_gateway.models import A2ATask
from agents.models import Agent
from negotiations.models import Negotiation, Settlement
from tests.a2a_gateway.conftest import counts, move, proposal
from tests.a2a_gateway.rpc import call, endpoint_on, inbound_contexts, message, refusal, task_of, tune
from tests.a2a_gateway.servers import web_process
from tests.conftest import LiveStack
from tests.mcp_gateway.conftest import call_tool, mcp_url, structured, tool_error
from tests.representative import studio

pytestmark = pytest.mark.django_db(transaction=True)

NOTHING = {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
INVALID_REQUEST, INVALID_PARAMS, TRY_AGAIN = -32600, -32602, -32010
API_KEY, BEARER = Agent.InboundAuth.API_KEY, Agent.InboundAuth.BEARER
FAILED = "Error executing tool ask_bridge: "
TRUSTED_HEADER = "X-Real-IP"


def sent(data: dict[str, Any], *, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 1.0 user message with one data part, as JSON; on ``task`` when given."""
    return dict(message(data, task=task)["message"])


def ask(
    live_stack: LiveStack, agent: Agent, msg: Any, *, headers: dict[str, str] | None = None
) -> CallToolResult:
    """Call ask_bridge on ``agent``'s tenant for ``agent`` with ``msg``."""
    arguments = {"agent": agent.slug, "message": msg}
    return call_tool(mcp_url(live_stack, agent.tenant), "ask_bridge", arguments, headers=headers)


def data_of(entry: dict[str, Any]) -> dict[str, Any]:
    [part] = entry["parts"]
    return dict(part["data"])


# --- Round trips to a real agent ------------------------------------------------------------


def test_a_move_gets_the_agents_counter_in_its_task(live_stack: LiveStack, seller: Agent) -> None:
    opening = proposal(800)

    task = structured(ask(live_stack, seller, sent(opening)))["task"]

    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [entry["role"] for entry in task["history"]] == ["ROLE_USER", "ROLE_AGENT"]
    assert data_of(task["history"][0]) == opening  # sent unchanged
    counter = data_of(task["history"][-1])
    assert (counter["action"], counter["message"], counter["terms"]) == (
        "propose",
        "I can offer €1,358.",
        {"amount": 1358, "currency": "EUR"},
    )
    negotiation = Negotiation.across_tenants.get()
    assert (negotiation.agent_id, negotiation.direction, negotiation.task_id) == (
        seller.pk,
        Negotiation.Direction.INBOUND,
        task["id"],
    )


def test_a_follow_up_on_the_task_continues_it_to_a_deal(live_stack: LiveStack, seller: Agent) -> None:
    first = structured(ask(live_stack, seller, sent(proposal(800))))["task"]
    offer = data_of(first["history"][-1])
    acceptance = move(
        "accept",
        "Agreed: €1,358.",
        terms={"amount": 1358, "currency": "EUR"},
        accepts_offer_id=offer["offerId"],
    )

    task = structured(ask(live_stack, seller, sent(acceptance, task=first)))["task"]

    assert task["id"] == first["id"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert data_of(task["history"][-1])["action"] == "accept"
    settlement = Settlement.across_tenants.get()
    assert (settlement.outcome, settlement.terms) == ("agreed", {"amount": 1358, "currency": "EUR"})


def test_a_visitors_question_is_answered_from_the_agents_documents(
    live_stack: LiveStack, vera: Agent
) -> None:
    question = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "When are you open?"}],
    }

    task = structured(ask(live_stack, vera, question))["task"]

    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    reply = task["history"][-1]
    assert reply["role"] == "ROLE_AGENT"
    assert reply["parts"] == [{"text": studio.quoted("Opening hours", studio.HOURS)}]


# --- Credentials: the caller's, passed on; none added ---------------------------------------


def credentials(scheme: str, key: str) -> dict[str, str]:
    """The header that carries ``key`` for an agent requiring ``scheme``."""
    return {"Authorization": f"Bearer {key}"} if scheme == BEARER else {"X-API-Key": key}


@pytest.mark.parametrize("scheme", [API_KEY, BEARER])
def test_an_agent_requiring_a_key_refuses_a_call_without_one(
    live_stack: LiveStack, seller: Agent, scheme: str
) -> None:
    tune(seller, inbound_auth=scheme)
    direct = refusal(
        call(endpoint_on(live_stack.url, seller), "SendMessage", message(proposal())),
        status=401,
        code=INVALID_REQUEST,
    )

    result = ask(live_stack, seller, sent(proposal()))

    assert tool_error(result) == f"{FAILED}A2A error {INVALID_REQUEST} (HTTP 401): {direct}"
    assert direct == (
        "This agent requires a bearer token: Authorization: Bearer <key>."
        if scheme == BEARER
        else "This agent requires an API key in the X-API-Key header."
    )
    assert counts() == NOTHING


@pytest.mark.parametrize("scheme", [API_KEY, BEARER])
def test_an_agent_requiring_a_key_answers_a_call_with_it(
    live_stack: LiveStack, seller: Agent, scheme: str
) -> None:
    tune(seller, inbound_auth=scheme)
    key, shown = inbound_key_create(agent=seller, name="An MCP host")

    task = structured(ask(live_stack, seller, sent(proposal()), headers=credentials(scheme, shown)))["task"]

    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert A2ATask.across_tenants.get().owner == f"{seller.pk}|key:{key.prefix}"


def test_a_key_that_is_not_the_agents_is_refused(live_stack: LiveStack, seller: Agent, agent: Agent) -> None:
    tune(seller, inbound_auth=API_KEY)
    _, others = inbound_key_create(agent=agent, name="Another agent's holder")

    result = ask(live_stack, seller, sent(proposal()), headers={"X-API-Key": others})

    assert (
        tool_error(result)
        == f"{FAILED}A2A error {INVALID_REQUEST} (HTTP 401): The API key is not valid for this agent."
    )
    assert counts() == NOTHING


def test_a_key_names_the_caller_on_an_anonymous_agent_and_no_key_is_added(
    live_stack: LiveStack, seller: Agent
) -> None:
    key, shown = inbound_key_create(agent=seller, name="An MCP host")

    keyed = structured(ask(live_stack, seller, sent(proposal(800)), headers={"X-API-Key": shown}))["task"]
    anonymous = structured(ask(live_stack, seller, sent(proposal(810))))["task"]

    owners = dict(A2ATask.across_tenants.values_list("task_id", "owner"))
    assert owners[keyed["id"]] == f"{seller.pk}|key:{key.prefix}"
    assert owners[anonymous["id"]].startswith(f"{seller.pk}|anon:")


@pytest.fixture(scope="module")
def behind_a_proxy(live_stack: LiveStack) -> Iterator[str]:
    """A second web process that trusts :data:`TRUSTED_HEADER` as the caller's address."""
    with web_process(live_stack, A2A_TRUSTED_PROXY_HEADERS=TRUSTED_HEADER) as origin:
        yield origin


def test_the_caller_is_to_the_agent_who_it_is_calling_directly(behind_a_proxy: str, seller: Agent) -> None:
    """An address header the endpoint trusts names the caller when sent directly; sent to the gateway,
    it names the caller the gateway vouches for, the same one, and not the gateway."""
    endpoint = endpoint_on(behind_a_proxy, seller)
    elsewhere = task_of(
        call(endpoint, "SendMessage", message(proposal(800)), headers={TRUSTED_HEADER: "10.9.9.9"})
    )
    here = task_of(call(endpoint, "SendMessage", message(proposal(810))))
    gateway = f"{behind_a_proxy}/mcp/{seller.tenant.slug}"

    result = call_tool(
        gateway,
        "ask_bridge",
        {"agent": seller.slug, "message": sent(proposal(820))},
        headers={TRUSTED_HEADER: "10.9.9.9"},
    )

    owners = dict(A2ATask.across_tenants.values_list("task_id", "owner"))
    assert owners[elsewhere["id"]] != owners[here["id"]]
    assert owners[structured(result)["task"]["id"]] == owners[elsewhere["id"]]


# --- Caps: the endpoint's, as for any caller ------------------------------------------------


def test_a_message_over_max_input_chars_is_refused_exactly_as_directly(
    live_stack: LiveStack, seller: Agent
) -> None:
    tune(seller, max_input_chars=40)
    long = sent({"action": "propose", "message": "x" * 100})
    response = call(endpoint_on(live_stack.url, seller), "SendMessage", {"message": long})
    direct = response.json()["error"]

    result = ask(live_stack, seller, long)

    assert refusal(response, status=200, code=INVALID_PARAMS).endswith("this agent takes at most 40.")
    assert tool_error(result) == (
        f"{FAILED}A2A error {INVALID_PARAMS}: {direct['message']} "
        f"Data: {json.dumps(direct['data'], ensure_ascii=False)}"
    )
    assert counts() == NOTHING
    assert inbound_contexts(seller) == {}


def test_the_rate_limit_counts_calls_through_the_gateway(live_stack: LiveStack, seller: Agent) -> None:
    tune(seller, rate_limit=1)
    structured(ask(live_stack, seller, sent(proposal(800))))
    before = counts()

    result = ask(live_stack, seller, sent(proposal(810)))

    text = tool_error(result)
    assert text.startswith(
        f"{FAILED}A2A error {TRY_AGAIN} (HTTP 429): Too many messages: this agent takes at most 1 a minute "
        "from each caller. Try again in "
    )
    assert counts() == before


# --- What cannot be sent --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("Hello there", "a string"),
        ([{"text": "hi"}], "an array"),
        (42, "a number"),
        (None, "null"),
        (True, "a boolean"),
    ],
)
def test_a_message_that_is_not_an_object_is_a_tool_error(
    live_stack: LiveStack, seller: Agent, value: Any, kind: str
) -> None:
    result = ask(live_stack, seller, value)

    assert tool_error(result) == (
        f"{FAILED}message must be a JSON object (an A2A Message: messageId, role, parts), not {kind}."
    )
    assert counts() == NOTHING


@pytest.mark.parametrize("slug", ["nobody", "idris", "../../globex/idris"])
def test_an_agent_the_tenant_lacks_is_a_tool_error(
    live_stack: LiveStack, agent: Agent, seller: Agent, slug: str
) -> None:
    result = call_tool(
        mcp_url(live_stack, agent.tenant), "ask_bridge", {"agent": slug, "message": sent(proposal())}
    )

    assert (
        tool_error(result) == f"{FAILED}There is no agent {slug!r} in tenant 'acme'; list_bridges names them."
    )
    assert counts() == NOTHING  # globex's idris heard nothing


def test_a_message_over_the_body_cap_is_refused_before_it_is_sent(
    live_stack: LiveStack, seller: Agent
) -> None:
    limit = settings.A2A_MAX_BODY_BYTES
    big = sent({"action": "propose", "message": "x" * limit})
    request = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "SendMessage", "params": {"message": big}}
    size = len(json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode())

    result = ask(live_stack, seller, big)

    assert tool_error(result) == (
        f"{FAILED}message is too large: its SendMessage request would be {size} bytes, "
        f"and the agent's endpoint takes at most {limit}."
    )
    assert counts() == NOTHING


def test_a_message_the_endpoint_cannot_read_is_refused_with_its_error_and_data(
    live_stack: LiveStack, seller: Agent
) -> None:
    unreadable = {"messageId": "m1", "role": "ROLE_USER", "parts": "not a list"}
    direct = call(endpoint_on(live_stack.url, seller), "SendMessage", {"message": unreadable}).json()["error"]

    result = ask(live_stack, seller, unreadable)

    assert direct["code"] == INVALID_PARAMS
    assert tool_error(result) == (
        f"{FAILED}A2A error {INVALID_PARAMS}: {direct['message']} "
        f"Data: {json.dumps(direct['data'], ensure_ascii=False)}"
    )
    assert "repeated field parts must be in [] which is not a list" in tool_error(result)
    assert counts() == NOTHING
