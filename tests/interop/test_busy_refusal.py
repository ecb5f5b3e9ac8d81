"""The one-live rule at the door (docs/design.md#one-live-negotiation): an agent that
negotiates on its own behalf about something takes no new inbound negotiation about the same thing.

"The same thing" is the intent: inbound negotiations join the agent's latest
one, so a first message (no taskId) is refused while the agent has a binding
outbound negotiation under it — before anything is written — and the refusal
says which case it is:

* its own negotiation is unfinished (going, waiting on its party, out of turns,
  ``unanswered``, failed once its Task existed): -32010 :data:`BUSY`, "try again
  once it has settled" — HTTP 409 on the 0.3 wire, as an Index server answers;
  HTTP 200 on 1.0, as a2a-sdk answers every error (its client reads a JSON-RPC
  error only from a 2xx answer);
* it closed as a deal (agreed or unconfirmed), which stands: -32004
  :data:`DEAL_STANDS` with HTTP 200 on both wires — no retry can succeed.

Follow-ups on tasks already under way are answered.
"""

from __future__ import annotations

import httpx
import pytest
from a2a.client.errors import A2AClientError
from a2a.utils.errors import UnsupportedOperationError

from agents.models import Agent, Intent, Run
from negotiations import selectors
from negotiations.models import Negotiation, Settlement
from tests.a2a_gateway.conftest import Endpoint, proposal, user_message
from tests.a2a_gateway.servers import on_wire
from tests.conftest import LiveStack
from tests.interop.conftest import counts, negotiate
from tests.interop.index_peer import IndexClient, IndexClientError, ScriptedBuyer

pytestmark = pytest.mark.django_db(transaction=True)

BUSY = (
    "This agent already has an unfinished negotiation of its own about the same thing; "
    "try again once it has settled."
)
DEAL_STANDS = (
    "This agent has already closed a deal about the same thing, and that deal stands: it takes no new "
    "negotiation about it, so sending again will not help. To discuss the deal, contact the party it "
    "acts for or its host directly."
)
# The agent's own negotiation under the intent: (status, outcome, task id).
UNFINISHED = [
    pytest.param("open", None, "", id="going"),
    pytest.param("waiting", None, "", id="waiting-on-its-party"),
    pytest.param("out_of_turns", None, "", id="out-of-turns"),
    pytest.param("settled", "unanswered", "", id="unanswered"),
    pytest.param("failed", None, "their-task", id="failed-after-reaching-them"),
]
DEALS = [
    pytest.param("settled", "agreed", "", id="agreed"),
    pytest.param("settled", "unconfirmed", "", id="unconfirmed"),
]


@pytest.fixture
def seller_intent(seller: Agent) -> Intent:
    return Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Take on a new client.")


def outbound(
    agent: Agent, intent: Intent, status: str = "open", outcome: str | None = None, task_id: str = ""
) -> Negotiation:
    """An outbound negotiation of ``agent`` under ``intent`` in ``status``, settled with ``outcome``
    if given, its Task ``task_id`` ("" for none yet)."""
    negotiation = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="http://127.0.0.1:9/elsewhere",
        status=status,
        task_id=task_id,
    )
    if outcome:
        Settlement.objects.create(
            tenant=agent.tenant, negotiation=negotiation, outcome=outcome, basis="state", reason="."
        )
    return negotiation


@pytest.mark.parametrize(("status", "outcome", "task_id"), UNFINISHED)
def test_a_first_message_while_the_agent_negotiates_is_refused_until_it_settles(
    seller_url: str, seller: Agent, seller_intent: Intent, status: str, outcome: str | None, task_id: str
) -> None:
    bound = outbound(seller, seller_intent, status, outcome, task_id)
    assert selectors.binding_outbound(seller, seller_intent) == bound
    before = counts()

    with pytest.raises(IndexClientError) as refused:
        IndexClient().initiate(seller_url)

    assert refused.value.status == 409
    assert refused.value.error == {"code": -32010, "message": BUSY}
    assert counts() == before


@pytest.mark.parametrize(("status", "outcome", "task_id"), DEALS)
def test_a_first_message_after_a_deal_is_refused_for_good(
    seller_url: str, seller: Agent, seller_intent: Intent, status: str, outcome: str, task_id: str
) -> None:
    """A deal stands: the refusal says so, and that sending again will not help (no "try again")."""
    outbound(seller, seller_intent, status, outcome, task_id)
    before = counts()

    with pytest.raises(IndexClientError) as refused:
        IndexClient().initiate(seller_url)

    assert refused.value.status == 200
    assert refused.value.error is not None
    assert (refused.value.error["code"], refused.value.error["message"]) == (-32004, DEAL_STANDS)
    assert counts() == before


def test_a_deal_outweighs_an_unfinished_negotiation(
    seller_url: str, seller: Agent, seller_intent: Intent
) -> None:
    """Retrying cannot succeed while a deal stands, whatever else is still going."""
    outbound(seller, seller_intent, "open")
    deal = outbound(seller, seller_intent, "settled", "agreed")
    assert selectors.binding_outbound(seller, seller_intent) == deal

    with pytest.raises(IndexClientError) as refused:
        IndexClient().initiate(seller_url)

    assert refused.value.error is not None
    assert refused.value.error["message"] == DEAL_STANDS


@pytest.mark.parametrize(
    ("outcome", "code", "message"),
    [(None, -32010, BUSY), ("agreed", -32004, DEAL_STANDS)],
    ids=["busy", "deal"],
)
def test_the_1_0_wire_answers_the_refusal_as_the_sdk_answers_errors(
    seller_url: str, seller: Agent, seller_intent: Intent, outcome: str | None, code: int, message: str
) -> None:
    outbound(seller, seller_intent, "settled" if outcome else "open", outcome)
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

    assert response.status_code == 200
    answer = response.json()
    assert (answer["id"], answer["error"]["code"], answer["error"]["message"]) == ("r-1", code, message)
    assert counts() == before


@pytest.mark.parametrize("wire", ["1.0", "0.3"])
def test_a2a_sdk_clients_read_that_a_deal_stands(
    seller_url: str, seller: Agent, seller_intent: Intent, wire: str
) -> None:
    outbound(seller, seller_intent, "settled", "agreed")
    endpoint = Endpoint(agent=seller, url=seller_url)
    before = counts()

    with pytest.raises(UnsupportedOperationError) as refused:
        endpoint.send(user_message(proposal(800)), card=on_wire(endpoint.card(), wire))

    assert refused.value.message == DEAL_STANDS
    assert counts() == before


def test_a2a_sdk_clients_read_that_the_agent_is_busy(
    seller_url: str, seller: Agent, seller_intent: Intent
) -> None:
    """At 1.0 a2a-sdk's client raises the refusal's code and message. At 0.3 it reports only the
    Index wire's 409 (its 0.3 transport drops the body of a non-2xx answer), whose body says it
    all to a client that reads it, as an Index client does."""
    outbound(seller, seller_intent)
    endpoint = Endpoint(agent=seller, url=seller_url)
    card = endpoint.card()

    with pytest.raises(A2AClientError) as current:
        endpoint.send(user_message(proposal(800)), card=on_wire(card, "1.0"))
    with pytest.raises(A2AClientError) as legacy:
        endpoint.send(user_message(proposal(800)), card=on_wire(card, "0.3"))

    assert current.value.message == f"JSON-RPC Error -32010: {BUSY}"
    assert legacy.value.message == "HTTP Error: 409"
    cause = legacy.value.__cause__
    assert isinstance(cause, httpx.HTTPStatusError)
    assert cause.response.json()["error"] == {"code": -32010, "message": BUSY}


@pytest.mark.parametrize(
    ("status", "outcome"), [("failed", None), ("settled", "declined"), ("settled", "conflict")]
)
def test_an_outbound_negotiation_that_no_longer_binds_lets_a_first_message_in(
    seller_url: str, seller: Agent, seller_intent: Intent, status: str, outcome: str | None
) -> None:
    outbound(seller, seller_intent, "settled" if outcome else status, outcome)
    assert selectors.binding_outbound(seller, seller_intent) is None

    turn = IndexClient().initiate(seller_url)

    assert turn.outcome == "input-required"
    inbound = Negotiation.across_tenants.get(agent=seller, direction=Negotiation.Direction.INBOUND)
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
    assert (refused.value.status, refused.value.error) == (409, {"code": -32010, "message": BUSY})


@pytest.mark.parametrize(
    ("outcome", "refusal"),
    [(None, f"JSON-RPC -32010): {BUSY}"), ("agreed", f"JSON-RPC -32004): {DEAL_STANDS}")],
    ids=["busy", "deal"],
)
def test_our_own_client_reports_the_refusal(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller_url: str,
    seller: Agent,
    seller_intent: Intent,
    outcome: str | None,
    refusal: str,
) -> None:
    """One Parley agent calling another that is bound (at 1.0): our client names the code and message."""
    outbound(seller, seller_intent, "settled" if outcome else "open", outcome)

    run, negotiation = negotiate(buyer, intent, seller_url)

    assert negotiation.status == Negotiation.Status.FAILED
    assert negotiation.error == f"{seller_url} refused the move ({refusal}"
    assert not negotiation.turns.exists()
    assert run.status == Run.Status.DONE
    assert not Negotiation.across_tenants.filter(
        agent=seller, direction=Negotiation.Direction.INBOUND
    ).exists()
