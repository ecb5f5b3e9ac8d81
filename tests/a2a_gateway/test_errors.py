"""Bad input at the public endpoint: the protocol's own error, a message naming the problem, no write."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from a2a.types import Task, TaskState
from django.conf import settings
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask
from agents.models import Agent
from negotiations.models import Negotiation, Settlement, Turn
from parley import devstack
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
    stored = A2ATask.across_tenants.get(task_id=task.id)
    turns = Turn.across_tenants.filter(negotiation__task_id=task.id).order_by("seq")
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
            "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
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

    if version:  # 1.0: the SDK's own refusal
        error = error_of(response)
        assert error["code"] == -32004
        assert error["message"] == f"Task {task.id} is in terminal state: TASK_STATE_{how.upper()}"
    else:  # 0.3: as Index servers answer (docs/wire-format.md#refusals)
        error = error_of(response, status=409)
        assert error["code"] == -32002
        assert error["message"] == (
            f'Task "{task.id}" is {how} and cannot accept further messages. '
            "Start a new task to negotiate again."
        )
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


def test_a_message_after_an_unanswered_settlement_continues_the_negotiation(
    seller_endpoint: Endpoint,
) -> None:
    """Accepting an offer that is not in the task settles as unanswered while the task stays open.
    Only they closed, so the exchange goes on: their next move is answered
    (docs/wire-format.md#settlement)."""
    first = seller_endpoint.send(user_message(proposal(800)))
    bogus = move("accept", "Deal at €900.", terms={"amount": 900, "currency": "EUR"}, accepts_offer_id="nope")
    task = seller_endpoint.send(user_message(bogus, task=first))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert Negotiation.across_tenants.get().settlement.outcome == "unanswered"
    # The outcome artifact comes with a terminal reply only; the answer's with every reply.
    assert [a.artifact_id for a in task.artifacts] == ["negotiator:reply"]

    task = seller_endpoint.send(user_message(proposal(1000), task=task))

    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    negotiation = Negotiation.across_tenants.get()
    assert (negotiation.status, negotiation.turns.count()) == (Negotiation.Status.OPEN, 6)
    assert not Settlement.across_tenants.filter(negotiation=negotiation).exists()  # no side has closed now


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


# --- Messages the negotiation must never see -----------------------------------------------


NOTHING = {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}


@pytest.mark.parametrize(
    ("method", "version", "message"),
    [
        ("SendMessage", "1.0", {"role": "ROLE_AGENT", "parts": [{"data": proposal(800)}]}),
        ("message/send", None, {"role": "agent", "parts": [{"kind": "data", "data": proposal(800)}]}),
    ],
    ids=["1.0", "0.3"],
)
def test_agent_role_message_is_refused(
    seller_endpoint: Endpoint, method: str, version: str | None, message: dict[str, Any]
) -> None:
    """The counterparty speaks as the user; a message posing as our agent never reaches the negotiation."""
    response = seller_endpoint.rpc(method, {"message": {"messageId": "m-agent", **message}}, version=version)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == "message.role must be user"
    assert counts() == NOTHING


def test_agent_role_follow_up_leaves_the_open_task_as_it_was(seller_endpoint: Endpoint) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = snapshot(task), counts()
    params = send_message([{"data": proposal(900)}], task)
    params["message"]["role"] = "ROLE_AGENT"

    response = seller_endpoint.rpc("SendMessage", params)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == "message.role must be user"
    assert snapshot(task) == before
    assert counts() == before_counts


UNSTORABLE_MOVES = [
    pytest.param({"action": "a" * 65}, "move.action must be at most 64 characters", id="long-action"),
    pytest.param({"action": "pro\x00pose"}, "move.action must not contain a NUL character", id="nul-action"),
    pytest.param({"message": "€" * 4001}, "move.message must be at most 4000 characters", id="long-message"),
    pytest.param({"message": "8\x0000"}, "move.message must not contain a NUL character", id="nul-message"),
    pytest.param({"offerId": "o" * 65}, "move.offerId must be at most 64 characters", id="long-offer-id"),
    pytest.param(
        {"terms": {"amount": 800, "currency": "EU\x00R"}},
        "move.terms.currency must not contain a NUL character",
        id="nul-term-value",
    ),
    pytest.param(
        {"terms": {"amo\x00unt": 800}}, "move.terms keys must not contain a NUL character", id="nul-term-key"
    ),
    pytest.param(
        {"terms": {"k" * 65: 800}}, "move.terms keys must be at most 64 characters", id="long-term-key"
    ),
    pytest.param(
        {"terms": {f"t{i}": i for i in range(33)}},
        "move.terms must have at most 32 keys, got 33",
        id="many-terms",
    ),
]


@pytest.mark.parametrize(("change", "problem"), UNSTORABLE_MOVES)
def test_move_the_database_cannot_hold_is_invalid_params(
    seller_endpoint: Endpoint, change: dict[str, Any], problem: str
) -> None:
    response = seller_endpoint.rpc("SendMessage", send_message([{"data": {**proposal(800), **change}}]))

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == f"Invalid negotiation move: {problem}"
    assert counts() == NOTHING


def test_move_the_database_cannot_hold_over_0_3_is_invalid_params(seller_endpoint: Endpoint) -> None:
    data = {**proposal(800), "action": "a" * 65}
    message = {"messageId": "m-bad", "role": "user", "parts": [{"kind": "data", "data": data}]}

    response = seller_endpoint.rpc("message/send", {"message": message}, version=None)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == "Invalid negotiation move: move.action must be at most 64 characters"
    assert counts() == NOTHING


UNSTORABLE_MESSAGES = [
    pytest.param(
        {"contextId": "c" * 201}, "message.contextId must be at most 200 characters", id="long-context"
    ),
    pytest.param(
        {"contextId": "ctx\x00"}, "message.contextId must not contain a NUL character", id="nul-context"
    ),
    pytest.param({"messageId": "m\x00"}, "message.messageId must not contain a NUL character", id="nul-id"),
    pytest.param(
        {"parts": [{"data": proposal(800)}, {"text": "800\x00"}]},
        "message.parts[1].text must not contain a NUL character",
        id="nul-text-part",
    ),
    pytest.param(
        {"parts": [{"data": {**proposal(800), "note": ["ok", "\x00"]}}]},
        "message.parts[0].data.note[1] must not contain a NUL character",
        id="nul-unknown-move-key",
    ),
    pytest.param(
        {"metadata": {"trace\x00": 1}}, "message.metadata keys must not contain a NUL character", id="nul-key"
    ),
]


@pytest.mark.parametrize(("change", "problem"), UNSTORABLE_MESSAGES)
def test_message_the_database_cannot_hold_is_invalid_params(
    seller_endpoint: Endpoint, change: dict[str, Any], problem: str
) -> None:
    params = send_message([{"data": proposal(800)}])
    params["message"].update(change)

    response = seller_endpoint.rpc("SendMessage", params)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == problem
    assert counts() == NOTHING


def test_context_id_at_the_limit_is_accepted(seller_endpoint: Endpoint) -> None:
    params = send_message([{"data": proposal(800)}])
    params["message"]["contextId"] = "c" * 200

    response = seller_endpoint.rpc("SendMessage", params)

    assert response.json()["result"]["task"]["contextId"] == "c" * 200
    assert Negotiation.across_tenants.get().context_id == "c" * 200


@pytest.mark.parametrize("task_id", ["t\x00", "t" * 201], ids=["nul", "long"])
@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("SendMessage", send_message([{"data": proposal(800)}]), "Task {} not found"),
        ("GetTask", {}, "Task not found"),
    ],
    ids=["SendMessage", "GetTask"],
)
def test_task_id_no_task_can_have_is_not_found(
    seller_endpoint: Endpoint, task_id: str, method: str, params: dict[str, Any], message: str
) -> None:
    """A task id the database cannot hold names no task: -32001, as for any unknown id."""
    params = json.loads(json.dumps(params))
    if method == "SendMessage":
        params["message"]["taskId"] = task_id
    else:
        params["id"] = task_id

    response = seller_endpoint.rpc(method, params)

    error = error_of(response)
    assert error["code"] == -32001
    assert error["message"] == message.format(task_id)
    assert counts() == NOTHING


# --- Failures of our own: withheld from the counterparty -----------------------------------


COULD_NOT_ANSWER = "The agent could not answer this move."

BROKEN_AGENTS = [
    # NegotiatorError: a malformed guard's text names the seller's hidden floor.
    pytest.param(
        {"term_guards": [{"term": "amount", "op": "<", "value": 950}]},
        ["TASK_STATE_FAILED"],
        id="malformed-guard",
    ),
    # NegotiatorError: the text names the deployment's model.
    pytest.param({"model": "gpt-4o"}, ["TASK_STATE_FAILED"], id="negotiator-error"),
    # Anything else: an action without a name fails with a KeyError as the move is checked against
    # the vocabulary, before the SDK sets the task up.
    pytest.param({"allowed_actions": [{"description": "nameless"}]}, [], id="unexpected"),
]


@pytest.mark.parametrize(("broken", "tasks"), BROKEN_AGENTS)
def test_a_failure_of_ours_is_internal_error_without_details(
    seller_endpoint: Endpoint, seller: Agent, broken: dict[str, Any], tasks: list[str]
) -> None:
    for field, value in broken.items():
        setattr(seller, field, value)
    seller.save()

    response = seller_endpoint.rpc("SendMessage", send_message([{"data": proposal(800)}]))

    error = error_of(response)
    assert error["code"] == -32603
    assert error["message"] == COULD_NOT_ANSWER
    for detail in ("950", "guard", "gpt-4o", "'name'", "Traceback"):
        assert detail not in response.text
    # The negotiation is untouched; the SDK records a task it had set up as FAILED.
    assert (Negotiation.across_tenants.count(), Turn.across_tenants.count()) == (0, 0)
    assert list(A2ATask.across_tenants.values_list("state", flat=True)) == tasks


def test_a_failure_of_ours_on_a_follow_up_adds_no_turn(seller_endpoint: Endpoint, seller: Agent) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before_turns = snapshot(task)[1]
    seller.term_guards = [{"term": "amount", "op": "<", "value": 950}]
    seller.save()

    response = seller_endpoint.rpc("SendMessage", send_message([{"data": proposal(900)}], task))

    error = error_of(response)
    assert error["code"] == -32603
    assert error["message"] == COULD_NOT_ANSWER
    assert "950" not in response.text
    assert snapshot(task)[1] == before_turns
    assert Negotiation.across_tenants.get().turns.count() == 2


# --- The HTTP edge ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_rpc_url_answers_other_methods_with_a_json_rpc_405(seller_endpoint: Endpoint, method: str) -> None:
    response = run(lambda http: http.request(method, seller_endpoint.url, headers={"A2A-Version": "1.0"}))

    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.headers["content-type"] == "application/json"
    if method != "HEAD":
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Use POST for JSON-RPC."},
        }
    assert counts() == NOTHING


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("globex/id%00ris", "agent 'id\\x00ris' in tenant 'globex'"),
        ("glo%00bex/idris", "agent 'idris' in tenant 'glo\\x00bex'"),
        ("globex/id%20ris", "agent 'id ris' in tenant 'globex'"),
        ("globex/idr%C3%ADs", "agent 'idrís' in tenant 'globex'"),
    ],
    ids=["nul-agent", "nul-tenant", "space", "non-ascii"],
)
def test_path_segment_that_is_no_slug_is_404(
    live_stack: LiveStack, seller: Agent, path: str, named: str
) -> None:
    url = f"{live_stack.url}/a2a/{path}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": send_message([{"data": proposal()}]),
    }

    responses = run(
        lambda http: asyncio.gather(
            http.post(url, json=body, headers={"A2A-Version": "1.0"}),
            http.get(f"{url}/.well-known/agent-card.json"),
        )
    )

    for response in responses:
        assert response.headers["content-type"] == "application/json"
        error = error_of(response, status=404)
        assert error == {"code": -32600, "message": f"There is no {named}."}
    assert counts() == NOTHING


# --- Numbers JSON cannot carry ------------------------------------------------------------------

# Python's JSON reader (the SDK's) takes NaN and ±Infinity, which JSON has no words for (RFC 8259 §6),
# and reads 1e400 as infinity. json.dumps writes float("inf") as Infinity, as a hostile caller sends it.
NON_FINITE = [
    pytest.param(float("inf"), "Infinity", id="Infinity"),
    pytest.param(float("-inf"), "-Infinity", id="-Infinity"),
    pytest.param(float("nan"), "NaN", id="NaN"),
]
WIRES = [pytest.param("1.0", id="1.0"), pytest.param(None, id="0.3")]


def web_log(live_stack: LiveStack) -> Path:
    """The live web process's log (tests.conftest.live_stack)."""
    return devstack.ROOT / ".pytest_cache" / f"live-web-{live_stack.url.rsplit(':', 1)[1]}.log"


def raw_send(
    endpoint: Endpoint, message: dict[str, Any], *, version: str | None, task: Task | None = None
) -> Any:
    """POST ``message`` (1.0 JSON; on the 0.3 wire, ``version`` None, its parts and role in 0.3
    words) as ``SendMessage`` or ``message/send``, written with Python's json.dumps, which writes
    non-finite numbers as NaN, Infinity and -Infinity."""
    message = {"messageId": "m-nf", "role": "ROLE_USER", **message}
    if task is not None:
        message.update(taskId=task.id, contextId=task.context_id)
    method = "SendMessage"
    if version is None:
        method = "message/send"
        parts = [{"kind": "data", **p} if "data" in p else {"kind": "text", **p} for p in message["parts"]]
        message.update(kind="message", role="user", parts=parts)
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"message": message}}
    return endpoint.post(json.dumps(body).encode(), version=version)


@pytest.mark.parametrize("version", WIRES)
@pytest.mark.parametrize(("number", "written"), NON_FINITE)
def test_a_term_that_is_no_finite_number_is_an_invalid_move(
    live_stack: LiveStack, seller_endpoint: Endpoint, version: str | None, number: float, written: str
) -> None:
    """-32602 naming the term, as for any other invalid move; nothing stored, nothing logged (before
    the fix: -32603 "Fail to serialize Infinity for Value.number_value…" and an ERROR traceback)."""
    log = web_log(live_stack)
    logged = log.stat().st_size
    terms = {"amount": number, "currency": "EUR"}
    parts = [{"data": {"action": "propose", "message": "€800 a day?", "terms": terms}}]

    response = raw_send(seller_endpoint, {"parts": parts}, version=version)

    error = error_of(response)
    assert response.json()["id"] == 7
    assert (error["code"], error["message"]) == (
        INVALID_PARAMS,
        f"Invalid negotiation move: move.terms.amount must be a finite number, got {written}",
    )
    assert counts() == NOTHING
    with log.open("rb") as text:
        text.seek(logged)
        assert b"ERROR" not in text.read()


@pytest.mark.parametrize("version", WIRES)
def test_a_number_too_large_for_a_double_is_infinity_and_refused(
    seller_endpoint: Endpoint, version: str | None
) -> None:
    body = (
        '{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {"messageId": "m", '
        '"role": "ROLE_USER", "parts": [{"data": {"action": "propose", "message": "x", '
        '"terms": {"amount": 1e400}}}]}}}'
    )
    if version is None:
        body = body.replace('"SendMessage"', '"message/send"').replace('"ROLE_USER"', '"user"')
        body = body.replace('{"data"', '{"kind": "data", "data"')

    error = error_of(seller_endpoint.post(body.encode(), version=version))

    assert error["code"] == INVALID_PARAMS
    assert error["message"] == (
        "Invalid negotiation move: move.terms.amount must be a finite number, got Infinity"
    )
    assert counts() == NOTHING


ELSEWHERE = [
    pytest.param(
        {"parts": [{"data": {**proposal(800), "note": [1, float("nan")]}}]},
        "Invalid negotiation move: move.note[1] must be a finite number, got NaN",
        id="unknown-move-key",
    ),
    pytest.param(
        {"parts": [{"data": proposal(800)}, {"data": {"score": float("inf")}}]},
        "message.parts[1].data.score must be a finite number, got Infinity",
        id="second-data-part",
    ),
    pytest.param(
        {"parts": [{"data": proposal(800)}], "metadata": {"trace": {"score": float("-inf")}}},
        "message.metadata.trace.score must be a finite number, got -Infinity",
        id="message-metadata",
    ),
]


@pytest.mark.parametrize(("message", "problem"), ELSEWHERE)
def test_a_number_that_is_not_finite_elsewhere_in_the_message_is_named(
    seller_endpoint: Endpoint, message: dict[str, Any], problem: str
) -> None:
    error = error_of(raw_send(seller_endpoint, message, version="1.0"))

    assert (error["code"], error["message"]) == (INVALID_PARAMS, problem)
    assert counts() == NOTHING


@pytest.mark.parametrize("version", WIRES)
def test_a_follow_up_with_a_term_that_is_not_finite_leaves_the_open_task_as_it_was(
    seller_endpoint: Endpoint, version: str | None
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = snapshot(task), counts()
    parts = [{"data": {**proposal(850), "terms": {"amount": float("nan"), "currency": "EUR"}}}]

    error = error_of(raw_send(seller_endpoint, {"parts": parts}, version=version, task=task))

    assert error["message"] == "Invalid negotiation move: move.terms.amount must be a finite number, got NaN"
    assert snapshot(task) == before
    assert counts() == before_counts
    again = seller_endpoint.send(user_message(proposal(850), task=task))
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
