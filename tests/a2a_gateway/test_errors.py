"""Bad input at the public endpoint: the protocol's own error, a message naming the problem, no write."""

from __future__ import annotations

import json
from typing import Any

import pytest
from a2a.types import Task, TaskState
from django.conf import settings
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask
from agents.models import Agent
from negotiations.models import Negotiation, Turn
from tests.a2a_gateway.conftest import Endpoint, counts, move, proposal, run, user_message
from tests.conftest import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

INVALID_PARAMS = -32602


def send_message(parts: list[dict[str, Any]], task: Task | None = None) -> dict[str, Any]:
    """1.0 ``SendMessage`` params carrying ``parts`` (1.0 JSON), on ``task`` when given."""
    message: dict[str, Any] = {"messageId": "m-bad", "role": "ROLE_USER", "parts": parts}
    if task is not None:
        message.update(taskId=task.id, contextId=task.context_id)
    return {"message": message}


def error_of(response: Any, *, status: int = 200) -> dict[str, Any]:
    """The JSON-RPC error of ``response``, after checking its HTTP status and envelope."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert "result" not in body
    return dict(body["error"])


def snapshot(task: Task) -> tuple[dict[str, Any], list[tuple[int, str, str]]]:
    """The stored Task and its negotiation's turns, to show a refused message changed neither."""
    stored = A2ATask.objects.get(task_id=task.id)
    turns = Turn.objects.filter(negotiation__task_id=task.id).order_by("seq")
    return stored.data, [(t.seq, t.side, t.action) for t in turns]


MALFORMED = [
    pytest.param(
        [{"text": "I can pay 800 a day."}],
        "the message has no data part carrying a move {action, message, …}",
        id="text-part-only",
    ),
    pytest.param(
        [{"data": {"message": "I can pay 800 a day.", "terms": {"amount": 800}}}],
        "move.action is required",
        id="no-action",
    ),
    pytest.param(
        [{"data": {"action": "propose", "message": "800 a day", "terms": [800, "EUR"]}}],
        "move.terms must be a flat JSON object, got array",
        id="terms-as-list",
    ),
]


@pytest.mark.parametrize(("parts", "problem"), MALFORMED)
def test_malformed_first_move_is_invalid_params(
    seller_endpoint: Endpoint, parts: list[dict[str, Any]], problem: str
) -> None:
    response = seller_endpoint.rpc("SendMessage", send_message(parts))

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == f"Invalid negotiation move: {problem}"
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


@pytest.mark.parametrize(("parts", "problem"), MALFORMED)
def test_malformed_follow_up_leaves_the_open_task_as_it_was(
    seller_endpoint: Endpoint, parts: list[dict[str, Any]], problem: str
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = snapshot(task), counts()

    response = seller_endpoint.rpc("SendMessage", send_message(parts, task))

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == f"Invalid negotiation move: {problem}"
    assert snapshot(task) == before
    assert counts() == before_counts
    assert before[0]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    # The task is still open: a good move continues it.
    again = seller_endpoint.send(user_message(proposal(850), task=task))
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert len(again.history) == 4


def test_malformed_move_over_0_3_is_invalid_params(seller_endpoint: Endpoint) -> None:
    message = {"messageId": "m-bad", "role": "user", "parts": [{"kind": "text", "text": "800 a day?"}]}

    response = seller_endpoint.rpc("message/send", {"message": message}, version=None)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == (
        "Invalid negotiation move: the message has no data part carrying a move {action, message, …}"
    )
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


@pytest.mark.parametrize("method", ["SendMessage", "message/send"])
def test_unknown_agent_is_404(live_stack: LiveStack, seller: Agent, method: str) -> None:
    nobody = Endpoint(agent=seller, url=f"{live_stack.url}/a2a/globex/nobody")

    response = nobody.rpc(method, send_message([{"data": proposal(800)}]))

    error = error_of(response, status=404)
    assert error["message"] == "There is no agent 'nobody' in tenant 'globex'."
    assert response.json()["id"] is None
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def test_oversized_body_is_413(seller_endpoint: Endpoint) -> None:
    limit = settings.A2A_MAX_BODY_BYTES
    assert limit == 64 * 1024
    padding = "x" * limit
    params = send_message([{"data": {**proposal(800), "message": padding}}])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}).encode()
    assert len(body) > limit

    response = seller_endpoint.post(body)

    error = error_of(response, status=413)
    assert error["code"] == -32600
    assert error["message"] == f"The request body is larger than {limit} bytes."
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def test_oversized_chunked_body_is_413(seller_endpoint: Endpoint) -> None:
    """Without a Content-Length the gateway counts the chunks as they arrive."""
    limit = settings.A2A_MAX_BODY_BYTES
    head = b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"x": "'
    chunks = [head, *[b"x" * 1024] * (limit // 1024), b'"}}}']

    async def body() -> Any:
        for chunk in chunks:
            yield chunk

    response = run(
        lambda http: http.post(seller_endpoint.url, content=body(), headers={"A2A-Version": "1.0"})
    )

    assert "content-length" not in response.request.headers
    error = error_of(response, status=413)
    assert error["message"] == f"The request body is larger than {limit} bytes."
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def test_body_at_the_limit_is_accepted(seller_endpoint: Endpoint) -> None:
    params = send_message([{"data": proposal(800)}])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params})
    body = body[:-1] + " " * (settings.A2A_MAX_BODY_BYTES - len(body.encode())) + "}"
    assert len(body.encode()) == settings.A2A_MAX_BODY_BYTES

    response = seller_endpoint.post(body.encode())

    assert response.status_code == 200
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def closed_task(endpoint: Endpoint, how: str) -> Task:
    """A task the seller has closed: ``completed`` by accepting its offer, ``rejected`` by rejecting."""
    first = endpoint.send(user_message(proposal(800)))
    if how == "completed":
        offer = MessageToDict(first.history[-1].parts[0].data)
        closing = move(
            "accept", "Agreed.", terms={"amount": 1330, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
        )
    else:
        closing = move("reject", "No, thank you.")
    task = endpoint.send(user_message(closing, task=first))
    assert TaskState.Name(task.status.state) == f"TASK_STATE_{how.upper()}"
    return task


@pytest.mark.parametrize("how", ["completed", "rejected"])
@pytest.mark.parametrize(("method", "version"), [("SendMessage", "1.0"), ("message/send", None)])
def test_message_to_a_finished_task_is_refused(
    seller_endpoint: Endpoint, how: str, method: str, version: str | None
) -> None:
    task = closed_task(seller_endpoint, how)
    before, before_counts = snapshot(task), counts()
    parts = [{"data": proposal(1000)}] if version else [{"kind": "data", "data": proposal(1000)}]
    message = send_message(parts, task)
    if not version:
        message["message"]["role"] = "user"

    response = seller_endpoint.rpc(method, message, version=version)

    error = error_of(response)
    assert error["code"] == -32004
    assert error["message"] == f"Task {task.id} is in terminal state: TASK_STATE_{how.upper()}"
    assert snapshot(task) == before
    assert counts() == before_counts


def test_body_that_is_not_json_is_a_parse_error(seller_endpoint: Endpoint) -> None:
    response = seller_endpoint.post(b'{"jsonrpc": "2.0", "id": 1, "method": ')

    error = error_of(response)
    assert error["code"] == -32700
    assert error["message"] == "Expecting value: line 1 column 39 (char 38)"
    assert response.json()["id"] is None
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def test_1_0_method_without_a2a_version_is_refused(seller_endpoint: Endpoint) -> None:
    response = seller_endpoint.rpc("SendMessage", send_message([{"data": proposal(800)}]), version=None)

    error = error_of(response)
    assert error["code"] == -32009
    assert error["message"] == "A2A version '0.3' is not supported by this handler. Expected version '1.0'."
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def test_unknown_method_is_method_not_found(seller_endpoint: Endpoint) -> None:
    response = seller_endpoint.rpc("tasks/haggle", {})

    error = error_of(response)
    assert error["code"] == -32601
    assert error["message"] == "Method not found"
    assert counts() == {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


def test_message_after_a_settlement_on_an_open_task_is_refused(seller_endpoint: Endpoint) -> None:
    """Accepting an offer that is not in the task settles as unanswered while the task stays open."""
    first = seller_endpoint.send(user_message(proposal(800)))
    bogus = move("accept", "Deal at €900.", terms={"amount": 900, "currency": "EUR"}, accepts_offer_id="nope")
    task = seller_endpoint.send(user_message(bogus, task=first))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert Negotiation.objects.get().settlement.outcome == "unanswered"
    assert list(task.artifacts) == []  # the outcome artifact comes with a terminal reply only
    before, before_counts = snapshot(task), counts()

    response = seller_endpoint.rpc("SendMessage", send_message([{"data": proposal(1000)}], task))

    error = error_of(response)
    assert error["code"] == -32004
    assert error["message"] == f"negotiation on task {task.id} is settled; open a new one"
    assert snapshot(task) == before
    assert counts() == before_counts


def test_context_that_is_not_the_tasks_is_invalid_params(seller_endpoint: Endpoint) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = snapshot(task), counts()
    params = send_message([{"data": proposal(900)}], task)
    params["message"]["contextId"] = "another-context"

    response = seller_endpoint.rpc("SendMessage", params)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == (
        f"Context another-context does not match context {task.context_id} of task {task.id}"
    )
    assert snapshot(task) == before
    assert counts() == before_counts
