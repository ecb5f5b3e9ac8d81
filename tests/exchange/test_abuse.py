"""Agent Exchange, attacked: what a hostile peer or a confused host tries, refused without a leak.

Recipient-side tests run against the live stack (its real web process, over loopback HTTP);
requester-side tests run the worker's send in this process against hand-written hostile
recipients on loopback (:mod:`tests.exchange.servers`), as tests/exchange/test_client.py does.
Nothing of ours is mocked.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from google.protobuf.json_format import MessageToDict
from rest_framework.test import APIClient

from a2a_gateway.auth import inbound_key_create
from a2a_gateway.models import A2ATask
from agents.models import Agent, Intent, Run
from api.models import IdempotencyKey
from exchange import outbound, services, wire
from exchange.models import OutboundExchange, PreparedExchange
from exchange.outbound import INTERNAL_ERROR
from parley.edge import API_KEY_HEADER
from parley.models import Tenant
from parley.services import api_key_create
from tests.a2a_gateway.conftest import Endpoint, endpoint_of, proposal, proved_host_name, run
from tests.conftest import LiveStack, wait_until
from tests.exchange.issuer import ISSUER, Issuer, request_for
from tests.exchange.servers import Behaviour, Recipient
from tests.exchange.test_recipient import exchange_message, prepare, prepared

live = pytest.mark.django_db(transaction=True)
local = pytest.mark.django_db

Send = Callable[..., OutboundExchange]
RecipientFor = Callable[..., Recipient]
SECRET = "hunter2-secret"  # the mailbox password request_for puts in ``protected``


@pytest.fixture
def recipient(live_stack: LiveStack, seller: Agent, issuer: Issuer) -> Endpoint:
    """The seller's endpoint, taking Agent Exchange requests from tokens ``issuer`` signs."""
    services.profile_save(agent=seller, values={"issuer": ISSUER, "jwks": issuer.jwks})
    return endpoint_of(live_stack, seller)


@pytest.fixture
def host_api(tenant: Tenant, owner: AbstractUser) -> APIClient:
    """The host's API, with a key of ``tenant`` holding every scope."""
    client = APIClient()
    raw = api_key_create(tenant=tenant, name="backend", scopes=["read", "write", "admin"], user=owner)[1]  # type: ignore[arg-type]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def key(recipient: Endpoint) -> str:
    """An inbound key of the recipient, held by the requester."""
    return inbound_key_create(agent=recipient.agent, name="requester")[1]


def send_reference(
    endpoint: Endpoint, reference: str, *, caller_key: str, task_id: str | None = None
) -> dict[str, Any]:
    """POST an activated A2A 1.0 SendMessage carrying ``reference``; the JSON-RPC answer as it came."""
    message = MessageToDict(exchange_message(reference))
    if task_id:
        message["taskId"] = task_id
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", API_KEY_HEADER: caller_key, "A2A-Extensions": wire.EXTENSION_URI}
    answer: dict[str, Any] = run(lambda http: http.post(endpoint.url, json=body, headers=headers)).json()
    return answer


# --- The requester -----------------------------------------------------------------------------------


@local
def test_the_requester_refuses_a_request_addressed_to_another_agent_than_the_one_it_prepares_with(
    agent: Agent, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    """The host names ``url`` and the request names ``recipient``: they must agree, or the request
    (its delegation token for the bank's agent, its mailbox password) would go in full to whatever
    agent ``url`` names, which could replay the token at the bank."""
    elsewhere = recipient_for()
    bank = "https://bank.example/a2a/bank/payments"
    request = request_for(bank, issuer.token(bank))

    with pytest.raises(ValidationError) as refused:
        outbound.exchange_send_start(agent=agent, url=elsewhere.url, request=request)

    [said] = refused.value.message_dict["request"]
    assert said.startswith("request.recipient: names 'https://bank.example/a2a/bank/payments'")
    assert elsewhere.preparations == []
    assert not OutboundExchange.across_tenants.exists()


@local
def test_a_receipt_naming_a_mandate_the_request_did_not_carry_is_refused(
    send: Send, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    """A receipt for a request without a mandate may not claim one (here its "id" is the mailbox
    password the recipient was sent): the host's record, shown to every key with ``read``, would hold it."""
    peer = recipient_for()
    request = request_for(peer.url, issuer.token(peer.url))
    peer.behaviour.receipt = {
        "exchangeId": request["exchangeId"],
        "reference": wire.reference_of(request),
        "status": "submitted",
        "completedAt": int(time.time() * 1000),
        "processingMode": wire.PROCESSING_MODE,
        "modelObservedSecret": False,
        "mandateId": SECRET,
        "usesRemaining": 3,
    }

    exchange = send(peer.url, request)

    assert exchange.status == OutboundExchange.Status.FAILED
    assert SECRET not in json.dumps(exchange.receipt)


@local
def test_a_recipients_refusal_does_not_bring_a_protected_value_back_into_the_record(
    send: Send, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    """A peer's words quoted into ``error`` have the request's protected values blotted out: the
    API (every ``read`` key) and the dashboard never show them again."""
    peer = recipient_for(
        Behaviour(task_state="TASK_STATE_REJECTED", status_text=f"The mailbox refused the password {SECRET}.")
    )

    exchange = send(peer.url, request_for(peer.url, issuer.token(peer.url)))

    assert exchange.status == OutboundExchange.Status.FAILED
    assert SECRET not in exchange.error


@local
def test_a_receipt_with_a_number_json_cannot_carry_fails_with_a_clear_error(
    send: Send, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    """A hostile recipient's ``usesRemaining`` of 2**60 ends the exchange as "its receipt is not
    valid", not as an internal error."""
    peer = recipient_for()
    request = request_for(peer.url, issuer.token(peer.url))
    peer.behaviour.receipt = {
        "exchangeId": request["exchangeId"],
        "reference": wire.reference_of(request),
        "status": "submitted",
        "completedAt": int(time.time() * 1000),
        "processingMode": wire.PROCESSING_MODE,
        "modelObservedSecret": False,
        "mandateId": "mandate-1",
        "usesRemaining": 2**60,
    }

    exchange = send(peer.url, request)

    assert exchange.status == OutboundExchange.Status.FAILED
    assert exchange.error != INTERNAL_ERROR
    assert "receipt" in exchange.error


@local
def test_the_api_does_not_echo_protected_values_in_its_errors_nor_keep_them(
    host_api: APIClient,
    agent: Agent,
    issuer: Issuer,
) -> None:
    """A wrong-typed ``protected`` (a list of credentials, say) is refused naming where and which
    rule, never the value: the 400 is stored for the Idempotency-Key's lifetime."""
    url = "https://recipient.example/a2a/globex/helpdesk"
    request = request_for(url, issuer.token(url), protected=[{"user": "tomas", "password": SECRET}])

    answer = host_api.post(
        f"/api/v1/agents/{agent.pk}/exchanges",
        {"url": url, "request": request},
        format="json",
        HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
    )

    assert answer.status_code == 400
    assert SECRET not in answer.content.decode()
    assert SECRET not in json.dumps([row.response for row in IdempotencyKey.across_tenants.all()])


# --- The recipient: preparation ----------------------------------------------------------------------


@live
def test_preparation_of_a_far_future_expires_at_is_a_clear_400(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """An ``expiresAt`` past the last second a date can name is a 400 naming it, no-store, not a 500."""
    request = request_for(recipient.url, issuer.token(recipient.url), expiresAt=2**53 - 1)

    response = prepare(recipient, {"request": request}, key=key)

    assert response.status_code == 400, response.text
    assert "request.expiresAt" in response.json()["error"]["message"]
    assert response.headers["cache-control"] == "no-store"
    assert not PreparedExchange.across_tenants.exists()


@live
def test_preparation_refuses_a_request_that_can_never_run(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """An instruction of white space only is refused at preparation, before it is stored (token and
    protected values included, its exchangeId spent), not at the A2A message."""
    request = request_for(recipient.url, issuer.token(recipient.url), instruction="\u00a0 ")

    response = prepare(recipient, {"request": request}, key=key)

    assert response.status_code == 400, response.text
    assert "request.instruction" in response.json()["error"]["message"]
    assert not PreparedExchange.across_tenants.exists()


@live
def test_preparation_errors_do_not_echo_protected_values(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    request = request_for(
        recipient.url, issuer.token(recipient.url), protected=[{"user": "tomas", "password": SECRET}]
    )

    response = prepare(recipient, {"request": request}, key=key)

    assert response.status_code == 400
    assert "request.protected" in response.text
    assert SECRET not in response.text


@live
def test_a_request_the_host_name_card_describes_is_taken_with_a_token_for_that_url(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """On its host name the agent's card names ``http://<host>/`` as its A2A URL, and the request
    names it as ``recipient``: a token for that URL is one for this agent (docs/agent-exchange.md)."""
    proved_host_name(Agent.across_tenants.get(pk=recipient.agent.pk), "helpdesk.globex.example")
    origin = recipient.url.split("/a2a/")[0]
    host = {"Host": "helpdesk.globex.example"}

    def card() -> dict[str, Any] | None:
        got = run(lambda http: http.get(f"{origin}/.well-known/agent-card.json", headers=host))
        return got.json() if got.status_code == 200 else None

    url = wait_until(card, what="the host name to be served")["supportedInterfaces"][0]["url"]
    request = request_for(url, issuer.token(url))
    headers = {**host, "Content-Type": wire.PREPARATION_MEDIA_TYPE, API_KEY_HEADER: key}

    response = run(
        lambda http: http.post(
            f"{origin}{wire.PREPARATION_PATH}", content=json.dumps({"request": request}), headers=headers
        )
    )

    assert response.status_code == 200, response.text


@live
def test_a_jwt_that_is_not_typed_as_an_access_token_is_refused_as_the_delegation_token(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """The delegation is "a JWT access token (RFC 9068)", whose §4 requires rejecting a ``typ``
    other than ``at+jwt``: no other JWT the issuer signs for this audience with a ``scope`` claim (a
    standing mandate, an ID token) delegates as an access token."""
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": "party:tomas",
        "aud": recipient.url,
        "scope": "agent-exchange",
        "jti": "mandate-1",
        "maxUses": 5,
        "exp": now + 3600,
    }
    token = jwt.encode(
        claims, issuer.key, algorithm="ES256", headers={"kid": issuer.kid, "typ": "mandate+jwt"}
    )

    response = prepare(recipient, {"request": request_for(recipient.url, token)}, key=key)

    assert response.status_code == 401, response.text
    assert not PreparedExchange.across_tenants.exists()


# --- The recipient: execution ------------------------------------------------------------------------


@live
def test_an_expired_request_is_dropped_once_refused(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """A request refused for good (expired) is deleted with its delegation token and mailbox
    password, as one that ran is."""
    _, reference = prepared(recipient, issuer, key)
    PreparedExchange.across_tenants.update(expires_at="2000-01-01T00:00:00Z")

    answer = send_reference(recipient, reference, caller_key=key)

    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_REJECTED"
    assert PreparedExchange.across_tenants.get().request is None


@live
def test_a_mandate_with_more_uses_than_json_can_count_is_refused_at_preparation(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """A validly signed mandate with ``maxUses`` 2**60 ("unlimited") would give a receipt whose
    ``usesRemaining`` JSON cannot carry exactly: it is refused, clearly, before anything is stored."""
    mandate = issuer.mandate(recipient.url, max_uses=2**60)
    request = request_for(recipient.url, issuer.token(recipient.url), mandate=mandate)

    response = prepare(recipient, {"request": request}, key=key)

    assert response.status_code == 401
    assert "maxUses is not an integer from 1 to 9007199254740991" in response.json()["error"]["message"]
    assert not PreparedExchange.across_tenants.exists()


@live
def test_an_exchange_does_not_run_past_the_tenants_model_budget(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """Once the tenant's monthly model budget is spent, an Agent Exchange message is refused as every
    other inbound turn is: it would start a model run."""
    agent = recipient.agent
    agent.tenant.model_budget = Decimal("1.00")
    agent.tenant.save()
    intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Earlier work.")
    Run.objects.create(
        tenant=agent.tenant, agent=agent, intent=intent, cost=Decimal("1.00"), status=Run.Status.DONE
    )
    _, reference = prepared(recipient, issuer, key)

    send_reference(recipient, reference, caller_key=key)

    assert Run.across_tenants.filter(agent=agent).count() == 1


@live
def test_an_exchange_message_cannot_take_over_an_open_negotiation_task(
    recipient: Endpoint,
    issuer: Issuer,
    key: str,
) -> None:
    """An exchange message naming an existing task (a negotiation's) is refused: executed there,
    its receipt would end the negotiation's task while the Negotiation stayed open."""
    move = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": proposal(800)}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": move}}
    opened = run(
        lambda http: http.post(recipient.url, json=body, headers={"A2A-Version": "1.0", API_KEY_HEADER: key})
    ).json()["result"]["task"]
    assert opened["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    _, reference = prepared(recipient, issuer, key)

    send_reference(recipient, reference, caller_key=key, task_id=opened["id"])

    assert A2ATask.across_tenants.get(task_id=opened["id"]).state == "TASK_STATE_INPUT_REQUIRED"
    assert not Run.across_tenants.filter(agent=recipient.agent).exists()
