"""Each agent's Tasks are invisible at every other endpoint and to every other caller."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from a2a.auth.user import User
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_task
from a2a.server.context import ServerCallContext
from a2a.types import GetTaskRequest, ListTasksRequest, ListTasksResponse, Task, TaskState
from a2a.utils.errors import TaskNotFoundError
from asgiref.sync import sync_to_async
from django.db import connections

from a2a_gateway.app import GatewayHandler
from a2a_gateway.cards import capability_card
from a2a_gateway.executor import NegotiationExecutor
from a2a_gateway.store import DjangoTaskStore
from agents.models import Agent
from parley.models import Tenant
from tests.a2a_gateway.conftest import Endpoint, counts, endpoint_of, proposal, run, user_message
from tests.conftest import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

TASK_NOT_FOUND = -32001


@pytest.fixture
def namesake(tenant: Tenant) -> Agent:
    """An agent with the seller's slug in another tenant (``acme/idris`` beside ``globex/idris``)."""
    return Agent.objects.create(tenant=tenant, slug="idris", name="Idris in Acme", terms="amount, currency")


@pytest.fixture(params=["agent", "namesake"])
def stranger(request: pytest.FixtureRequest, live_stack: LiveStack) -> Endpoint:
    """Another agent's endpoint: one in another tenant, and one that shares the seller's slug."""
    return endpoint_of(live_stack, request.getfixturevalue(request.param))


def stored_state(endpoint: Endpoint, task: Task) -> dict[str, Any]:
    """The task as its own agent serves it (``GetTask``), as JSON."""
    response = endpoint.rpc("GetTask", {"id": task.id})
    assert response.status_code == 200
    return dict(response.json()["result"])


@pytest.mark.parametrize("with_context", [True, False], ids=["task-and-context", "task-only"])
def test_another_agents_task_is_not_found(
    seller_endpoint: Endpoint, stranger: Endpoint, with_context: bool
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = stored_state(seller_endpoint, task), counts()
    message = {
        "messageId": "m-x",
        "role": "ROLE_USER",
        "taskId": task.id,
        "parts": [{"data": proposal(900)}],
    }
    if with_context:
        message["contextId"] = task.context_id

    response = stranger.rpc("SendMessage", {"message": message})

    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == TASK_NOT_FOUND
    assert error["message"] == f"Task {task.id} not found"
    assert counts() == before_counts
    assert stored_state(seller_endpoint, task) == before
    assert before["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_another_agents_task_is_not_found_by_the_sdk_client(
    seller_endpoint: Endpoint, live_stack: LiveStack, agent: Agent
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    stranger = endpoint_of(live_stack, agent)
    card, before_counts = stranger.card(), counts()

    with pytest.raises(TaskNotFoundError, match=f"^Task {task.id} not found$"):
        stranger.send(user_message(proposal(900), task=task), card=card)

    async def get_task(http: httpx.AsyncClient) -> Task:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        return await client.get_task(GetTaskRequest(id=task.id))

    with pytest.raises(TaskNotFoundError):
        run(get_task)
    assert counts() == before_counts


def test_reading_another_agents_task_is_not_found(seller_endpoint: Endpoint, stranger: Endpoint) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before = stored_state(seller_endpoint, task)

    response = stranger.rpc("GetTask", {"id": task.id})

    assert response.json()["error"]["code"] == TASK_NOT_FOUND
    assert response.json()["error"]["message"] == "Task not found"
    assert stored_state(seller_endpoint, task) == before


# --- An anonymous counterparty has a partition of its own at each agent ----------------------


def test_an_anonymous_caller_lists_its_own_tasks(seller_endpoint: Endpoint) -> None:
    sent = {seller_endpoint.send(user_message(proposal(amount))).id for amount in (800, 850)}

    listing = seller_endpoint.rpc("ListTasks", {})
    over_0_3 = seller_endpoint.rpc("tasks/list", {}, version=None)

    assert {t["id"] for t in listing.json()["result"]["tasks"]} == sent
    # A2A 0.3 has no listing method at all.
    assert over_0_3.json()["error"] == {"code": -32601, "message": "Method not found"}


@pytest.mark.parametrize(("method", "version"), [("CancelTask", "1.0"), ("tasks/cancel", None)])
def test_cancelling_at_another_agent_finds_no_task(
    seller_endpoint: Endpoint, live_stack: LiveStack, agent: Agent, method: str, version: str | None
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = stored_state(seller_endpoint, task), counts()

    response = endpoint_of(live_stack, agent).rpc(method, {"id": task.id}, version=version)

    assert response.status_code == 200
    assert response.json()["error"]["code"] == TASK_NOT_FOUND
    assert stored_state(seller_endpoint, task) == before
    assert counts() == before_counts
    assert before["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize(("method", "version"), [("GetTask", "1.0"), ("tasks/get", None)])
def test_anonymous_caller_still_reads_a_task_by_id(
    seller_endpoint: Endpoint, method: str, version: str | None
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))

    result = seller_endpoint.rpc(method, {"id": task.id}, version=version).json()["result"]

    assert result["id"] == task.id
    assert result["status"]["state"] in ("TASK_STATE_INPUT_REQUIRED", "input-required")


class Caller(User):
    """An authenticated caller, as per-caller auth will present one."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def test_an_authenticated_caller_lists_only_its_own_tasks_with_the_agent(seller: Agent, agent: Agent) -> None:
    mine = ServerCallContext(state={"agent": seller}, user=Caller("buyer-a"))
    others = [
        ServerCallContext(state={"agent": seller}, user=Caller("buyer-b")),
        ServerCallContext(state={"agent": seller}),
        ServerCallContext(state={"agent": agent}, user=Caller("buyer-a")),
    ]

    async def scenario() -> ListTasksResponse:
        store = DjangoTaskStore()
        handler = GatewayHandler(
            agent_executor=NegotiationExecutor(), task_store=store, agent_card=capability_card()
        )
        for index, context in enumerate([mine, *others]):
            await store.save(
                new_task(f"task-{index}", f"ctx-{index}", TaskState.TASK_STATE_INPUT_REQUIRED), context
            )
        try:
            return await handler.on_list_tasks(ListTasksRequest(), mine)
        finally:
            await handler.aclose()
            # The async ORM ran in asgiref's worker thread: close its connection, or the test
            # database cannot be dropped.
            await sync_to_async(connections.close_all)()

    listing = asyncio.run(scenario())

    assert [t.id for t in listing.tasks] == ["task-0"]
    assert listing.total_size == 1
