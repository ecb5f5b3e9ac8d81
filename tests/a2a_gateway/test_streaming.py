"""Streaming over SSE: SendStreamingMessage (0.3 ``message/stream``), SubscribeToTask (``tasks/resubscribe``).

a2a-sdk's client drives the live stack at 1.0 and, from a card that offers only
0.3, through its compat transport; raw HTTP checks what comes before a stream.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    GetTaskRequest,
    Message,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask
from negotiations.models import Negotiation
from negotiations.wire import decode_move
from tests.a2a_gateway.conftest import Endpoint, counts, move, proposal, run, user_message
from tests.a2a_gateway.servers import HeldHook, on_wire
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]


def shape(event: StreamResponse) -> tuple[str, ...]:
    """What an event is: ("task", state), ("status", state, "message" or ""), ("artifact", id)."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        return ("task", TaskState.Name(event.task.status.state))
    if kind == "status_update":
        status = event.status_update.status
        return ("status", TaskState.Name(status.state), "message" if status.HasField("message") else "")
    if kind == "artifact_update":
        return ("artifact", event.artifact_update.artifact.artifact_id)
    return (str(kind),)


def stream(endpoint: Endpoint, message: Message, wire: str) -> list[StreamResponse]:
    """Send ``message`` with a2a-sdk's streaming client on ``wire``; every event of the stream."""
    card = on_wire(endpoint.card(), wire)

    async def call(http: httpx.AsyncClient) -> list[StreamResponse]:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        return [event async for event in client.send_message(SendMessageRequest(message=message))]

    return run(call)


def get_task(endpoint: Endpoint, task_id: str, wire: str) -> Task:
    card = on_wire(endpoint.card(), wire)

    async def call(http: httpx.AsyncClient) -> Task:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        return await client.get_task(GetTaskRequest(id=task_id))

    return run(call)


def data_of(message: Any) -> dict[str, Any]:
    [part] = message.parts
    return MessageToDict(part.data)


@pytest.mark.parametrize("wire", WIRES)
def test_a_move_streams_the_task_then_the_reply_then_the_state(seller_endpoint: Endpoint, wire: str) -> None:
    events = stream(seller_endpoint, user_message(proposal(800)), wire)

    assert [shape(e) for e in events] == [
        ("task", "TASK_STATE_SUBMITTED"),
        ("status", "TASK_STATE_WORKING", ""),
        ("status", "TASK_STATE_WORKING", "message"),
        ("artifact", "negotiator:reply"),
        ("status", "TASK_STATE_INPUT_REQUIRED", ""),
    ]
    reply = events[2].status_update.status.message
    counter = decode_move(data_of(reply))
    assert counter is not None
    assert (counter.action, counter.terms) == ("propose", {"amount": 1358, "currency": "EUR"})
    artifact = events[3].artifact_update.artifact
    assert (artifact.name, list(artifact.parts)) == ("reply", list(reply.parts))
    # The same answer where a polling client reads it: last in history, and the artifact.
    task = get_task(seller_endpoint, events[0].task.id, wire)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.history[-1] == reply
    assert [(a.artifact_id, list(a.parts)) for a in task.artifacts] == [
        ("negotiator:reply", list(reply.parts))
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_a_follow_up_streams_from_the_task_to_its_final_state(seller_endpoint: Endpoint, wire: str) -> None:
    first = stream(seller_endpoint, user_message(proposal(800)), wire)
    task = first[0].task
    offer = data_of(first[2].status_update.status.message)
    accept = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )

    events = stream(seller_endpoint, user_message(accept, task=task), wire)

    # The stream begins with the Task (A2A spec §3.1.2), as stored once the message was taken.
    assert [shape(e) for e in events] == [
        ("task", "TASK_STATE_WORKING"),
        ("status", "TASK_STATE_WORKING", ""),
        ("status", "TASK_STATE_WORKING", "message"),
        ("artifact", "negotiator:reply"),
        ("artifact", "negotiator:negotiation-outcome"),
        ("status", "TASK_STATE_COMPLETED", ""),
    ]
    assert events[0].task.id == task.id
    assert events[0].task.history[-1].parts == user_message(accept, task=task).parts
    final = get_task(seller_endpoint, task.id, wire)
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert [a.artifact_id for a in final.artifacts] == ["negotiator:reply", "negotiator:negotiation-outcome"]
    reply = final.history[-1]
    assert list(final.artifacts[0].parts) == list(reply.parts)
    assert decode_move(data_of(reply)) is not None
    assert Negotiation.across_tenants.get().settlement.outcome == "agreed"


@pytest.mark.parametrize("wire", WIRES)
def test_a_subscriber_mid_turn_gets_the_task_then_the_rest(
    seller_endpoint: Endpoint, seller: Any, wire: str
) -> None:
    card = on_wire(seller_endpoint.card(), wire)
    with HeldHook() as hook, ThreadPoolExecutor(1) as pool:
        seller.evaluation_url = hook.url
        seller.save()
        sent = pool.submit(seller_endpoint.send, user_message(proposal(800)))
        wait_until(hook.entered.is_set, what="the turn to reach the evaluation hook")
        task_id = A2ATask.across_tenants.get().task_id

        async def subscribe(http: httpx.AsyncClient) -> list[StreamResponse]:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
            events = client.subscribe(SubscribeToTaskRequest(id=task_id))
            seen = [await anext(events)]
            hook.release.set()
            async for event in events:
                seen.append(event)
                if shape(event) == ("status", "TASK_STATE_INPUT_REQUIRED", ""):
                    break
            await events.aclose()
            return seen

        events = run(subscribe)
        answered = sent.result()

    assert shape(events[0]) == ("task", "TASK_STATE_WORKING")
    assert events[0].task.id == task_id
    assert [shape(e) for e in events[1:]] == [
        ("status", "TASK_STATE_WORKING", "message"),
        ("artifact", "negotiator:reply"),
        ("artifact", "turn-evaluation:1"),
        ("artifact", "turn-evaluation:2"),
        ("status", "TASK_STATE_INPUT_REQUIRED", ""),
    ]
    assert events[1].status_update.status.message == answered.history[-1]
    assert answered.status.state == TaskState.TASK_STATE_INPUT_REQUIRED


def settled(endpoint: Endpoint) -> Task:
    """A task the seller completed: its counter accepted."""
    first = endpoint.send(user_message(proposal(800)))
    offer = data_of(first.history[-1])
    accept = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )
    task = endpoint.send(user_message(accept, task=first))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    return task


def sse_post(endpoint: Endpoint, body: dict[str, Any], version: str | None) -> tuple[int, str, list[Any]]:
    """POST ``body``; the status, the content type, and the JSON of each SSE event (or of the body)."""
    headers = {"A2A-Version": version} if version else {}

    async def call(http: httpx.AsyncClient) -> tuple[int, str, list[Any]]:
        async with http.stream("POST", endpoint.url, json=body, headers=headers) as response:
            kind = response.headers["content-type"]
            if not kind.startswith("text/event-stream"):
                return response.status_code, kind, [json.loads(await response.aread())]
            data = [json.loads(line[5:]) async for line in response.aiter_lines() if line.startswith("data:")]
            return response.status_code, kind, data

    return run(call)


@pytest.mark.parametrize(
    ("method", "version", "code"),
    [("SubscribeToTask", "1.0", -32004), ("tasks/resubscribe", None, -32004)],
)
def test_subscribing_to_a_finished_task_is_an_unsupported_operation(
    seller_endpoint: Endpoint, method: str, version: str | None, code: int
) -> None:
    task = settled(seller_endpoint)

    status, _, [answer] = sse_post(
        seller_endpoint,
        {"jsonrpc": "2.0", "id": 3, "method": method, "params": {"id": task.id}},
        version,
    )

    assert status == 200
    assert answer["id"] == 3
    assert answer["error"]["code"] == code
    assert answer["error"]["message"] == f"Task {task.id} is in terminal state: TASK_STATE_COMPLETED"


def test_a_0_3_stream_to_a_finished_task_is_refused_before_it_starts(seller_endpoint: Endpoint) -> None:
    """The Index wire's refusal (409/-32002), as for ``message/send``: a JSON answer, not a stream."""
    task = settled(seller_endpoint)
    before = counts()
    message = {
        "messageId": "m-late",
        "role": "user",
        "taskId": task.id,
        "contextId": task.context_id,
        "parts": [{"kind": "data", "data": {"action": "propose", "message": "Once more?"}}],
    }

    status, kind, [answer] = sse_post(
        seller_endpoint,
        {"jsonrpc": "2.0", "id": "s-1", "method": "message/stream", "params": {"message": message}},
        None,
    )

    assert (status, kind) == (409, "application/json")
    assert answer == {
        "jsonrpc": "2.0",
        "id": "s-1",
        "error": {
            "code": -32002,
            "message": f'Task "{task.id}" is completed and cannot accept further messages. '
            "Start a new task to negotiate again.",
        },
    }
    assert counts() == before


def test_a_1_0_stream_to_a_finished_task_keeps_the_sdks_32004(seller_endpoint: Endpoint) -> None:
    task = settled(seller_endpoint)
    before = counts()
    message = {
        "messageId": "m-late",
        "role": "ROLE_USER",
        "taskId": task.id,
        "contextId": task.context_id,
        "parts": [{"data": {"action": "propose", "message": "Once more?"}}],
    }

    status, kind, [answer] = sse_post(
        seller_endpoint,
        {"jsonrpc": "2.0", "id": 4, "method": "SendStreamingMessage", "params": {"message": message}},
        "1.0",
    )

    assert (status, kind) == (200, "application/json")
    assert answer["error"]["code"] == -32004
    assert answer["error"]["message"] == f"Task {task.id} is in terminal state: TASK_STATE_COMPLETED"
    assert counts() == before


@pytest.mark.parametrize(("method", "version"), [("SendStreamingMessage", "1.0"), ("message/stream", None)])
def test_a_stream_without_a_move_is_invalid_params_and_writes_nothing(
    seller_endpoint: Endpoint, method: str, version: str | None
) -> None:
    part = {"data": {"note": "no action"}} if version else {"kind": "data", "data": {"note": "no action"}}
    message = {"messageId": "m-1", "role": "ROLE_USER" if version else "user", "parts": [part]}

    status, _, answers = sse_post(
        seller_endpoint,
        {"jsonrpc": "2.0", "id": 5, "method": method, "params": {"message": message}},
        version,
    )

    assert status == 200
    [answer] = answers
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"] == "Invalid negotiation move: move.action is required"
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
