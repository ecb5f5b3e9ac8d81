"""Negotiating with an agent's public endpoint as a counterparty would: a2a-sdk's client, A2A 1.0 and 0.3."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import AgentCard, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.models import A2ATask
from negotiations import negotiator
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.verdict import settle
from negotiations.wire import decode_move, task_record_from_proto
from tests.a2a_gateway.conftest import Endpoint, move, proposal, user_message

pytestmark = pytest.mark.django_db(transaction=True)


def data_of(message: Any) -> dict[str, Any]:
    """The one data part of a 1.0 message, as plain JSON (numbers come back as floats)."""
    [part] = message.parts
    assert part.HasField("data"), part
    return MessageToDict(part.data)


def only_v0_3(card: AgentCard) -> AgentCard:
    """The card as a 0.3-only peer would publish it: the SDK client then speaks ``message/send``."""
    legacy = AgentCard()
    legacy.CopyFrom(card)
    del legacy.supported_interfaces[:]
    legacy.supported_interfaces.extend(i for i in card.supported_interfaces if i.protocol_version == "0.3")
    return legacy


def assert_countered(task: Task, opening: dict[str, Any]) -> dict[str, Any]:
    """The seller answered ``opening`` with a counter above its floor; returns the counter move."""
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    assert data_of(task.history[0]) == {**opening, "terms": {"amount": 800.0, "currency": "EUR"}}
    reply = task.history[-1]
    assert (reply.task_id, reply.context_id) == (task.id, task.context_id)
    counter = data_of(reply)
    decoded = decode_move(counter)
    assert decoded is not None
    assert decoded.action == "propose"  # the seller's own first offer, Boulware from 950 / 0.7
    assert decoded.terms == {"amount": 1358, "currency": "EUR"}
    assert decoded.message == "I can offer €1,358."
    assert decoded.offer_id
    [artifact] = task.artifacts  # the answer as an artifact too; the outcome comes with a terminal reply
    assert (artifact.artifact_id, list(artifact.parts)) == ("negotiator:reply", list(reply.parts))
    return counter


def assert_recorded(task: Task, *, turns: list[tuple[str, str]], state: str) -> Negotiation:
    """The seller's side holds one inbound negotiation on ``task`` with ``turns`` (side, action)."""
    negotiation = Negotiation.across_tenants.get()
    assert negotiation.agent.slug == "idris"
    assert negotiation.direction == Negotiation.Direction.INBOUND
    assert (negotiation.task_id, negotiation.context_id) == (task.id, task.context_id)
    assert negotiation.task_state == state
    assert [(t.seq, t.side, t.action) for t in negotiation.turns.all()] == [
        (seq, side, action) for seq, (side, action) in enumerate(turns, start=1)
    ]
    stored = A2ATask.across_tenants.get()
    assert (stored.task_id, stored.context_id, stored.agent_id) == (
        task.id,
        task.context_id,
        negotiation.agent_id,
    )
    assert stored.state == TaskState.Name(task.status.state)
    assert stored.data["history"] == MessageToDict(task)["history"]
    return negotiation


def test_first_move_gets_a_counter_over_1_0(seller_endpoint: Endpoint) -> None:
    opening = proposal(800)

    task = seller_endpoint.send(user_message(opening))

    counter = assert_countered(task, opening)
    negotiation = assert_recorded(
        task, turns=[("theirs", "propose"), ("ours", "propose")], state="input-required"
    )
    theirs, ours = negotiation.turns.all()
    assert (theirs.terms, theirs.offer_id, theirs.message) == (
        {"amount": 800, "currency": "EUR"},
        opening["offerId"],
        "I can pay €800 a day.",
    )
    assert (ours.terms, ours.offer_id) == ({"amount": 1358, "currency": "EUR"}, counter["offerId"])
    assert negotiation.status == Negotiation.Status.OPEN
    assert not Settlement.across_tenants.exists()


def test_first_move_gets_a_counter_over_0_3_client(seller_endpoint: Endpoint) -> None:
    opening = proposal(800)

    task = seller_endpoint.send(user_message(opening), card=only_v0_3(seller_endpoint.card()))

    assert_countered(task, opening)
    assert_recorded(task, turns=[("theirs", "propose"), ("ours", "propose")], state="input-required")


def test_first_move_over_0_3_wire_is_answered_in_0_3_shape(seller_endpoint: Endpoint) -> None:
    """An Index-style peer: ``message/send``, no A2A-Version header, lower-case roles, parts with kind."""
    opening = proposal(800)
    message = {"messageId": "m-1", "role": "user", "parts": [{"kind": "data", "data": opening}]}

    response = seller_endpoint.rpc("message/send", {"message": message}, version=None, request_id="r-1")

    assert response.status_code == 200
    body = response.json()
    assert (body["jsonrpc"], body["id"]) == ("2.0", "r-1")
    task = body["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "input-required"
    assert [(m["kind"], m["role"], m["taskId"], m["contextId"]) for m in task["history"]] == [
        ("message", "user", task["id"], task["contextId"]),
        ("message", "agent", task["id"], task["contextId"]),
    ]
    assert task["history"][0]["messageId"] == "m-1"
    assert task["history"][0]["parts"] == [
        {"kind": "data", "data": {**opening, "terms": {"amount": 800.0, "currency": "EUR"}}}
    ]
    [reply_part] = task["history"][-1]["parts"]
    assert reply_part["kind"] == "data"
    reply = decode_move(reply_part["data"])
    assert reply is not None
    assert (reply.action, reply.terms) == ("propose", {"amount": 1358, "currency": "EUR"})

    negotiation = Negotiation.across_tenants.get()
    assert (negotiation.task_id, negotiation.context_id) == (task["id"], task["contextId"])
    assert [(t.seq, t.side, t.action) for t in negotiation.turns.all()] == [
        (1, "theirs", "propose"),
        (2, "ours", "propose"),
    ]
    assert A2ATask.across_tenants.get().task_id == task["id"]


def test_follow_up_on_the_task_continues_it(seller_endpoint: Endpoint) -> None:
    first = seller_endpoint.send(user_message(proposal(800)))
    raised = move("counter", "I can stretch to €900.", terms={"amount": 900, "currency": "EUR"})

    task = seller_endpoint.send(user_message(raised, task=first))

    assert (task.id, task.context_id) == (first.id, first.context_id)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT] * 2
    assert [m.message_id for m in task.history[:2]] == [m.message_id for m in first.history]
    assert data_of(task.history[2])["offerId"] == raised["offerId"]
    counter = decode_move(data_of(task.history[3]))
    assert counter is not None
    assert counter.action == "counter"
    assert counter.terms is not None
    assert 950 <= counter.terms["amount"] < 1358
    negotiation = assert_recorded(
        task,
        turns=[("theirs", "propose"), ("ours", "propose"), ("theirs", "counter"), ("ours", "counter")],
        state="input-required",
    )
    assert negotiation.turn_count == 2
    assert not Settlement.across_tenants.exists()


def test_follow_up_naming_only_the_task_gets_its_context(seller_endpoint: Endpoint) -> None:
    """Without ``contextId`` the stored one is used; the SDK alone fails the task
    (docs/wire-format.md#messages)."""
    first = seller_endpoint.send(user_message(proposal(800)))
    follow_up = user_message(proposal(900))
    follow_up.task_id = first.id

    task = seller_endpoint.send(follow_up)

    assert (task.id, task.context_id) == (first.id, first.context_id)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert len(task.history) == 4
    assert Negotiation.across_tenants.get().turns.count() == 4


def assert_settled_as_the_task_says(task: Task, negotiation: Negotiation) -> Settlement:
    """The seller's settlement is what ``verdict.settle`` computes over the returned Task."""
    expected = settle(
        task_record_from_proto(task),
        our_role="agent",
        terminal_actions=negotiator.terminal_actions(negotiation.agent),
    )
    assert expected is not None
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    recorded = (
        settlement.outcome,
        settlement.basis,
        settlement.terms,
        settlement.reason,
        settlement.ended_by,
    )
    assert recorded == (expected.outcome, expected.basis, expected.terms, expected.reason, expected.ended_by)
    assert negotiation.status == Negotiation.Status.SETTLED
    return settlement


def test_accepting_the_sellers_offer_completes_the_task(seller_endpoint: Endpoint) -> None:
    first = seller_endpoint.send(user_message(proposal(800)))
    offer = data_of(first.history[-1])
    acceptance = move(
        "accept",
        "Agreed: €1,330.",
        terms={"amount": 1358, "currency": "EUR"},
        accepts_offer_id=offer["offerId"],
    )

    task = seller_endpoint.send(user_message(acceptance, task=first))

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT] * 2
    confirmation = decode_move(data_of(task.history[-1]))
    assert confirmation is not None
    assert (confirmation.action, confirmation.accepts_offer_id, confirmation.terms) == (
        "accept",
        offer["offerId"],
        {"amount": 1358, "currency": "EUR"},
    )
    answer, artifact = task.artifacts
    assert (answer.artifact_id, list(answer.parts)) == ("negotiator:reply", list(task.history[-1].parts))
    assert (artifact.artifact_id, artifact.name) == ("negotiator:negotiation-outcome", "negotiation-outcome")
    outcome = data_of(artifact)
    negotiation = assert_recorded(
        task,
        turns=[("theirs", "propose"), ("ours", "propose"), ("theirs", "accept"), ("ours", "accept")],
        state="completed",
    )
    settlement = assert_settled_as_the_task_says(task, negotiation)
    assert (settlement.outcome, settlement.basis) == ("agreed", "reference")
    assert settlement.terms == {"amount": 1358, "currency": "EUR"}
    assert outcome == {
        "state": "completed",
        "status": "agreed",
        "basis": "reference",
        "reason": settlement.reason,
        "terms": {"amount": 1358.0, "currency": "EUR"},
    }


def test_rejecting_ends_the_task_declined(seller_endpoint: Endpoint) -> None:
    first = seller_endpoint.send(user_message(proposal(800)))

    task = seller_endpoint.send(user_message(move("reject", "Too rich for us."), task=first))

    assert task.status.state == TaskState.TASK_STATE_REJECTED
    reply = decode_move(data_of(task.history[-1]))
    assert reply is not None
    assert reply.action == "reject"
    _, artifact = task.artifacts  # the answer, then the outcome
    assert data_of(artifact)["status"] == "declined"
    negotiation = assert_recorded(
        task,
        turns=[("theirs", "propose"), ("ours", "propose"), ("theirs", "reject"), ("ours", "reject")],
        state="rejected",
    )
    settlement = assert_settled_as_the_task_says(task, negotiation)
    assert (settlement.outcome, settlement.basis, settlement.terms) == ("declined", "state", None)


def test_full_run_over_0_3_wire_closes_with_the_outcome_artifact(seller_endpoint: Endpoint) -> None:
    """An Index-style peer carries taskId and contextId on its follow-up and reads 0.3 JSON."""
    first = seller_endpoint.rpc(
        "message/send",
        {"message": {"messageId": "m-1", "role": "user", "parts": [{"kind": "data", "data": proposal(800)}]}},
        version=None,
    ).json()["result"]
    offer = first["history"][-1]["parts"][0]["data"]
    acceptance = move(
        "accept", "Agreed.", terms={"amount": 1358, "currency": "EUR"}, accepts_offer_id=offer["offerId"]
    )
    message = {
        "messageId": "m-2",
        "role": "user",
        "taskId": first["id"],
        "contextId": first["contextId"],
        "parts": [{"kind": "data", "data": acceptance}],
    }

    task = seller_endpoint.rpc("message/send", {"message": message}, version=None).json()["result"]

    assert task["status"]["state"] == "completed"
    assert [m["role"] for m in task["history"]] == ["user", "agent", "user", "agent"]
    assert task["artifacts"] == [
        {"artifactId": "negotiator:reply", "name": "reply", "parts": task["history"][-1]["parts"]},
        {
            "artifactId": "negotiator:negotiation-outcome",
            "name": "negotiation-outcome",
            "parts": [
                {
                    "kind": "data",
                    "data": {
                        "state": "completed",
                        "status": "agreed",
                        "basis": "reference",
                        "reason": f'Closing move accepts offer "{offer["offerId"]}".',
                        "terms": {"amount": 1358.0, "currency": "EUR"},
                    },
                }
            ],
        },
    ]
    settlement = Settlement.across_tenants.get()
    assert (settlement.outcome, settlement.basis, settlement.terms) == (
        "agreed",
        "reference",
        {"amount": 1358, "currency": "EUR"},
    )
    assert Turn.across_tenants.count() == 4
    assert A2ATask.across_tenants.get().state == "TASK_STATE_COMPLETED"
