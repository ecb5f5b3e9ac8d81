"""Inbound auth and task ownership per caller, through the live stack.

An agent that requires a key refuses a call without a valid one with 401
before the SDK reads it; tasks belong to the key that made them, or to the
anonymous counterparty's address, and anyone else is told they do not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import SendMessageRequest, Task, TaskState
from asgiref.sync import async_to_sync
from django.test import override_settings

from a2a_gateway.auth import agent_at, inbound_key_create, inbound_key_revoke
from a2a_gateway.models import A2ATask, InboundKey
from agents.models import Agent
from parley.edge import VOUCHED_CLIENT_HEADER, Unauthenticated, client_address, vouch_for
from parley.models import Tenant
from tests.a2a_gateway.conftest import TIMEOUT, Endpoint, counts, proposal, user_message
from tests.a2a_gateway.rpc import call, endpoint_on, inbound_contexts, message, refusal, task_of, tune
from tests.a2a_gateway.servers import web_process
from tests.conftest import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

INVALID_REQUEST = -32600
TASK_NOT_FOUND = -32001
NOTHING = {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
API_KEY, BEARER = Agent.InboundAuth.API_KEY, Agent.InboundAuth.BEARER
TRUSTED_HEADER = "X-Real-IP"


@pytest.fixture(scope="module")
def behind_a_proxy(live_stack: LiveStack) -> Iterator[str]:
    """A second web process that trusts :data:`TRUSTED_HEADER` as the caller's address."""
    with web_process(live_stack, A2A_TRUSTED_PROXY_HEADERS=TRUSTED_HEADER) as origin:
        yield origin


def credentials(scheme: str, key: str) -> dict[str, str]:
    """The header that carries ``key`` for an agent requiring ``scheme``."""
    return {"Authorization": f"Bearer {key}"} if scheme == BEARER else {"X-API-Key": key}


@pytest.fixture(params=[API_KEY, BEARER])
def keyed(request: pytest.FixtureRequest, seller: Agent) -> Agent:
    """The seller, requiring an API key or a bearer token."""
    return tune(seller, inbound_auth=request.param)


# --- No valid key: 401 before anything runs -------------------------------------------------


@pytest.mark.parametrize(
    ("method", "version"),
    [("SendMessage", "1.0"), ("message/send", None), ("GetTask", "1.0"), ("ListTasks", "1.0")],
)
def test_a_call_without_a_key_is_refused_before_anything_is_written(
    seller_endpoint: Endpoint, keyed: Agent, method: str, version: str | None
) -> None:
    params = (
        {"id": "some-task"} if method == "GetTask" else {} if method == "ListTasks" else message(proposal())
    )

    response = call(seller_endpoint.url, method, params, version=version)

    assert response.status_code == 401
    if keyed.inbound_auth == BEARER:
        expected = "This agent requires a bearer token: Authorization: Bearer <key>."
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="globex/idris"'
    else:
        expected = "This agent requires an API key in the X-API-Key header."
        assert "WWW-Authenticate" not in response.headers
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": INVALID_REQUEST, "message": expected},
    }
    assert counts() == NOTHING
    assert inbound_contexts(keyed) == {}


def test_the_refusal_comes_before_the_body_is_parsed(seller_endpoint: Endpoint, keyed: Agent) -> None:
    response = seller_endpoint.post(b"{not json")

    # Not the SDK's -32700: nothing read the body.
    assert refusal(response, status=401, code=INVALID_REQUEST).startswith("This agent requires")


def test_the_card_needs_no_key(seller_endpoint: Endpoint, keyed: Agent) -> None:
    assert httpx.get(seller_endpoint.card_url, timeout=TIMEOUT).status_code == 200


def not_a_key(agent: Agent, other: Agent) -> dict[str, str]:
    """Credentials that are no live key of ``agent``, by what is wrong with them."""
    _, real = inbound_key_create(agent=agent, name="Real holder")
    prefix, _, secret = real.partition(".")
    _, others = inbound_key_create(agent=other, name="Another agent's holder")
    return {
        "wrong secret": f"{prefix}.{secret[:-2]}xx",
        "unknown prefix": f"{'0' * 12}.{secret}",
        "no secret": prefix,
        "not a key at all": "hunter2",
        "another agent's key": others,
    }


@pytest.mark.parametrize(
    "what", ["wrong secret", "unknown prefix", "no secret", "not a key at all", "another agent's key"]
)
def test_a_key_that_is_not_a_live_key_of_the_agent_is_refused(
    seller_endpoint: Endpoint, keyed: Agent, agent: Agent, what: str
) -> None:
    presented = not_a_key(keyed, agent)[what]

    response = call(
        seller_endpoint.url,
        "SendMessage",
        message(proposal()),
        headers=credentials(keyed.inbound_auth, presented),
    )

    if keyed.inbound_auth == BEARER:
        assert refusal(response, status=401, code=INVALID_REQUEST) == (
            "The bearer token is not valid for this agent."
        )
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="globex/idris", error="invalid_token"'
    else:
        assert (
            refusal(response, status=401, code=INVALID_REQUEST) == "The API key is not valid for this agent."
        )
    assert counts() == NOTHING


def test_a_key_in_the_other_schemes_place_is_no_key(seller_endpoint: Endpoint, keyed: Agent) -> None:
    _, key = inbound_key_create(agent=keyed, name="Holder")
    elsewhere = BEARER if keyed.inbound_auth == API_KEY else API_KEY

    response = call(
        seller_endpoint.url, "SendMessage", message(proposal()), headers=credentials(elsewhere, key)
    )

    assert refusal(response, status=401, code=INVALID_REQUEST).startswith("This agent requires")
    assert counts() == NOTHING


def test_the_keys_read_with_the_agent_are_whole_keys(keyed: Agent) -> None:
    """The edge reads the presented keys with the agent in one query; a field that query does not
    read is read from the key's row when asked for, never a default."""
    mine, key = inbound_key_create(agent=keyed, name="Holder")
    headers = [(b"x-api-key", key.encode()), (b"authorization", f"Bearer {key}".encode())]
    scope = {"type": "http", "method": "POST", "headers": headers, "client": ("127.0.0.1", 50000)}

    found, live_keys = async_to_sync(agent_at)(keyed.tenant.slug, keyed.slug, scope)

    assert found == keyed
    assert list(live_keys) == [mine.prefix]
    assert (live_keys[mine.prefix].pk, live_keys[mine.prefix].name) == (mine.pk, "Holder")


def test_with_a_key_in_each_place_the_one_in_the_agents_place_names_the_caller(
    seller_endpoint: Endpoint, keyed: Agent
) -> None:
    """Both are live keys of the agent, read in one lookup: the one in the other place is ignored."""
    mine, key = inbound_key_create(agent=keyed, name="Holder")
    _, other = inbound_key_create(agent=keyed, name="Other holder")
    elsewhere = BEARER if keyed.inbound_auth == API_KEY else API_KEY
    headers = {**credentials(keyed.inbound_auth, key), **credentials(elsewhere, other)}

    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal()), headers=headers))

    assert A2ATask.across_tenants.get(task_id=task["id"]).owner == f"{keyed.pk}|key:{mine.prefix}"


def test_a_revoked_key_is_refused(seller_endpoint: Endpoint, keyed: Agent) -> None:
    row, key = inbound_key_create(agent=keyed, name="Holder")
    headers = credentials(keyed.inbound_auth, key)
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800)), headers=headers))
    inbound_key_revoke(key=row)
    before = counts()

    follow_up = call(seller_endpoint.url, "SendMessage", message(proposal(850), task=task), headers=headers)
    read = call(seller_endpoint.url, "GetTask", {"id": task["id"]}, headers=headers)

    for response in (follow_up, read):
        assert refusal(response, status=401, code=INVALID_REQUEST).endswith("is not valid for this agent.")
    assert counts() == before
    revoked_at = InboundKey.across_tenants.get(pk=row.pk).revoked_at
    assert revoked_at is not None
    assert inbound_key_revoke(key=row).revoked_at == revoked_at  # revoking again changes nothing


# --- A valid key: served, and its tasks are its own -----------------------------------------


def sdk_send(endpoint: Endpoint, headers: dict[str, str]) -> Task:
    """A first move sent with a2a-sdk's client over an httpx client carrying ``headers``."""
    card = endpoint.card()

    async def send() -> Task:
        async with httpx.AsyncClient(timeout=TIMEOUT, headers=headers) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            request = SendMessageRequest(message=user_message(proposal(800)))
            [event] = [event async for event in client.send_message(request)]
            return event.task

    return asyncio.run(send())


def test_a_valid_key_is_served_and_owns_its_task(seller_endpoint: Endpoint, keyed: Agent) -> None:
    row, key = inbound_key_create(agent=keyed, name="Buyer Ltd")

    task = sdk_send(seller_endpoint, credentials(keyed.inbound_auth, key))

    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert A2ATask.across_tenants.get(task_id=task.id).owner == f"{keyed.pk}|key:{row.prefix}"
    row.refresh_from_db()
    assert row.last_used_at is not None
    # Written at most once a minute: the next call leaves it.
    sdk_send(seller_endpoint, credentials(keyed.inbound_auth, key))
    assert InboundKey.across_tenants.get(pk=row.pk).last_used_at == row.last_used_at
    # Shown once as <prefix>.<secret>; only a keyed hash of the secret is kept.
    prefix, _, secret = key.partition(".")
    assert prefix == row.prefix
    assert row.secret_hash.startswith("hmac-sha256$")
    assert secret not in row.secret_hash


def test_two_keys_cannot_reach_each_others_tasks(seller_endpoint: Endpoint, keyed: Agent) -> None:
    _, mine = inbound_key_create(agent=keyed, name="Buyer A")
    _, theirs = inbound_key_create(agent=keyed, name="Buyer B")
    a, b = credentials(keyed.inbound_auth, mine), credentials(keyed.inbound_auth, theirs)
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800)), headers=a))
    stored, before = call(seller_endpoint.url, "GetTask", {"id": task["id"]}, headers=a).json(), counts()

    assert_out_of_reach(seller_endpoint.url, task, headers=b)

    assert counts() == before
    assert call(seller_endpoint.url, "GetTask", {"id": task["id"]}, headers=a).json() == stored
    listing = call(seller_endpoint.url, "ListTasks", {}, headers=a).json()["result"]
    assert [t["id"] for t in listing["tasks"]] == [task["id"]]


def assert_out_of_reach(url: str, task: dict[str, Any], **caller: Any) -> None:
    """``caller`` (``call``'s headers / address) can neither read, list, cancel nor continue ``task``."""
    read = call(url, "GetTask", {"id": task["id"]}, **caller)
    assert refusal(read, status=200, code=TASK_NOT_FOUND) == "Task not found"
    follow_up = call(url, "SendMessage", message(proposal(850), task=task), **caller)
    assert refusal(follow_up, status=200, code=TASK_NOT_FOUND) == f"Task {task['id']} not found"
    legacy = call(url, "tasks/get", {"id": task["id"]}, version=None, **caller)
    assert refusal(legacy, status=200, code=TASK_NOT_FOUND) == "Task not found"
    listing = call(url, "ListTasks", {}, **caller).json()["result"]
    assert listing["tasks"] == []
    cancel = call(url, "CancelTask", {"id": task["id"]}, **caller)
    assert cancel.json()["error"]["code"] in (TASK_NOT_FOUND, -32004)  # -32004: anonymous may not cancel


# --- Anonymous counterparties: one partition per address ------------------------------------


def test_two_anonymous_counterparties_cannot_reach_each_others_tasks(seller_endpoint: Endpoint) -> None:
    task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))
    before = counts()

    assert_out_of_reach(seller_endpoint.url, task, address="127.0.0.2")

    assert counts() == before
    # Its own counterparty, from the same address, still has it.
    assert task_of(call(seller_endpoint.url, "SendMessage", message(proposal(850), task=task)))


def test_a_trusted_proxy_header_tells_anonymous_counterparties_apart(
    behind_a_proxy: str, seller_endpoint: Endpoint, seller: Agent
) -> None:
    url = endpoint_on(behind_a_proxy, seller)
    first, second = {TRUSTED_HEADER: "203.0.113.1"}, {TRUSTED_HEADER: "203.0.113.2"}
    task = task_of(call(url, "SendMessage", message(proposal(800)), headers=first))

    assert_out_of_reach(url, task, headers=second)
    assert task_of(call(url, "SendMessage", message(proposal(850), task=task), headers=first))
    # Where the header is not named trusted, it is anyone's to send and tells nobody apart.
    here = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800)), headers=first))
    assert call(seller_endpoint.url, "GetTask", {"id": here["id"]}, headers=second).json()["result"]["id"]


def test_a_key_names_its_caller_on_an_anonymous_agent_too(seller_endpoint: Endpoint, seller: Agent) -> None:
    row, key = inbound_key_create(agent=seller, name="Regular buyer")
    task = task_of(
        call(seller_endpoint.url, "SendMessage", message(proposal(800)), headers={"X-API-Key": key})
    )

    # The key's tasks follow the key from any address; without it, the caller is anonymous.
    read = call(
        seller_endpoint.url, "GetTask", {"id": task["id"]}, headers={"X-API-Key": key}, address="127.0.0.2"
    )
    assert read.json()["result"]["id"] == task["id"]
    assert A2ATask.across_tenants.get(task_id=task["id"]).owner == f"{seller.pk}|key:{row.prefix}"
    assert_out_of_reach(seller_endpoint.url, task)
    # A credential that is no key of the agent is ignored there, not refused.
    ignored = call(seller_endpoint.url, "SendMessage", message(proposal(800)), headers={"X-API-Key": "nope"})
    assert task_of(ignored)["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


# --- What tells an anonymous counterparty apart ---------------------------------------------


def scope(client: tuple[str, int] | None, **headers: str) -> dict[str, Any]:
    """The ASGI scope of an HTTP request from ``client`` with ``headers``."""
    return {
        "type": "http",
        "client": client,
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
    }


@pytest.mark.parametrize(
    ("trusted", "request_scope", "address"),
    [
        pytest.param([], scope(("203.0.113.9", 5000)), "203.0.113.9", id="the-peer"),
        pytest.param(
            [], scope(("10.0.0.1", 5000), **{"X-Real-IP": "203.0.113.9"}), "10.0.0.1", id="untrusted"
        ),
        pytest.param(
            ["X-Real-IP"],
            scope(("10.0.0.1", 5000), **{"X-Real-IP": "203.0.113.9"}),
            "203.0.113.9",
            id="trusted",
        ),
        pytest.param(
            ["X-Forwarded-For"],
            scope(("10.0.0.1", 5000), **{"X-Forwarded-For": "198.51.100.7, 203.0.113.9"}),
            "203.0.113.9",
            id="list-last-entry",
        ),
        pytest.param(
            ["CF-Connecting-IP", "X-Real-IP"],
            scope(("10.0.0.1", 5000), **{"X-Real-IP": "203.0.113.9"}),
            "203.0.113.9",
            id="first-present",
        ),
        pytest.param([], scope(("::FFFF:7f00:1", 5000)), "127.0.0.1", id="ipv4-mapped"),
        pytest.param([], scope(("2001:DB8::0:1", 5000)), "2001:db8::1", id="one-spelling"),
    ],
)
def test_client_address(trusted: list[str], request_scope: dict[str, Any], address: str) -> None:
    with override_settings(A2A_TRUSTED_PROXY_HEADERS=trusted):
        assert client_address(request_scope) == address


def test_no_address_is_refused_rather_than_shared() -> None:
    with pytest.raises(Unauthenticated) as raised:
        client_address(scope(None))

    assert raised.value.status == 400
    assert raised.value.message == (
        "The caller's address is unknown, so anonymous callers cannot be told apart; "
        "call with a key of this agent."
    )


def test_an_issued_key_belongs_to_its_agent(seller: Agent, other_tenant: Tenant) -> None:
    row, key = inbound_key_create(agent=seller, name="Buyer Ltd")

    assert (row.tenant_id, row.agent_id, row.name) == (other_tenant.pk, seller.pk, "Buyer Ltd")
    assert len(row.prefix) == 12
    assert key.startswith(f"{row.prefix}.")
    assert row.revoked_at is None


def test_an_address_is_vouched_for_only_with_its_digest(live_stack: LiveStack, seller: Agent) -> None:
    """A gateway of ours names the caller it acts for in X-Parley-Client (the MCP gateway does); a
    value without its keyed digest, or with another address's, names nobody: the peer is the caller."""
    endpoint = endpoint_on(live_stack.url, seller)
    direct = task_of(call(endpoint, "SendMessage", message(proposal(800))))
    forged = [
        "10.9.9.9",
        "10.9.9.9 " + "0" * 64,
        "10.9.9.9 " + vouch_for("10.9.9.8").split(" ")[1],
    ]
    tasks = [
        task_of(call(endpoint, "SendMessage", message(proposal(800)), headers={VOUCHED_CLIENT_HEADER: value}))
        for value in forged
    ]
    vouched = task_of(
        call(
            endpoint,
            "SendMessage",
            message(proposal(800)),
            headers={VOUCHED_CLIENT_HEADER: vouch_for("10.9.9.9")},
        )
    )
    owners = dict(A2ATask.across_tenants.values_list("task_id", "owner"))
    assert {owners[task["id"]] for task in tasks} == {owners[direct["id"]]}
    assert owners[vouched["id"]] != owners[direct["id"]]
