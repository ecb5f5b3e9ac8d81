"""The -32010 refusal (index-wire-protocol.md §1 and §4): an agent that negotiates on its own
behalf about something takes no new inbound negotiation about the same thing.

"The same thing" is the intent: inbound negotiations join the agent's latest
one, so a first message (no taskId) is refused with HTTP 409 and -32010 while
the agent has a binding outbound negotiation under it — before anything is
written. Follow-ups on tasks already under way are answered.
"""

from __future__ import annotations

import httpx
import pytest

from agents.models import Agent, Intent, Run
from negotiations import selectors
from negotiations.models import Negotiation, Settlement
from tests.conftest import LiveStack
from tests.interop.conftest import counts, negotiate
from tests.interop.index_peer import IndexClient, IndexClientError, ScriptedBuyer

pytestmark = pytest.mark.django_db(transaction=True)

BUSY = (
    "This agent already has an unfinished negotiation of its own about the same thing; "
    "try again once it has settled."
)


@pytest.fixture
def seller_intent(seller: Agent) -> Intent:
    return Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Take on a new client.")


def outbound(agent: Agent, intent: Intent, status: str = "open", outcome: str | None = None) -> Negotiation:
    """An outbound negotiation of ``agent`` under ``intent``, settled with ``outcome`` if given."""
    negotiation = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="http://127.0.0.1:9/elsewhere",
        status=Negotiation.Status.SETTLED if outcome else status,
    )
    if outcome:
        Settlement.objects.create(
            tenant=agent.tenant, negotiation=negotiation, outcome=outcome, basis="state", reason="."
        )
    return negotiation


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("open", None),
        ("waiting", None),
        ("out_of_turns", None),
        ("settled", "agreed"),
        ("settled", "unanswered"),
    ],
)
def test_a_first_message_while_the_agent_is_bound_is_refused_with_32010(
    seller_url: str, seller: Agent, seller_intent: Intent, status: str, outcome: str | None
) -> None:
    bound = outbound(seller, seller_intent, status, outcome)
    assert selectors.binding_outbound(seller, seller_intent) == bound
    before = counts()

    with pytest.raises(IndexClientError) as refused:
        IndexClient().initiate(seller_url)

    assert refused.value.status == 409
    assert refused.value.error == {"code": -32010, "message": BUSY}
    assert counts() == before


def test_the_refusal_is_the_same_on_the_1_0_wire(
    seller_url: str, seller: Agent, seller_intent: Intent
) -> None:
    outbound(seller, seller_intent)
    before = counts()
    body = {
        "jsonrpc": "2.0",
        "id": "r-1",
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m-1",
                "role": "ROLE_USER",
                "parts": [{"data": {"action": "propose", "message": "Hello."}}],
            }
        },
    }

    response = httpx.post(seller_url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)

    assert response.status_code == 409
    assert response.json() == {"jsonrpc": "2.0", "id": "r-1", "error": {"code": -32010, "message": BUSY}}
    assert counts() == before


@pytest.mark.parametrize(
    ("status", "outcome"), [("failed", None), ("settled", "declined"), ("settled", "conflict")]
)
def test_an_outbound_negotiation_that_no_longer_binds_lets_a_first_message_in(
    seller_url: str, seller: Agent, seller_intent: Intent, status: str, outcome: str | None
) -> None:
    outbound(seller, seller_intent, status, outcome)
    assert selectors.binding_outbound(seller, seller_intent) is None

    turn = IndexClient().initiate(seller_url)

    assert turn.outcome == "input-required"
    inbound = Negotiation.objects.get(agent=seller, direction=Negotiation.Direction.INBOUND)
    assert inbound.intent == seller_intent


def test_only_the_intent_inbound_negotiations_join_counts(seller_url: str, seller: Agent) -> None:
    """Bound under an older intent, the agent takes inbound negotiations under its latest."""
    older = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell the old desk.")
    outbound(seller, older)
    Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Take on a new client.")

    assert IndexClient().initiate(seller_url).outcome == "input-required"


def test_an_agent_without_intents_is_never_refused(seller_url: str, seller: Agent) -> None:
    assert selectors.inbound_intent(seller) is None
    assert selectors.binding_outbound(seller, None) is None

    assert IndexClient().initiate(seller_url).outcome == "input-required"


def test_a_follow_up_on_a_task_under_way_is_answered(
    seller_url: str, seller: Agent, seller_intent: Intent
) -> None:
    client = IndexClient(ScriptedBuyer(opening=800))
    first = client.initiate(seller_url)
    outbound(seller, seller_intent)  # the agent opens one of its own meanwhile

    follow_up = client.continue_(seller_url, first.task)

    assert follow_up.outcome == "input-required"
    assert follow_up.task["id"] == first.task["id"]
    assert len(follow_up.task["history"]) == 4
    with pytest.raises(IndexClientError) as refused:
        IndexClient().initiate(seller_url)
    assert refused.value.error == {"code": -32010, "message": BUSY}


def test_our_own_client_reports_the_refusal(
    live_stack: LiveStack, buyer: Agent, intent: Intent, seller_url: str, seller: Agent, seller_intent: Intent
) -> None:
    """One Parley agent calling another that is bound: our client reads the 409's JSON-RPC body."""
    outbound(seller, seller_intent)

    run, negotiation = negotiate(buyer, intent, seller_url)

    assert negotiation.status == Negotiation.Status.FAILED
    assert negotiation.error == f"{seller_url} refused the move (HTTP 409, JSON-RPC -32010): {BUSY}"
    assert not negotiation.turns.exists()
    assert run.status == Run.Status.DONE
    assert not Negotiation.objects.filter(agent=seller, direction=Negotiation.Direction.INBOUND).exists()
