"""A message sent again — a counterparty that lost our answer — gets its Task as it stands, at A2A
1.0 and on the 0.3 wire, and nothing is applied twice; a used messageId with another move is
still refused.

The counterparty is a2a-sdk's own client against the live stack's gateway, sending the very same
message twice (its ids included); a raw JSON-RPC call is another caller, from another address.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from a2a.helpers import new_data_message
from a2a.types import Message, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask
from agents.models import Agent
from negotiations.models import Negotiation, Settlement, Turn
from tests.a2a_gateway.conftest import Endpoint, counts, move, proposal
from tests.a2a_gateway.rpc import call, refusal, task_of
from tests.a2a_gateway.servers import on_wire
from tests.a2a_gateway.test_streaming import stream

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]
USED = "was already used in this task"


def opening(data: dict[str, Any]) -> Message:
    """A first message as our own client sends it: its own messageId and contextId, no taskId."""
    return new_data_message(data, role=Role.ROLE_USER, context_id=str(uuid.uuid4()))


def on_task(data: dict[str, Any], task: Task) -> Message:
    return new_data_message(data, role=Role.ROLE_USER, task_id=task.id, context_id=task.context_id)


def copy(message: Message) -> Message:
    again = Message()
    again.CopyFrom(message)
    return again


def their_offer(task: Task) -> str:
    [part] = task.history[-1].parts
    return str(MessageToDict(part.data)["offerId"])


@pytest.mark.parametrize("wire", WIRES)
def test_a_first_message_sent_again_gets_its_task_and_is_applied_once(
    seller_endpoint: Endpoint, seller: Agent, wire: str
) -> None:
    card = on_wire(seller_endpoint.card(), wire)
    first = opening(proposal(800))
    answered = seller_endpoint.send(first, card=card)
    before = counts()

    again = seller_endpoint.send(copy(first), card=card)

    assert MessageToDict(again) == MessageToDict(answered)
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert again.history[0].message_id == first.message_id
    assert counts() == before == {"Negotiation": 1, "Turn": 2, "Settlement": 0, "A2ATask": 1}


@pytest.mark.parametrize("wire", WIRES)
def test_a_closing_move_sent_again_gets_the_finished_task_and_is_applied_once(
    seller_endpoint: Endpoint, seller: Agent, wire: str
) -> None:
    card = on_wire(seller_endpoint.card(), wire)
    task = seller_endpoint.send(opening(proposal(800)), card=card)
    accept = on_task(
        move(
            "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=their_offer(task)
        ),
        task,
    )
    settled = seller_endpoint.send(accept, card=card)
    assert settled.status.state == TaskState.TASK_STATE_COMPLETED
    before = counts()

    again = seller_endpoint.send(copy(accept), card=card)

    assert MessageToDict(again) == MessageToDict(settled)
    assert counts() == before == {"Negotiation": 1, "Turn": 4, "Settlement": 1, "A2ATask": 1}
    assert Settlement.across_tenants.get().outcome == "agreed"


@pytest.mark.parametrize("wire", WIRES)
def test_a_message_sent_again_on_a_stream_gets_only_its_task(seller_endpoint: Endpoint, wire: str) -> None:
    first = opening(proposal(800))
    answered = seller_endpoint.send(first, card=on_wire(seller_endpoint.card(), wire))
    before = counts()

    events = stream(seller_endpoint, copy(first), wire)

    assert [event.WhichOneof("payload") for event in events] == ["task"]
    assert MessageToDict(events[0].task) == MessageToDict(answered)
    assert counts() == before


def test_a_follow_up_sent_again_by_task_id_alone_gets_its_task(seller_endpoint: Endpoint) -> None:
    task = seller_endpoint.send(opening(proposal(800)))
    counter = on_task(move("counter", "€900, then.", terms={"amount": 900, "currency": "EUR"}), task)
    answered = seller_endpoint.send(counter)
    again = copy(counter)
    again.ClearField("context_id")

    assert MessageToDict(seller_endpoint.send(again)) == MessageToDict(answered)
    assert Turn.across_tenants.count() == 4


def test_a_used_message_id_with_another_move_or_an_older_one_is_still_refused(
    seller_endpoint: Endpoint,
) -> None:
    task = seller_endpoint.send(opening(proposal(800)))
    counter = on_task(move("counter", "€900, then.", terms={"amount": 900, "currency": "EUR"}), task)
    seller_endpoint.send(counter)
    before = counts()
    changed = MessageToDict(counter)
    changed["parts"][0]["data"]["terms"]["amount"] = 950
    # The first message exactly as applied, sent again after a later one.
    older = MessageToDict(task.history[0])

    for sent in (changed, older):
        answer = seller_endpoint.rpc("SendMessage", {"message": sent})
        used = refusal(answer, status=200, code=-32602)
        assert used == f"Invalid negotiation move: message.messageId {sent['messageId']!r} {USED}"
    assert counts() == before


def test_another_caller_sending_the_same_first_message_gets_a_task_of_its_own(
    seller_endpoint: Endpoint, seller: Agent
) -> None:
    first = MessageToDict(opening(proposal(800)))
    mine = task_of(call(seller_endpoint.url, "SendMessage", {"message": first}))

    theirs = task_of(call(seller_endpoint.url, "SendMessage", {"message": first}, address="127.0.0.2"))

    assert theirs["id"] != mine["id"]
    assert A2ATask.across_tenants.filter(agent=seller).count() == 2
    assert Negotiation.across_tenants.filter(agent=seller).count() == 2
