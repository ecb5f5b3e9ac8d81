"""Agent Exchange at a recipient agent's public endpoint: the card, preparation, the A2A message.

Over loopback HTTP to the live stack's web process: preparation with raw httpx (it is plain
HTTP), messages with a2a-sdk's own client on A2A 1.0 and as raw 0.3 JSON-RPC, as an Index-era
peer sends them. The requester is played by the test; our own requester is
tests/exchange/test_round_trip.py's.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.helpers import new_data_part
from a2a.types import Message, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from a2a_gateway.auth import inbound_key_create
from a2a_gateway.models import A2ATask
from agents.models import Agent, Run
from exchange import services, wire
from exchange.models import ExchangeProfile, MandateUse, PreparedExchange
from parley.edge import API_KEY_HEADER
from tests.a2a_gateway.conftest import Endpoint, endpoint_of, run
from tests.conftest import LiveStack
from tests.exchange.issuer import ISSUER, Issuer, request_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def recipient(live_stack: LiveStack, seller: Agent, issuer: Issuer) -> Endpoint:
    """The seller's endpoint, taking Agent Exchange requests from tokens ``issuer`` signs."""
    services.profile_save(agent=seller, values={"issuer": ISSUER, "jwks": issuer.jwks})
    return endpoint_of(live_stack, seller)


@pytest.fixture
def key(recipient: Endpoint) -> str:
    """An inbound key of the recipient, held by the requester."""
    return inbound_key_create(agent=recipient.agent, name="requester")[1]


def prepare(recipient: Endpoint, body: Any, *, key: str | None, content_type: str = "") -> httpx.Response:
    headers = {
        "Content-Type": content_type or wire.PREPARATION_MEDIA_TYPE,
        "Accept": wire.PREPARATION_MEDIA_TYPE,
    }
    if key:
        headers[API_KEY_HEADER] = key
    url = f"{recipient.url}{wire.PREPARATION_PATH}"
    return run(lambda http: http.post(url, content=json.dumps(body), headers=headers))


def exchange_message(reference: str) -> Message:
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[new_data_part({"reference": reference}, media_type=wire.REFERENCE_MEDIA_TYPE)],
    )
    message.extensions.append(wire.EXTENSION_URI)
    return message


def send(recipient: Endpoint, message: Message, *, key: str | None, activate: bool = True) -> Task:
    """Send ``message`` on A2A 1.0 with a2a-sdk's client, activating the extension unless told not to."""
    card = recipient.card()
    headers = {API_KEY_HEADER: key} if key else {}
    updates = [with_a2a_extensions([wire.EXTENSION_URI])] if activate else []
    context = ClientCallContext(service_parameters=ServiceParametersFactory.create(updates))

    async def call(http: httpx.AsyncClient) -> Task:
        http.headers.update(headers)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        events = [e async for e in client.send_message(SendMessageRequest(message=message), context=context)]
        assert events[-1].HasField("task"), events
        return events[-1].task

    return run(call)


def rpc_0_3(
    recipient: Endpoint, message: dict[str, Any], *, key: str, activate: bool = True
) -> httpx.Response:
    """POST ``message/send`` as a 0.3 peer does (no A2A-Version), with the 0.3 extension header."""
    headers = {API_KEY_HEADER: key, **({"X-A2A-Extensions": wire.EXTENSION_URI} if activate else {})}
    body = {"jsonrpc": "2.0", "id": "r-1", "method": "message/send", "params": {"message": message}}
    return run(lambda http: http.post(recipient.url, json=body, headers=headers))


def prepared(recipient: Endpoint, issuer: Issuer, key: str, **members: Any) -> tuple[dict[str, Any], str]:
    request = request_for(recipient.url, issuer.token(recipient.url), **members)
    response = prepare(recipient, {"request": request}, key=key)
    assert response.status_code == 200, response.text
    return request, response.json()["reference"]


# --- The card ---------------------------------------------------------------------------------------


def test_the_card_advertises_the_extension_with_its_same_origin_preparation_endpoint(
    recipient: Endpoint,
) -> None:
    [extension] = [e for e in recipient.card().capabilities.extensions if e.uri == wire.EXTENSION_URI]
    assert extension.required is False  # a shared card: negotiation still works
    assert MessageToDict(extension.params) == {
        "preparation": {
            "endpoint": f"{recipient.url}{wire.PREPARATION_PATH}",
            "mediaType": wire.PREPARATION_MEDIA_TYPE,
            "method": "POST",
        }
    }
    services.profile_save(agent=recipient.agent, values={"mode": ExchangeProfile.Mode.REQUIRED})
    [extension] = [e for e in recipient.card().capabilities.extensions if e.uri == wire.EXTENSION_URI]
    assert extension.required is True
    services.profile_delete(agent=recipient.agent)
    assert wire.EXTENSION_URI not in {e.uri for e in recipient.card().capabilities.extensions}


# --- Preparation ------------------------------------------------------------------------------------


def test_preparation_stores_the_request_and_answers_the_reference_the_requester_derives(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    request = request_for(recipient.url, issuer.token(recipient.url))
    response = prepare(recipient, {"request": request}, key=key)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == wire.PREPARATION_MEDIA_TYPE
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == {"reference": wire.reference_of(request)}
    row = PreparedExchange.across_tenants.get()
    assert (row.exchange_id, row.request, row.caller) == (
        request["exchangeId"],
        request,
        f"key:{key.split('.')[0]}",
    )


@pytest.mark.parametrize(
    ("change", "status", "said"),
    [
        (lambda r: {"request": r, "extra": 1}, 400, 'one member, "request"'),
        (lambda r: {"request": {**r, "purpose": ""}}, 400, "request.purpose"),
        (lambda r: {"request": {**r, "secretSauce": "x"}}, 400, "'secretSauce' was unexpected"),
        (
            lambda r: {"request": {**r, "recipient": "https://elsewhere.example/a2a/x/y"}},
            400,
            "request.recipient",
        ),
        (lambda r: {"request": {**r, "expiresAt": int(time.time()) - 1}}, 400, "request.expiresAt"),
        (lambda r: {"request": {**r, "expiresAt": 2**60}}, 400, "request.expiresAt"),
        (lambda r: [r], 400, 'one member, "request"'),
    ],
    ids=[
        "extra-member",
        "empty-purpose",
        "unknown-member",
        "other-recipient",
        "expired",
        "huge-number",
        "array",
    ],
)
def test_preparation_refuses_a_request_the_profile_does_not_allow(
    recipient: Endpoint, issuer: Issuer, key: str, change: Any, status: int, said: str
) -> None:
    response = prepare(recipient, change(request_for(recipient.url, issuer.token(recipient.url))), key=key)
    assert response.status_code == status, response.text
    assert said in response.json()["error"]["message"]
    assert response.headers["cache-control"] == "no-store"
    assert not PreparedExchange.across_tenants.exists()


@pytest.mark.parametrize(
    ("claims", "said"),
    [
        ({"aud": "https://someone-else.example"}, "audience is not this agent"),
        ({"exp": int(time.time()) - 3600}, "has expired"),
        ({"scope": "calendar.read"}, "lacks the scope 'agent-exchange'"),
        ({"iss": "https://evil.example"}, "not issued by the issuer"),
        ({"sub": None}, "lacks the 'sub' claim"),
    ],
    ids=["audience", "expired", "scope", "issuer", "no-subject"],
)
def test_preparation_refuses_a_delegation_token_that_does_not_hold(
    recipient: Endpoint, issuer: Issuer, key: str, claims: dict[str, Any], said: str
) -> None:
    request = request_for(recipient.url, issuer.token(recipient.url, **claims))
    response = prepare(recipient, {"request": request}, key=key)
    assert response.status_code == 401, response.text
    assert said in response.json()["error"]["message"]
    assert "accessToken" not in response.text
    assert request["delegation"]["accessToken"] not in response.text
    assert not PreparedExchange.across_tenants.exists()


def test_a_token_signed_by_a_key_outside_the_configured_set_is_refused(recipient: Endpoint, key: str) -> None:
    forger = Issuer(kid="party-key-1")  # the same kid, another key
    response = prepare(
        recipient, {"request": request_for(recipient.url, forger.token(recipient.url))}, key=key
    )
    assert response.status_code == 401
    assert "signature does not verify" in response.json()["error"]["message"]


def test_preparation_refuses_a_replay_an_anonymous_caller_another_media_type_and_an_agent_without_it(
    recipient: Endpoint, issuer: Issuer, key: str, agent: Agent
) -> None:
    request, _ = prepared(recipient, issuer, key)
    again = prepare(recipient, {"request": {**request, "purpose": "Another purpose"}}, key=key)
    assert again.status_code == 409
    assert "replay" in again.json()["error"]["message"]
    anonymous = prepare(
        recipient, {"request": request_for(recipient.url, issuer.token(recipient.url))}, key=None
    )
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["message"] == services.UNAUTHENTICATED
    plain = prepare(recipient, {"request": request}, key=key, content_type="application/json")
    assert plain.status_code == 415
    without = endpoint_of(LiveStack(url=recipient.url.split("/a2a/")[0], env={}), agent)
    assert prepare(without, {"request": request}, key=None).status_code == 404
    assert PreparedExchange.across_tenants.count() == 1


# --- The A2A message --------------------------------------------------------------------------------


def test_a_prepared_request_runs_and_only_its_reference_is_in_the_task_history(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    request, reference = prepared(recipient, issuer, key)
    task = send(recipient, exchange_message(reference), key=key)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = task.artifacts
    assert artifact.artifact_id == wire.RECEIPT_ARTIFACT_ID
    assert artifact.parts[0].media_type == wire.RECEIPT_MEDIA_TYPE
    receipt = wire.check_receipt(_integers(MessageToDict(artifact.parts[0])["data"]))
    assert receipt["reference"] == reference
    assert receipt["exchangeId"] == request["exchangeId"]
    assert receipt["modelObservedSecret"] is False
    assert "usesRemaining" not in receipt
    run_ = Run.across_tenants.get(agent=recipient.agent)
    assert (run_.task, run_.intent.statement) == (request["instruction"], request["purpose"])
    row = PreparedExchange.across_tenants.get()
    assert row.request is None
    assert row.run == run_
    assert row.receipt == receipt
    stored = json.dumps(A2ATask.across_tenants.get(task_id=task.id).data)
    assert reference in stored
    for secret in (request["delegation"]["accessToken"], "hunter2-secret", request["instruction"]):
        assert secret not in stored


def test_a_repeated_message_gets_the_same_receipt_and_runs_nothing_more(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    _, reference = prepared(recipient, issuer, key)
    first = send(recipient, exchange_message(reference), key=key)
    second = send(recipient, exchange_message(reference), key=key)
    assert second.status.state == TaskState.TASK_STATE_COMPLETED
    assert MessageToDict(first.artifacts[0]) == MessageToDict(second.artifacts[0])
    assert Run.across_tenants.filter(agent=recipient.agent).count() == 1


def test_the_0_3_wire_carries_the_reference_without_media_types(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    _, reference = prepared(recipient, issuer, key)
    message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "data", "data": {"reference": reference}}],
        "extensions": [wire.EXTENSION_URI],
    }
    result = rpc_0_3(recipient, message, key=key).json()["result"]
    assert result["status"]["state"] == "completed"
    [artifact] = result["artifacts"]
    assert artifact["artifactId"] == wire.RECEIPT_ARTIFACT_ID
    assert wire.check_receipt(_integers(artifact["parts"][0]["data"]))["reference"] == reference
    not_activated = rpc_0_3(recipient, message, key=key, activate=False)
    assert not_activated.status_code == 400
    assert not_activated.json()["error"]["code"] == -32008


def test_a_message_that_does_not_activate_the_extension_gets_extension_support_required(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    _, reference = prepared(recipient, issuer, key)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": MessageToDict(exchange_message(reference))},
    }
    answer = run(
        lambda http: http.post(recipient.url, json=body, headers={"A2A-Version": "1.0", API_KEY_HEADER: key})
    ).json()
    assert answer["error"]["code"] == -32008
    assert wire.EXTENSION_URI in answer["error"]["message"]
    assert not Run.across_tenants.exists()
    assert PreparedExchange.across_tenants.get().request is not None


def test_a_dedicated_agent_requires_the_extension_of_every_message(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    services.profile_save(agent=recipient.agent, values={"mode": ExchangeProfile.Mode.REQUIRED})
    move = {"action": "propose", "message": "I can pay 800.", "terms": {"amount": 800}, "offerId": "o-1"}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": move}]}},
    }
    answer = run(lambda http: http.post(recipient.url, json=body, headers={"A2A-Version": "1.0"})).json()
    assert answer["error"]["code"] == -32008
    activated = exchange_message("sha256:" + "A" * 43)
    del activated.parts[:]
    activated.parts.append(new_data_part(move))
    with pytest.raises(InvalidParamsError, match=re.escape("reference: 'reference' is a required property")):
        send(recipient, activated, key=key)
    assert not A2ATask.across_tenants.exists()


def test_another_callers_reference_is_unknown(recipient: Endpoint, issuer: Issuer, key: str) -> None:
    _, reference = prepared(recipient, issuer, key)
    stranger = inbound_key_create(agent=recipient.agent, name="stranger")[1]
    task = send(recipient, exchange_message(reference), key=stranger)
    assert task.status.state == TaskState.TASK_STATE_REJECTED
    assert "No request was prepared under this reference for you" in task.status.message.parts[0].text
    anonymous = send(recipient, exchange_message(reference), key=None)
    assert anonymous.status.state == TaskState.TASK_STATE_REJECTED
    assert anonymous.status.message.parts[0].text == services.UNAUTHENTICATED
    assert not Run.across_tenants.exists()


def test_an_expired_request_is_rejected_and_runs_nothing(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    _, reference = prepared(recipient, issuer, key)
    PreparedExchange.across_tenants.update(expires_at="2000-01-01T00:00:00Z")
    task = send(recipient, exchange_message(reference), key=key)
    assert task.status.state == TaskState.TASK_STATE_REJECTED
    assert task.status.message.parts[0].text == "The request has expired."
    assert not Run.across_tenants.exists()


# --- Standing mandates ------------------------------------------------------------------------------


def test_a_standing_mandate_is_verified_and_each_use_counted_until_spent(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    mandate = issuer.mandate(recipient.url, max_uses=1)
    _, reference = prepared(recipient, issuer, key, mandate=mandate)
    task = send(recipient, exchange_message(reference), key=key)
    receipt = _integers(MessageToDict(task.artifacts[0].parts[0])["data"])
    assert receipt["usesRemaining"] == 0
    assert receipt["mandateId"] == MandateUse.across_tenants.get().mandate_id
    _, spent = prepared(recipient, issuer, key, mandate=mandate)
    refused = send(recipient, exchange_message(spent), key=key)
    assert refused.status.state == TaskState.TASK_STATE_REJECTED
    assert refused.status.message.parts[0].text == "The mandate's 1 uses are spent."
    assert MandateUse.across_tenants.get().uses == 1
    assert Run.across_tenants.count() == 1


def test_a_mandate_granted_by_someone_else_or_for_another_agent_is_refused(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    for mandate, said in [
        (issuer.mandate(recipient.url, sub="party:mallory"), "someone other than"),
        (issuer.mandate("https://other.example/a2a/x/y"), "audience is not this agent"),
        (issuer.mandate(recipient.url, maxUses=0), "maxUses"),
    ]:
        request = request_for(recipient.url, issuer.token(recipient.url), mandate=mandate)
        response = prepare(recipient, {"request": request}, key=key)
        assert response.status_code == 401
        assert said in response.json()["error"]["message"]
    assert not PreparedExchange.across_tenants.exists()


def _integers(receipt: dict[str, Any]) -> dict[str, Any]:
    """``receipt`` with its whole numbers as ints: a protobuf Value carries every number as a double."""
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in receipt.items()}


def test_preparations_count_against_the_callers_rate_with_its_messages(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    Agent.across_tenants.filter(pk=recipient.agent.pk).update(rate_limit=1)
    prepared(recipient, issuer, key)
    second = prepare(recipient, {"request": request_for(recipient.url, issuer.token(recipient.url))}, key=key)
    assert second.status_code == 429
    assert int(second.headers["retry-after"]) >= 1
    assert "Too many messages" in second.json()["error"]["message"]
    assert PreparedExchange.across_tenants.count() == 1


def test_a_request_that_expires_unrun_is_deleted_and_refused_from_then_on(
    recipient: Endpoint, issuer: Issuer, key: str
) -> None:
    _, reference = prepared(recipient, issuer, key)
    PreparedExchange.across_tenants.update(expires_at="2000-01-01T00:00:00Z")

    assert services.prepared_expire() == 1

    row = PreparedExchange.across_tenants.get()
    assert (row.request, row.refusal) == (None, services.EXPIRED)
    task = send(recipient, exchange_message(reference), key=key)
    assert task.status.state == TaskState.TASK_STATE_REJECTED
    assert task.status.message.parts[0].text == services.EXPIRED
    assert services.prepared_expire() == 0
    assert not Run.across_tenants.exists()
