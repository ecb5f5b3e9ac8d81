"""One agent's Tasks are invisible at every other agent's endpoint: its task id there is "not found"."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, Task
from a2a.utils.errors import TaskNotFoundError

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


@pytest.mark.parametrize("method", ["GetTask", "CancelTask"])
def test_reading_or_cancelling_another_agents_task_is_not_found(
    seller_endpoint: Endpoint, stranger: Endpoint, method: str
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before = stored_state(seller_endpoint, task)

    response = stranger.rpc(method, {"id": task.id})

    assert response.json()["error"]["code"] == TASK_NOT_FOUND
    assert response.json()["error"]["message"] == "Task not found"
    assert stored_state(seller_endpoint, task) == before


def test_listing_shows_only_the_agents_own_tasks(seller_endpoint: Endpoint, stranger: Endpoint) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))

    own = seller_endpoint.rpc("ListTasks", {}).json()["result"]
    elsewhere = stranger.rpc("ListTasks", {}).json()["result"]

    assert [t["id"] for t in own["tasks"]] == [task.id]
    assert elsewhere.get("tasks", []) == []
