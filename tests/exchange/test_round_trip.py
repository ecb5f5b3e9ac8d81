"""The whole round trip between two Parley agents on the running platform, over A2A 1.0 and 0.3.

Tenant ``acme``'s host asks, through the API of the live web process, that its agent send an Agent
Exchange request to tenant ``globex``'s agent; the live worker prepares it with the recipient's
preparation endpoint and sends its reference over A2A; the recipient's gateway verifies the
delegation token against the JWKS its operator configured, starts a run of the instruction and
answers with a receipt. Nothing is stubbed: the token is signed by a key made here
(:class:`tests.exchange.issuer.Issuer`), the requester presents an inbound key the recipient
issued. Over 0.3 the recipient is reached through :class:`tests.exchange.servers.Proxy`, which shows
its card with only the 0.3 interface, so the client speaks ``message/send`` to the real gateway.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import AbstractUser

from a2a_gateway.auth import inbound_key_create
from a2a_gateway.models import A2ATask
from agents import addresses
from agents.models import Agent, Run
from exchange import tasks, wire
from exchange.models import ExchangeProfile, OutboundExchange, PreparedExchange
from negotiations.models import CounterpartyCredential
from parley.edge import API_KEY_HEADER
from parley.models import Tenant
from parley.services import api_key_create
from tests.conftest import LiveStack, wait_until
from tests.exchange.issuer import ISSUER, Issuer, request_for
from tests.exchange.servers import Proxy

pytestmark = pytest.mark.django_db(transaction=True)

SHOWN = {
    "id",
    "url",
    "exchange_id",
    "reference",
    "prepared_by_host",
    "status",
    "receipt",
    "error",
    "created_at",
    "finished_at",
}


@pytest.fixture
def helpdesk(other_tenant: Tenant, issuer: Issuer) -> Agent:
    """Globex's agent, taking Agent Exchange requests from callers with its key."""
    agent = Agent.objects.create(
        tenant=other_tenant,
        slug="helpdesk",
        name="Globex helpdesk",
        inbound_auth=Agent.InboundAuth.API_KEY,
    )
    ExchangeProfile.objects.create(tenant=other_tenant, agent=agent, issuer=ISSUER, jwks=issuer.jwks)
    return agent


@pytest.fixture
def proxy(live_stack: LiveStack) -> Iterator[Proxy]:
    with Proxy(live_stack.url) as server:
        yield server


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_a_request_goes_from_one_parley_agent_to_another_and_only_its_reference_crosses_a2a(
    request: pytest.FixtureRequest,
    live_stack: LiveStack,
    agent: Agent,
    owner: AbstractUser,
    helpdesk: Agent,
    issuer: Issuer,
    version: str,
) -> None:
    recipient = addresses.agent_url(helpdesk)  # what the card names and the request must say
    target = recipient
    proxy: Proxy | None = None
    if version == "0.3":
        proxy = request.getfixturevalue("proxy")
        target = recipient.replace(live_stack.url, proxy.origin)
    _, inbound_key = inbound_key_create(agent=helpdesk, name="acme's agent")
    CounterpartyCredential.objects.create(
        tenant=agent.tenant,
        agent=agent,
        url_prefix=target,
        scheme=CounterpartyCredential.Scheme.API_KEY,
        header=API_KEY_HEADER,
        secret=inbound_key,
    )
    token = issuer.token(recipient)
    sent = request_for(recipient, token)
    _, key = api_key_create(tenant=agent.tenant, name="backend", scopes=["read", "write"], user=owner)
    host = httpx.Client(
        base_url=f"{live_stack.url}/api/v1/agents/{agent.pk}", headers={"Authorization": f"Bearer {key}"}
    )

    if proxy is None:
        answer = host.post(
            "/exchanges",
            json={"url": target, "request": sent},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert answer.status_code == 202, answer.text
        queued = answer.json()
        assert set(queued) == SHOWN
        assert (queued["status"], queued["url"], queued["exchange_id"]) == (
            "queued",
            target,
            sent["exchangeId"],
        )
        assert queued["reference"] == wire.reference_of(sent)
        assert token not in answer.text
        assert "hunter2-secret" not in answer.text
    else:
        # The proxy stands in for the recipient's own origin, which the API refuses as another agent
        # than the request names; the row is queued as the API queues it.
        row = OutboundExchange.objects.create(
            tenant=agent.tenant,
            agent=agent,
            url=target,
            exchange_id=sent["exchangeId"],
            reference=wire.reference_of(sent),
            request=sent,
        )
        tasks.exchange_send.delay(row.pk, agent.tenant_id)
        queued = {"id": row.pk, "reference": row.reference}

    def finished() -> dict[str, Any] | None:
        shown = host.get(f"/exchanges/{queued['id']}").json()
        return None if shown["status"] == "queued" else shown

    done = wait_until(finished, timeout=60, what="the exchange to finish")
    assert done["status"] == "completed", done["error"]
    receipt = done["receipt"]
    assert (receipt["exchangeId"], receipt["reference"]) == (sent["exchangeId"], queued["reference"])
    assert (receipt["status"], receipt["processingMode"], receipt["modelObservedSecret"]) == (
        "submitted",
        "tool-confined",
        False,
    )
    assert isinstance(receipt["completedAt"], int)
    if proxy is not None:
        assert proxy.methods == ["message/send"]  # the 0.3 method: the client spoke 0.3

    # The requester keeps the reference and the receipt, not the request.
    ours = OutboundExchange.across_tenants.get(pk=queued["id"])
    assert ours.request is None
    assert ours.receipt == receipt
    # The recipient ran the instruction, and then let the request go too.
    prepared = PreparedExchange.across_tenants.get(agent=helpdesk)
    assert (prepared.reference, prepared.request, prepared.receipt) == (queued["reference"], None, receipt)
    assert prepared.run is not None
    run = Run.across_tenants.get(pk=prepared.run.pk)
    assert (run.agent_id, run.task) == (helpdesk.pk, sent["instruction"])
    assert run.intent.statement == sent["purpose"]
    # Its A2A task history holds the reference, and nothing of the request.
    [task] = A2ATask.across_tenants.filter(agent=helpdesk)
    history = json.dumps(task.data)
    assert queued["reference"] in history
    for secret in (token, "hunter2-secret", "tomas@example.com", sent["instruction"], sent["purpose"]):
        assert secret not in history
    assert task.state == "TASK_STATE_COMPLETED"
