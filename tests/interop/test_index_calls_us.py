"""An Index-style client (``IndexClient``) negotiates with our public endpoint over the 0.3 wire.

It posts ``message/send`` to the URL we hand out, with no A2A-Version header,
reads each reply from ``history[-1]`` and settles over the Task it got back;
ours is the Settlement row. Both must agree.
"""

from __future__ import annotations

import httpx
import pytest

from agents.models import Agent
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import inbound, parking
from negotiations.verdict import settle
from negotiations.wire import task_record_from_json
from tests.conftest import principal_member
from tests.interop.conftest import counts
from tests.interop.index_peer import (
    TERMINAL_ACTIONS,
    TERMINAL_STATES,
    IndexClient,
    IndexClientError,
    ScriptedBuyer,
    read_move,
    turns_of,
)

pytestmark = pytest.mark.django_db(transaction=True)


def settled_task(seller_url: str) -> dict:
    """A task the Index client has negotiated to the end with our seller."""
    turn = IndexClient(ScriptedBuyer(opening=800, step=100, ceiling=1100)).negotiate(seller_url)
    assert turn.outcome == "completed", turn.task["status"]
    return turn.task


def test_an_index_client_negotiates_with_our_endpoint_to_a_deal(seller_url: str, seller: Agent) -> None:
    client = IndexClient(ScriptedBuyer(opening=800, step=100, ceiling=1100))

    turn = client.negotiate(seller_url)

    task = turn.task
    assert turn.outcome == task["status"]["state"] == "completed"
    # Each reply was ours, last in a full history that alternates as the sends did.
    assert [m["role"] for m in task["history"]] == ["user", "agent"] * turns_of(task)
    assert turns_of(task) == len(client.sent)
    assert turn.decision == read_move(task["history"][-1])
    assert turn.decision is not None
    assert turn.decision["action"] == "accept"
    for body in client.sent[1:]:
        assert (body["params"]["message"]["taskId"], body["params"]["message"]["contextId"]) == (
            task["id"],
            task["contextId"],
        )

    theirs = settle(task_record_from_json(task), our_role="user", terminal_actions=TERMINAL_ACTIONS)
    negotiation = Negotiation.across_tenants.get(agent=seller, task_id=task["id"])
    ours = Settlement.across_tenants.get(negotiation=negotiation)
    assert theirs is not None
    assert (ours.outcome, ours.basis) == ("agreed", "reference")
    assert (theirs.outcome, theirs.basis, theirs.terms) == (ours.outcome, ours.basis, ours.terms)
    assert ours.terms is not None
    assert 950 <= ours.terms["amount"] <= 1100
    assert negotiation.turns.count() == len(task["history"])
    assert list(negotiation.turns.values_list("side", flat=True)) == [Turn.Side.THEIRS, Turn.Side.OURS] * (
        len(task["history"]) // 2
    )
    answer, artifact = task["artifacts"]
    assert (answer["artifactId"], answer["parts"]) == ("negotiator:reply", task["history"][-1]["parts"])
    assert artifact["artifactId"] == "negotiator:negotiation-outcome"
    assert artifact["parts"][0]["data"]["status"] == "agreed"


def test_a_message_to_a_finished_task_is_409_with_32002_on_the_0_3_wire(seller_url: str) -> None:
    task = settled_task(seller_url)
    before = counts()

    with pytest.raises(IndexClientError) as refused:
        IndexClient().send(seller_url, {"action": "propose", "message": "Once more?"}, task)

    assert refused.value.status == 409
    message = (
        f'Task "{task["id"]}" is completed and cannot accept further messages. '
        "Start a new task to negotiate again."
    )
    assert refused.value.error == {"code": -32002, "message": message}
    assert str(refused.value).startswith(f"A2A message/send to {seller_url} failed (409): ")
    assert counts() == before
    # The Index client itself never sends on a task it knows is finished.
    with pytest.raises(ValueError, match="is already completed"):
        IndexClient().continue_(seller_url, task)


def test_a_message_to_a_finished_task_keeps_the_sdks_32004_on_the_1_0_wire(seller_url: str) -> None:
    task = settled_task(seller_url)
    before = counts()
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m-late",
                "role": "ROLE_USER",
                "taskId": task["id"],
                "contextId": task["contextId"],
                "parts": [{"data": {"action": "propose", "message": "Once more?"}}],
            }
        },
    }

    response = httpx.post(seller_url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)

    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == -32004
    assert error["message"] == f"Task {task['id']} is in terminal state: TASK_STATE_COMPLETED"
    assert response.json()["id"] == 7
    assert counts() == before


def test_while_our_party_is_consulted_the_index_client_reads_the_holding_reply_then_gets_a_deal(
    seller_url: str, seller: Agent
) -> None:
    """Our seller knows no floor, so it asks its party: the Index client's reply is the holding text
    (no move, input-required), each time it sends until the party has answered; then it is answered
    with the party's guidance, to a deal both sides verify alike."""
    seller.term_guards = []
    seller.principal = principal_member(seller.tenant, "idris")
    seller.save()
    client = IndexClient(ScriptedBuyer(opening=800, step=100, ceiling=1100))

    first = client.initiate(seller_url)
    again = client.continue_(seller_url, first.task)

    for turn in (first, again):
        assert (turn.outcome, turn.decision) == ("input-required", None)
        assert turn.task["history"][-1]["parts"] == [{"kind": "text", "text": inbound.HOLDING_TEXT}]
    negotiation = Negotiation.across_tenants.get(agent=seller, task_id=first.task["id"])
    assert negotiation.status == Negotiation.Status.WAITING

    parking.negotiation_guidance_give(negotiation=negotiation, answer="At least €700 a day.", user=None)
    turn = again
    while turn.outcome not in TERMINAL_STATES and turns_of(turn.task) < 10:
        turn = client.continue_(seller_url, turn.task)

    assert turn.outcome == "completed"
    theirs = settle(task_record_from_json(turn.task), our_role="user", terminal_actions=TERMINAL_ACTIONS)
    ours = Settlement.across_tenants.get(negotiation=negotiation)
    assert theirs is not None
    assert (ours.outcome, ours.basis) == ("agreed", "reference")
    assert (theirs.outcome, theirs.basis, theirs.terms) == (ours.outcome, ours.basis, ours.terms)
    assert negotiation.turns.count() == len(turn.task["history"])
