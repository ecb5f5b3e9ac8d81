"""Agents on chat models negotiating through the running platform (issue 15, "Tests").

Everything runs on the live stack: a uvicorn web process and a Celery worker on
the test database. The models are chat-completions servers on loopback in the
test process (:mod:`tests.chat_server`), whose replies come from the policies of
:mod:`tests.negotiating_policy` — they read only what the platform sends. The
buyer, Tomas's agent in ``acme``, is driven as a user drives it: a run whose
task names the seller's A2A URL, so its loop (on the chat model too) calls
``negotiate``. The seller, Idris in ``globex``, answers at its public endpoint
over real A2A, on a chat model of its own tenant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connections
from django.utils import timezone

from a2a_gateway.caps import month_start
from a2a_gateway.errors import BUSY_CODE
from agents.addresses import agent_url
from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run
from agents.services import questions, runs
from negotiations.model_negotiator import MOVE_TOOL
from negotiations.models import Negotiation, Settlement, Turn
from parley.celery import app as celery_app
from tests.a2a_gateway.conftest import proposal
from tests.a2a_gateway.rpc import call, message, refusal, task_of
from tests.chat_server import ChatServer, Reply, hang, text, tool_calls
from tests.conftest import LiveStack, on_chat_model, runs_settle, wait_until
from tests.negotiating_policy import AgentLoopPolicy, NegotiatingPolicy, asks_for_a_move

pytestmark = pytest.mark.django_db(transaction=True)

CEILING = {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}
FLOOR = 950  # the seller fixture's guard
# One model call as the loopback server counts it: 10 input and 5 output tokens, at the
# endpoints' 2 and 8 per million.
CALL_COST = Decimal("0.00006")
NOT_FOR_THE_WIRE = "Not for the wire."
NEVER_MADE = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(autouse=True)
def _settled_runs() -> Iterator[None]:
    yield
    runs_settle()


@pytest.fixture
def policy() -> AgentLoopPolicy:
    return AgentLoopPolicy()


@pytest.fixture
def buyer_chat(policy: AgentLoopPolicy) -> Iterator[ChatServer]:
    """The buyer's model: its loop and its negotiation turns."""
    with ChatServer(responder=policy) as server:
        yield server


@pytest.fixture
def seller_chat() -> Iterator[ChatServer]:
    """The seller's model, in the seller's tenant: it only ever decides inbound turns."""
    with ChatServer(responder=NegotiatingPolicy()) as server:
        yield server


@pytest.fixture
def buyer(agent: Agent, buyer_chat: ChatServer) -> Agent:
    """Tomas's agent on its chat model, never paying more than €1,100 a day."""
    agent.term_guards = [CEILING]
    agent.save()
    return on_chat_model(agent, buyer_chat)


def seller_on_chat(seller: Agent, seller_chat: ChatServer) -> Agent:
    return on_chat_model(seller, seller_chat, name="guild-model")


def negotiate(
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    *,
    max_tokens: int | None = None,
    max_cost: Decimal | None = None,
) -> Run:
    """Give the buyer the party's task naming the seller's public endpoint, within these budgets."""
    task = f"Find me a fractional CFO for two days a month. Talk to {agent_url(seller)}"
    return runs.run_start(agent=buyer, intent=intent, task=task, max_tokens=max_tokens, max_cost=max_cost)


def finished(run: Run) -> Run:
    def ended() -> Run | None:
        fresh = Run.across_tenants.get(pk=run.pk)
        return fresh if fresh.status not in Run.ACTIVE else None

    ended_run: Run = wait_until(ended, timeout=120, what="the run to end")
    return ended_run


def decisions(chat: ChatServer) -> list[dict[str, Any]]:
    """The bodies of the requests to ``chat`` that asked for a negotiation move."""
    return [r.body for r in chat.requests if asks_for_a_move(r.body)]


def counter(amount: int, *, action: str = "counter", **more: object) -> dict[str, object]:
    """The arguments of a move the model might make: ``amount`` EUR a day, said not for the wire."""
    return {
        "action": action,
        "message": NOT_FOR_THE_WIRE,
        "terms": {"amount": amount, "currency": "EUR"},
        **more,
    }


def move_call(arguments: dict[str, object], call_id: str = "bad_1") -> Reply:
    return tool_calls((call_id, MOVE_TOOL, json.dumps(arguments)))


def wire(turn: Turn) -> tuple[object, ...]:
    """What a turn put on or took off the wire: the message id and the move in it."""
    return (
        turn.raw.get("messageId"),
        turn.action,
        turn.message,
        turn.terms,
        turn.offer_id,
        turn.accepts_offer_id,
    )


def test_two_agents_on_chat_models_negotiate_to_the_same_settlement(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
) -> None:
    seller_on_chat(seller, seller_chat)

    run = finished(negotiate(buyer, intent, seller))

    assert run.status == Run.Status.DONE, run.end_reason
    assert run.output.startswith("Here is where things stand.\nSettled (1):\n")
    ours = Negotiation.across_tenants.get(agent=buyer)
    theirs = Negotiation.across_tenants.get(agent=seller)
    assert (ours.direction, theirs.direction) == (
        Negotiation.Direction.OUTBOUND,
        Negotiation.Direction.INBOUND,
    )
    assert (ours.status, theirs.status) == (Negotiation.Status.SETTLED, Negotiation.Status.SETTLED)
    assert ours.counterparty_name == "Idris Haddad"
    assert ours.objective == run.task

    # Both sides reached the same verdict, within both parties' limits.
    mine, yours = (
        Settlement.across_tenants.get(negotiation=ours),
        Settlement.across_tenants.get(negotiation=theirs),
    )
    assert mine.outcome == yours.outcome == Settlement.Outcome.AGREED
    assert mine.basis == yours.basis
    assert mine.basis in (Settlement.Basis.REFERENCE, Settlement.Basis.TERMS)
    assert mine.terms == yours.terms
    assert mine.terms is not None
    assert mine.terms["currency"] == "EUR"
    assert FLOOR <= mine.terms["amount"] <= CEILING["value"]

    # Every move is stored on both sides, the same message with the same offer ids.
    our_turns, their_turns = list(ours.turns.order_by("seq")), list(theirs.turns.order_by("seq"))
    assert len(our_turns) == len(their_turns) >= 2
    assert [t.seq for t in our_turns] == [t.seq for t in their_turns] == list(range(1, len(our_turns) + 1))
    assert [wire(t) for t in our_turns] == [wire(t) for t in their_turns]
    assert [t.side for t in our_turns] == [Turn.Side.OURS, Turn.Side.THEIRS] * (len(our_turns) // 2)
    assert [t.side for t in their_turns] == [Turn.Side.THEIRS, Turn.Side.OURS] * (len(our_turns) // 2)
    assert all(t.offer_id for t in our_turns if t.terms)
    assert len({t.offer_id for t in our_turns if t.offer_id}) == len([t for t in our_turns if t.offer_id])
    assert our_turns[-1].action == "accept"
    assert our_turns[-1].accepts_offer_id in {t.offer_id for t in our_turns[:-1]}

    # Our turns carry what deciding them cost; theirs cost us nothing.
    ours_moved = [t for t in our_turns if t.side == Turn.Side.OURS]
    assert len(decisions(buyer_chat)) == len(ours_moved) == ours.turn_count
    assert {(t.model, t.input_tokens, t.output_tokens, t.cost) for t in ours_moved} == {
        ("house-model", 10, 5, CALL_COST)
    }
    assert {(t.input_tokens, t.cost) for t in our_turns if t.side == Turn.Side.THEIRS} == {(0, 0)}
    assert (ours.input_tokens, ours.output_tokens, ours.cost) == (
        10 * len(ours_moved),
        5 * len(ours_moved),
        CALL_COST * len(ours_moved),
    )
    # The seller's model decided every one of its moves, on its own tenant's endpoint.
    theirs_moved = [t for t in their_turns if t.side == Turn.Side.OURS]
    assert len(seller_chat.requests) == len(decisions(seller_chat)) == len(theirs_moved)
    assert {(t.model, t.input_tokens) for t in theirs_moved} == {("guild-model", 10)}
    assert theirs.cost == CALL_COST * len(theirs_moved)

    # The run paid for its loop's steps (negotiate, then the report) and every decision under it.
    assert run.step_count == 2
    assert len(buyer_chat.requests) == run.step_count + len(ours_moved)
    assert (run.input_tokens, run.output_tokens, run.cost) == (
        10 * len(buyer_chat.requests),
        5 * len(buyer_chat.requests),
        CALL_COST * len(buyer_chat.requests),
    )
    first, last = Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).order_by("seq")
    [call] = first.tool_calls
    assert (call["name"], json.loads(call["arguments"])) == (
        "negotiate",
        {"targets": [{"url": agent_url(seller), "objective": run.task}]},
    )
    assert last.content == run.output
    assert policy.finished == 1


# --- Misbehaving models on a live outbound negotiation ---------------------------------------

# Each a reply that is not exactly one valid move, and the reason it is handed back with.
BAD_REPLIES = {
    "text": (text(NOT_FOR_THE_WIRE), "you answered with text instead of calling decide_move"),
    "two-tools": (
        tool_calls(
            ("bad_1", MOVE_TOOL, json.dumps(counter(900))), ("bad_2", MOVE_TOOL, json.dumps(counter(901)))
        ),
        "you called 2 tools; call decide_move exactly once",
    ),
    "an-invented-action": (
        move_call(counter(900, action="haggle")),
        "action 'haggle' is not one of ['accept', 'ask', 'counter', 'propose', 'reject']",
    ),
    "an-accept-of-an-offer-never-made": (
        move_call(counter(1000, action="accept", acceptsOfferId=NEVER_MADE)),
        f"offer {NEVER_MADE!r} was never made by the counterparty",
    ),
}


def never_sent(negotiation: Negotiation) -> None:
    """Nothing of a bad reply is among the moves the seller's ``negotiation`` holds: no word of it,
    no invented action, no offer id that was never made, no buyer's amount over its ceiling."""
    turns = list(negotiation.turns.all())
    assert turns
    assert [t for t in turns if NOT_FOR_THE_WIRE in t.message] == []
    assert {t.action for t in turns} <= {"propose", "counter", "accept"}
    assert NEVER_MADE not in {t.accepts_offer_id for t in turns}
    buyers = [t.terms["amount"] for t in turns if t.side == Turn.Side.THEIRS and t.terms]
    assert max(buyers) <= CEILING["value"]


@pytest.mark.parametrize("kind", list(BAD_REPLIES))
def test_one_bad_reply_is_handed_back_and_the_negotiation_goes_on(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
    kind: str,
) -> None:
    seller_on_chat(seller, seller_chat)
    bad, reason = BAD_REPLIES[kind]
    policy.instead = {2: bad}  # our second move

    run = finished(negotiate(buyer, intent, seller))

    assert run.status == Run.Status.DONE, run.end_reason
    assert run.output.startswith("Here is where things stand.\nSettled (1):\n")
    ours, theirs = Negotiation.across_tenants.get(agent=buyer), Negotiation.across_tenants.get(agent=seller)
    assert Settlement.across_tenants.get(negotiation=ours).outcome == Settlement.Outcome.AGREED
    # The model was told why, once, and decided again; only that move went out.
    handed_back = decisions(buyer_chat)[2]["messages"]
    assert (
        handed_back[-1]["content"] == f"Not sent: {reason}. Decide again and call decide_move exactly once."
    )
    assert handed_back[-1]["role"] == ("user" if kind == "text" else "tool")
    never_sent(theirs)
    assert [wire(t) for t in ours.turns.order_by("seq")] == [wire(t) for t in theirs.turns.order_by("seq")]
    # Both calls of that move are on its turn.
    second = ours.turns.get(seq=3)
    assert (second.side, second.input_tokens, second.output_tokens, second.cost) == (
        Turn.Side.OURS,
        20,
        10,
        2 * CALL_COST,
    )


@pytest.mark.parametrize("kind", list(BAD_REPLIES))
def test_a_second_bad_reply_fails_the_negotiation_and_the_run_gets_the_digest(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
    kind: str,
) -> None:
    seller_on_chat(seller, seller_chat)
    bad, reason = BAD_REPLIES[kind]
    policy.instead = {2: bad, 3: bad}

    run = finished(negotiate(buyer, intent, seller))

    ours, theirs = Negotiation.across_tenants.get(agent=buyer), Negotiation.across_tenants.get(agent=seller)
    error = f"the model answered no valid move twice: {reason}"
    assert (ours.status, ours.error) == (Negotiation.Status.FAILED, error)
    assert run.status == Run.Status.DONE, run.end_reason
    assert run.output == (
        "Here is where things stand.\nFailed (1):\n"
        f"- {ours.pk} with Idris Haddad ({agent_url(seller)}) — {error}"
        " — the exchange stays with them; answer this id to try again"
    )
    assert len(decisions(buyer_chat)) == 3
    # The counterparty has our first move and its reply, nothing since; so do we.
    assert theirs.turns.count() == 2
    never_sent(theirs)
    assert [wire(t) for t in ours.turns.order_by("seq")] == [wire(t) for t in theirs.turns.order_by("seq")]
    assert theirs.status == Negotiation.Status.OPEN
    # What the failed decision cost is counted all the same: three calls for two moves' worth.
    assert (ours.input_tokens, ours.cost) == (30, 3 * CALL_COST)
    assert run.input_tokens == 10 * len(buyer_chat.requests)


def test_a_move_over_the_limit_is_handed_back_and_never_sent(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
) -> None:
    seller_on_chat(seller, seller_chat)
    policy.instead = {2: move_call(counter(1500))}

    run = finished(negotiate(buyer, intent, seller))

    assert run.status == Run.Status.DONE, run.end_reason
    ours, theirs = Negotiation.across_tenants.get(agent=buyer), Negotiation.across_tenants.get(agent=seller)
    assert Settlement.across_tenants.get(negotiation=ours).outcome == Settlement.Outcome.AGREED
    handed_back = decisions(buyer_chat)[2]["messages"][-1]
    assert handed_back["role"] == "tool"
    assert handed_back["content"].startswith(
        "Not sent: it breaks the party's limits: counter with amount=1500 breaks the guard"
    )
    never_sent(theirs)


def test_a_model_that_keeps_breaking_the_limit_parks_the_negotiation_with_the_party(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
    principal: AbstractUser,
) -> None:
    seller_on_chat(seller, seller_chat)
    policy.instead = {2: move_call(counter(1500)), 3: move_call(counter(1400))}
    asked = "Every move I could make breaks one of your limits (amount: at most €1,100). How should I go on?"

    run = negotiate(buyer, intent, seller)

    question = wait_until(
        lambda: Question.across_tenants.filter(run=run).first(), timeout=120, what="the question"
    )
    ours, theirs = Negotiation.across_tenants.get(agent=buyer), Negotiation.across_tenants.get(agent=seller)
    assert question.question == asked
    assert (ours.status, ours.parked_question) == (Negotiation.Status.WAITING, asked)
    assert theirs.turns.count() == 2
    never_sent(theirs)

    questions.question_answer(
        question=question, answer="Stay within it and meet them halfway.", user=principal
    )
    run = finished(run)

    assert run.status == Run.Status.DONE, run.end_reason
    assert run.output.startswith("Here is where things stand.\nSettled (1):\n")
    ours.refresh_from_db()
    assert ours.guidance == ["Stay within it and meet them halfway."]
    assert Settlement.across_tenants.get(negotiation=ours).outcome == Settlement.Outcome.AGREED
    never_sent(theirs)
    assert [wire(t) for t in ours.turns.order_by("seq")] == [wire(t) for t in theirs.turns.order_by("seq")]


# --- Budgets hit mid-negotiation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_tokens", "max_cost", "reason"),
    [
        (60, None, "The token budget of 60 is spent (60 used)."),
        (None, 4 * CALL_COST, "The cost budget of 0.000240 is spent (0.000240 used)."),
    ],
    ids=["tokens", "cost"],
)
def test_the_run_budget_spent_by_its_negotiation_fails_both(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    max_tokens: int | None,
    max_cost: Decimal | None,
    reason: str,
) -> None:
    seller_on_chat(seller, seller_chat)

    # The loop's first step costs one call; each move costs one more: three moves spend it.
    run = finished(negotiate(buyer, intent, seller, max_tokens=max_tokens, max_cost=max_cost))

    ours, theirs = Negotiation.across_tenants.get(agent=buyer), Negotiation.across_tenants.get(agent=seller)
    assert (ours.status, ours.error) == (
        Negotiation.Status.FAILED,
        f"the run it serves can spend no more: {reason}",
    )
    assert (run.status, run.end_reason) == (Run.Status.FAILED, reason)
    assert len(buyer_chat.requests) == 4
    assert len(decisions(buyer_chat)) == ours.turn_count == 3
    assert theirs.turns.count() == 6
    assert [wire(t) for t in ours.turns.order_by("seq")] == [wire(t) for t in theirs.turns.order_by("seq")]
    # The run holds the loop's step and the three decisions, and took no step after the digest.
    assert (run.input_tokens, run.output_tokens, run.cost) == (40, 20, 4 * CALL_COST)
    assert run.step_count == 1
    [digest] = Message.across_tenants.filter(run=run, role=Message.Role.TOOL)
    assert digest.content.startswith(f"Failed (1):\n- {ours.pk} with Idris Haddad")
    assert f"the run it serves can spend no more: {reason}" in digest.content


# --- Inbound: a counterparty's move answered by the agent's model ----------------------------


def test_an_inbound_move_is_answered_by_the_agents_model(
    live_stack: LiveStack, seller: Agent, seller_chat: ChatServer
) -> None:
    seller_on_chat(seller, seller_chat)
    url = agent_url(seller)
    opening = proposal(800)

    task = task_of(call(url, "SendMessage", message(opening)))

    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    reply = task["history"][-1]
    assert reply["role"] == "ROLE_AGENT"
    [part] = reply["parts"]
    countered = part["data"]
    assert {k: countered[k] for k in ("action", "message", "terms")} == {
        "action": "counter",
        "message": "I can do 1330 EUR a day.",
        "terms": {"amount": 1330, "currency": "EUR"},
    }
    assert countered["offerId"] not in (opening["offerId"], "")
    assert [(a["artifactId"], a["parts"]) for a in task["artifacts"]] == [("negotiator:reply", [part])]
    # The model decided on the seed's prompt: the seller's name and floor, and our offer by its id.
    [asked] = seller_chat.requests
    system, record = (m["content"] for m in asked.body["messages"])
    assert 'You are negotiating on behalf of "Idris Haddad".' in system
    assert "amount: at least €950" in system
    assert f"1. They — propose: I can pay €800 a day. [offer {opening['offerId']}: " in record

    # An offer at least as good as its next one is accepted, bound to that offer by its id.
    better = proposal(1300)
    task = task_of(call(url, "SendMessage", message(better, task=task)))

    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    accepted = task["history"][-1]["parts"][0]["data"]
    assert (accepted["action"], accepted["acceptsOfferId"], accepted["terms"]) == (
        "accept",
        better["offerId"],
        {"amount": 1300, "currency": "EUR"},
    )
    outcome = next(a for a in task["artifacts"] if a["artifactId"] == "negotiator:negotiation-outcome")
    assert outcome["parts"][0]["data"]["status"] == "agreed"
    negotiation = Negotiation.across_tenants.get(agent=seller)
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    assert (settlement.outcome, settlement.basis, settlement.terms) == (
        Settlement.Outcome.AGREED,
        Settlement.Basis.REFERENCE,
        {"amount": 1300, "currency": "EUR"},
    )
    turns = list(negotiation.turns.order_by("seq"))
    assert [(t.side, t.action, t.model, t.input_tokens, t.cost) for t in turns] == [
        (Turn.Side.THEIRS, "propose", "", 0, 0),
        (Turn.Side.OURS, "counter", "guild-model", 10, CALL_COST),
        (Turn.Side.THEIRS, "propose", "", 0, 0),
        (Turn.Side.OURS, "accept", "guild-model", 10, CALL_COST),
    ]
    assert negotiation.cost == 2 * CALL_COST


def test_a_model_budget_spent_by_inbound_turns_refuses_the_next_message(
    live_stack: LiveStack, seller: Agent, seller_chat: ChatServer
) -> None:
    seller_on_chat(seller, seller_chat)
    seller.tenant.model_budget = 2 * CALL_COST - Decimal("0.00001")
    seller.tenant.save()
    url = agent_url(seller)
    this_month = month_start(timezone.now())
    following = month_start(this_month + timedelta(days=32))

    task = task_of(call(url, "SendMessage", message(proposal(800))))
    task = task_of(call(url, "SendMessage", message(proposal(820), task=task)))
    refused = call(url, "SendMessage", message(proposal(840), task=task))

    assert refusal(refused, status=429, code=BUSY_CODE) == (
        f"This agent's organisation has used its model budget for {this_month:%B %Y}; "
        f"it takes no new messages until 1 {following:%B %Y} (UTC)."
    )
    negotiation = Negotiation.across_tenants.get(agent=seller)
    assert negotiation.cost == 2 * CALL_COST
    assert negotiation.turns.count() == 4
    assert len(seller_chat.requests) == 2
    # A new conversation is refused too: the budget is the tenant's.
    assert refusal(call(url, "SendMessage", message(proposal(900))), status=429, code=BUSY_CODE)
    assert Negotiation.across_tenants.filter(agent=seller).count() == 1


# --- A cancelled run stops the turn its model is deciding ------------------------------------


def negotiation_pumps() -> list[str]:
    """The ids of the negotiations the live worker is pumping now (Celery's remote control)."""
    replies = celery_app.control.inspect(timeout=2).active()
    assert replies, "the live worker did not answer"
    return [
        t["args"][0] for tasks in replies.values() for t in tasks if t["name"] == "negotiations.tasks.pump"
    ]


def test_a_cancelled_run_stops_its_negotiation_while_the_model_decides(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
) -> None:
    seller_on_chat(seller, seller_chat)
    # The model takes longer over our second move than the test lasts; nothing else would stop it.
    ModelEndpoint.across_tenants.filter(tenant=buyer.tenant).update(timeout=300)
    buyer.turn_timeout = 600
    buyer.save()
    policy.instead = {2: hang(300, then=move_call(counter(1000)))}
    run = negotiate(buyer, intent, seller)
    wait_until(lambda: len(decisions(buyer_chat)) == 2, timeout=60, what="the model to be deciding")
    ours = Negotiation.across_tenants.get(agent=buyer)
    assert negotiation_pumps() == [str(ours.pk)]

    runs.run_cancel(run=run, user=None)

    ours.refresh_from_db()
    assert (ours.status, ours.error) == (Negotiation.Status.FAILED, "the run it served was cancelled")
    # The worker lets go of the turn while the model still hangs, and sends nothing.
    wait_until(lambda: negotiation_pumps() == [], timeout=60, what="the pump to stop")
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    theirs = Negotiation.across_tenants.get(agent=seller)
    assert ours.turns.count() == theirs.turns.count() == 2
    assert len(decisions(buyer_chat)) == 2

    # The worker is free: the next run of the agent negotiates to its end.
    again = finished(
        negotiate(buyer, Intent.objects.create(tenant=buyer.tenant, agent=buyer, statement="A CFO"), seller)
    )
    assert again.status == Run.Status.DONE, again.end_reason
    assert again.output.startswith("Here is where things stand.\nSettled (1):\n")
    ours.refresh_from_db()
    assert (ours.status, ours.turns.count(), Negotiation.across_tenants.get(pk=theirs.pk).turns.count()) == (
        Negotiation.Status.FAILED,
        2,
        2,
    )


def test_a_move_decided_as_the_run_is_cancelled_is_not_sent(
    live_stack: LiveStack,
    buyer: Agent,
    intent: Intent,
    seller: Agent,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    policy: AgentLoopPolicy,
) -> None:
    seller_on_chat(seller, seller_chat)
    started: list[Run] = []

    def cancel_then_decide(body: dict[str, Any]) -> Reply:
        # The party cancels just as the model answers our second move: a valid one.
        if policy.decisions == 1 and asks_for_a_move(body):
            try:
                runs.run_cancel(run=started[0], user=None)
            finally:
                connections.close_all()
        return policy(body)

    buyer_chat.responder = cancel_then_decide
    started.append(negotiate(buyer, intent, seller))

    run = finished(started[0])

    assert run.status == Run.Status.CANCELLED
    ours = Negotiation.across_tenants.get(agent=buyer)
    wait_until(lambda: negotiation_pumps() == [], timeout=60, what="the pump to stop")
    assert len(decisions(buyer_chat)) == 2
    assert (ours.status, ours.error) == (Negotiation.Status.FAILED, "the run it served was cancelled")
    assert ours.turns.count() == Negotiation.across_tenants.get(agent=seller).turns.count() == 2
    # What the decision cost still counts.
    ours.refresh_from_db()
    assert ours.input_tokens == 20
