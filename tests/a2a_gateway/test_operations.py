"""The task operations at A2A 1.0 and on the 0.3 wire: GetTask, ListTasks, CancelTask, the extended card.

a2a-sdk's client speaks each version (0.3 from a card that offers only 0.3);
raw JSON-RPC checks the error codes. Cancelling and listing run against two
gateways served from this process (as two web processes). A cancel that comes
while a turn runs is made to come then by an evaluation hook that holds the
turn (:class:`HeldHook`).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask
from agents.models import Agent
from negotiations.models import Negotiation, Settlement
from tests.a2a_gateway.conftest import Endpoint, counts, move, proposal, run, user_message
from tests.a2a_gateway.servers import HeldHook, InProcessGateway, on_wire, web_process
from tests.conftest import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]


@pytest.fixture
def gateways(settings: Any) -> Iterator[tuple[InProcessGateway, ...]]:
    """Two gateways served from this process on the test database, each with its own request
    handler, as two web processes have."""
    with InProcessGateway() as first, InProcessGateway() as second:
        settings.PUBLIC_BASE_URL = first.origin
        yield first, second


def endpoint_at(origin: str, agent: Agent) -> Endpoint:
    return Endpoint(agent=agent, url=f"{origin}/a2a/{agent.tenant.slug}/{agent.slug}")


def client_call(card: AgentCard, call: Any) -> Any:
    """``await call(client)`` with a2a-sdk's non-streaming client built from ``card``."""

    async def main(http: httpx.AsyncClient) -> Any:
        return await call(ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card))

    return run(main)


def cancel(card: AgentCard, task_id: str) -> Task:
    return client_call(card, lambda client: client.cancel_task(CancelTaskRequest(id=task_id)))


def get(card: AgentCard, task_id: str, **request: Any) -> Task:
    return client_call(card, lambda client: client.get_task(GetTaskRequest(id=task_id, **request)))


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def data_of(message: Any) -> dict[str, Any]:
    [part] = message.parts
    return MessageToDict(part.data)


def settled(endpoint: Endpoint) -> Task:
    first = endpoint.send(user_message(proposal(800)))
    offer = data_of(first.history[-1])
    accept = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )
    return endpoint.send(user_message(accept, task=first))


# CancelTask


@pytest.mark.parametrize("wire", WIRES)
def test_a_cancel_mid_turn_leaves_the_task_canceled_without_the_reply(
    gateways: tuple[InProcessGateway, ...], seller: Agent, wire: str
) -> None:
    endpoint = endpoint_at(gateways[0].origin, seller)
    card = on_wire(endpoint.card(), wire)
    opening = user_message(proposal(800))
    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        seller.evaluation_url = hook.url
        seller.save()
        sent = pool.submit(endpoint.send, opening, card=card)
        wait_until(hook.entered.is_set, what="the turn to reach the evaluation hook")
        task_id = A2ATask.across_tenants.get().task_id

        canceled = cancel(card, task_id)

        assert hook.answered == 0  # the cancel was answered while the turn still ran
        hook.release.set()
        answered = sent.result()

    assert canceled.status.state == answered.status.state == TaskState.TASK_STATE_CANCELED
    for task in (canceled, answered, get(card, task_id)):
        assert [m.message_id for m in task.history] == [opening.message_id]
        assert not task.artifacts
    stored = A2ATask.across_tenants.get()
    assert stored.state == "TASK_STATE_CANCELED"
    assert [m["role"] for m in stored.data["history"]] == ["ROLE_USER"]
    assert_negotiation_canceled(turns=2)


def assert_negotiation_canceled(*, turns: int) -> None:
    """The seller's negotiation ended as the canceled Task does: declined, ended by their move."""
    negotiation = Negotiation.across_tenants.get()
    assert negotiation.task_state == "canceled"
    assert negotiation.status == Negotiation.Status.SETTLED
    assert negotiation.parked_question == ""
    # Our reply was decided and recorded, though it never reached the Task.
    assert negotiation.turns.count() == turns
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    assert (settlement.outcome, settlement.basis, settlement.ended_by) == ("declined", "state", "theirs")
    assert settlement.reason == "Task ended as canceled."


def test_a_cancel_on_another_process_mid_turn_keeps_the_reply_out_too(
    gateways: tuple[InProcessGateway, ...], seller: Agent
) -> None:
    """The turn runs behind one gateway, the cancel comes to the other: the first sees the task
    canceled once its turn is done, and leaves its reply out."""
    running, other = (endpoint_at(g.origin, seller) for g in gateways)
    card = running.card()
    opening = user_message(proposal(800))
    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        seller.evaluation_url = hook.url
        seller.save()
        sent = pool.submit(running.send, opening, card=card)
        wait_until(hook.entered.is_set, what="the turn to reach the evaluation hook")
        task_id = A2ATask.across_tenants.get().task_id

        canceled = other.rpc("CancelTask", {"id": task_id}).json()["result"]

        assert hook.answered == 0
        hook.release.set()
        answered = sent.result()

    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert answered.status.state == TaskState.TASK_STATE_CANCELED
    assert [m.role for m in answered.history] == [Role.ROLE_USER]
    assert not answered.artifacts
    stored = A2ATask.across_tenants.get()
    assert stored.state == "TASK_STATE_CANCELED"
    assert [m["role"] for m in stored.data["history"]] == ["ROLE_USER"]
    assert_negotiation_canceled(turns=2)


@pytest.mark.parametrize("wire", WIRES)
def test_cancelling_a_task_waiting_for_input_ends_it_and_its_negotiation(
    gateways: tuple[InProcessGateway, ...], seller: Agent, wire: str
) -> None:
    endpoint = endpoint_at(gateways[0].origin, seller)
    card = on_wire(endpoint.card(), wire)
    first = endpoint.send(user_message(proposal(800)), card=card)
    assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

    canceled = cancel(card, first.id)

    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert [m.role for m in canceled.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    assert get(card, first.id).status.state == TaskState.TASK_STATE_CANCELED
    negotiation = Negotiation.across_tenants.get()
    assert (negotiation.task_state, negotiation.status) == ("canceled", Negotiation.Status.SETTLED)
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    # Our counter was the last move on the Task.
    assert (settlement.outcome, settlement.basis, settlement.ended_by) == ("declined", "state", "ours")
    # A canceled task takes no more messages.
    before = counts()
    late = endpoint.rpc(
        "SendMessage",
        {"message": MessageToDict(user_message(move("propose", "Wait!"), task=first))},
    )
    assert error_of(late) == {
        "code": -32004,
        "message": f"Task {first.id} is in terminal state: TASK_STATE_CANCELED",
        "data": error_of(late)["data"],
    }
    assert counts() == before


@pytest.mark.parametrize(("method", "version"), [("CancelTask", "1.0"), ("tasks/cancel", None)])
def test_cancelling_a_finished_task_is_task_not_cancelable(
    gateways: tuple[InProcessGateway, ...], seller: Agent, method: str, version: str | None
) -> None:
    endpoint = endpoint_at(gateways[0].origin, seller)
    task = settled(endpoint)
    before = counts()

    error = error_of(endpoint.rpc(method, {"id": task.id}, version=version))

    assert (error["code"], error["message"]) == (-32002, "Task cannot be canceled")
    assert A2ATask.across_tenants.get().state == "TASK_STATE_COMPLETED"
    assert Settlement.across_tenants.get().outcome == "agreed"
    assert counts() == before


@pytest.mark.parametrize(("method", "version"), [("CancelTask", "1.0"), ("tasks/cancel", None)])
def test_cancelling_an_unknown_task_is_task_not_found(
    gateways: tuple[InProcessGateway, ...], seller: Agent, method: str, version: str | None
) -> None:
    endpoint = endpoint_at(gateways[0].origin, seller)

    error = error_of(endpoint.rpc(method, {"id": "no-such-task"}, version=version))

    assert (error["code"], error["message"]) == (-32001, "Task not found")


# GetTask and ListTasks


@pytest.mark.parametrize("wire", WIRES)
def test_get_task_has_the_answer_last_in_history_and_as_the_reply_artifact(
    seller_endpoint: Endpoint, wire: str
) -> None:
    card = on_wire(seller_endpoint.card(), wire)
    sent = seller_endpoint.send(user_message(proposal(800)), card=card)

    task = get(card, sent.id)
    last = get(card, sent.id, history_length=1)

    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    reply = task.history[-1]
    assert reply.role == Role.ROLE_AGENT
    [artifact] = task.artifacts
    assert (artifact.artifact_id, artifact.name, list(artifact.parts)) == (
        "negotiator:reply",
        "reply",
        list(reply.parts),
    )
    assert list(last.history) == [reply]


def test_list_tasks_gives_the_callers_tasks_newest_first(
    gateways: tuple[InProcessGateway, ...], seller: Agent
) -> None:
    endpoint = endpoint_at(gateways[0].origin, seller)
    older = endpoint.send(user_message(proposal(800)))
    newer = settled(endpoint)
    card = endpoint.card()

    page = client_call(card, lambda client: client.list_tasks(ListTasksRequest(include_artifacts=True)))
    completed = client_call(
        card, lambda client: client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
    )

    assert [t.id for t in page.tasks] == [newer.id, older.id]
    assert page.total_size == 2
    assert [a.artifact_id for a in page.tasks[0].artifacts] == [
        "negotiator:reply",
        "negotiator:negotiation-outcome",
    ]
    assert [t.id for t in completed.tasks] == [newer.id]
    assert not completed.tasks[0].artifacts  # left out unless asked for (A2A spec §3.1.4)


def test_the_0_3_wire_has_no_task_list(seller_endpoint: Endpoint) -> None:
    error = error_of(seller_endpoint.rpc("tasks/list", {}, version=None))

    assert error["code"] == -32601


# What the card does not offer


@pytest.mark.parametrize(
    ("method", "version"),
    [("GetExtendedAgentCard", "1.0"), ("agent/getAuthenticatedExtendedCard", None)],
)
def test_the_extended_card_the_card_does_not_offer_is_an_unsupported_operation(
    seller_endpoint: Endpoint, method: str, version: str | None
) -> None:
    """A2A spec §3.3.4: a card without ``capabilities.extendedAgentCard`` answers
    UnsupportedOperationError (-32004); -32007 is for one that offers it unconfigured."""
    assert not seller_endpoint.card().capabilities.extended_agent_card

    error = error_of(seller_endpoint.rpc(method, {}, version=version))

    assert (error["code"], error["message"]) == (
        -32004,
        "The agent does not support authenticated extended cards",
    )


# Another web process


@pytest.mark.parametrize("wire", WIRES)
def test_a_follow_up_on_another_web_process_finds_its_task(
    seller_endpoint: Endpoint, live_stack: LiveStack, seller: Agent, wire: str
) -> None:
    card = on_wire(seller_endpoint.card(), wire)
    first = seller_endpoint.send(user_message(proposal(800)), card=card)
    offer = data_of(first.history[-1])
    accept = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )
    # Only the taskId: the other process finds the context from the stored task.
    follow_up = user_message(accept, task=first)
    follow_up.ClearField("context_id")

    with web_process(live_stack) as other_origin:
        other = endpoint_at(other_origin, seller)
        task = other.send(follow_up, card=on_wire(other.card(), wire))

    assert (task.id, task.context_id) == (first.id, first.context_id)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT] * 2
    assert Negotiation.across_tenants.get().turns.count() == 4
    assert Settlement.across_tenants.get().outcome == "agreed"
