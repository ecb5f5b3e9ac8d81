"""The chat-model negotiator against a chat-completions server on loopback: the prompt, the move
tool, and every reply that must never reach the wire."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from agents.models import Agent, Intent
from negotiations import negotiator
from negotiations.model_negotiator import MOVE_TOOL
from negotiations.models import Negotiation
from negotiations.negotiator import Decision, NegotiatorError
from negotiations.services import parking
from negotiations.services.inbound import HOLDING_TEXT
from negotiations.wire import Entry, Move, TaskRecord
from tests.chat_server import ChatServer, hang, text, tool_calls
from tests.conftest import on_chat_model
from tests.negotiating_policy import NegotiatingPolicy
from tests.negotiations.pages import inbound

CEILING = {"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}
# Monday 30 November 2026, noon UTC.
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
THEIR_OFFER = "5b0e8c55-1d7e-4c6e-a5b1-0f6b6c0e2b11"


def their_offer(amount: int = 1200) -> TaskRecord:
    """They opened with ``amount`` EUR a day under offer :data:`THEIR_OFFER`; we are the buyer."""
    move = Move("propose", f"{amount} a day.", {"amount": amount, "currency": "EUR"}, THEIR_OFFER)
    return TaskRecord("input-required", (Entry(role="agent", move=move),))


def decide(agent: Agent, record: TaskRecord | None = None, **kwargs: Any) -> Decision:
    arguments: dict[str, Any] = {
        "agent": agent,
        "record": record or TaskRecord("submitted", ()),
        "our_role": "user",
        "guidance": [],
        "max_moves": 10,
        "now": NOW,
        **kwargs,
    }
    return negotiator.decide(**arguments)


def move_call(**arguments: Any) -> Any:
    return tool_calls(("call_1", MOVE_TOOL, json.dumps(arguments)))


@pytest.fixture
def buyer(agent: Agent, chat: ChatServer) -> Agent:
    agent.term_guards = [CEILING]
    agent.save()
    return on_chat_model(agent, chat)


@pytest.mark.django_db
def test_the_prompt_follows_the_template_and_the_tool_is_the_vocabulary(
    buyer: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(move_call(action="counter", message="900 a day?", terms={"amount": 900, "currency": "EUR"}))

    decide(buyer, their_offer(), intent=intent, objective="Two days a week.", guidance=["Prefer Lisbon."])

    body = chat.requests[0].body
    system, record = body["messages"][0]["content"], body["messages"][1]["content"]
    order = [
        'on behalf of "Tomas\'s agent"',
        "You act for Tomas.",
        "Current intent: Bring in a fractional CFO.",
        "In this negotiation: Two days a week.",
        "Guidance from the party you act for:\n- Prefer Lisbon.",
        "Today's date is 2026-11-30 (Monday), in UTC.",
        "Terms: amount (number, EUR per day), currency",
        "amount: at most €1,100",
        "You have 10 moves left",
        "- propose (",
        "- ask (use only when your next move depends on something",
    ]
    positions = [system.index(part) for part in order]
    assert positions == sorted(positions)
    assert f"1. They — propose: 1200 a day. [offer {THEIR_OFFER}: " in record
    (tool,) = body["tools"]
    parameters = tool["function"]["parameters"]
    assert tool["function"]["name"] == MOVE_TOOL
    assert parameters["properties"]["action"]["enum"] == ["propose", "counter", "accept", "reject", "ask"]
    assert set(parameters["properties"]) == {"action", "message", "terms", "acceptsOfferId"}
    # The terms the description declares are typed as the card publishes them.
    assert parameters["properties"]["terms"]["properties"] == {
        "amount": {"type": "number", "description": "EUR per day"},
        "currency": {"type": ["string", "number", "boolean", "null"]},
    }


@pytest.mark.django_db
def test_a_prose_only_agent_without_a_principal_is_offered_no_terms_and_no_ask(
    buyer: Agent, chat: ChatServer
) -> None:
    buyer.terms = ""
    buyer.principal = None
    buyer.save()
    chat.script(move_call(action="propose", message="Shall we say two days?", terms={"days": 2}))

    move = decide(buyer).move

    parameters = chat.requests[0].body["tools"][0]["function"]["parameters"]
    assert set(parameters["properties"]) == {"action", "message"}
    assert "ask" not in parameters["properties"]["action"]["enum"]
    assert (move.terms, move.offer_id) == (None, "")


@pytest.mark.django_db
def test_the_model_decides_the_platform_mints_the_offer_id_and_usage_is_counted(
    buyer: Agent, chat: ChatServer
) -> None:
    chat.responder = NegotiatingPolicy()

    decision = decide(buyer)

    move = decision.move
    assert (move.action, move.terms) == ("propose", {"amount": 770, "currency": "EUR"})
    assert len(move.offer_id) == 36
    # 10 input and 5 output tokens at 2 and 8 per million.
    assert decision.usage == negotiator.Usage("house-model", 10, 5, Decimal("0.00006"))


@pytest.mark.django_db
def test_an_accept_is_bound_to_their_offer_and_takes_its_terms(buyer: Agent, chat: ChatServer) -> None:
    chat.script(move_call(action="accept", message="Agreed.", acceptsOfferId=THEIR_OFFER))

    move = decide(buyer, their_offer(1000)).move

    assert (move.action, move.accepts_offer_id) == ("accept", THEIR_OFFER)
    assert move.terms == {"amount": 1000, "currency": "EUR"}
    assert len(move.offer_id) == 36
    assert move.offer_id != THEIR_OFFER


@pytest.mark.django_db
def test_an_invalid_reply_is_handed_back_once_with_the_reason(buyer: Agent, chat: ChatServer) -> None:
    chat.script(
        text("I would offer 900."),
        move_call(action="counter", message="900?", terms={"amount": 900, "currency": "EUR"}),
    )

    decision = decide(buyer, their_offer())

    assert decision.move.terms == {"amount": 900, "currency": "EUR"}
    handed = chat.requests[1].body["messages"]
    assert handed[-2] == {"role": "assistant", "content": "I would offer 900."}
    assert handed[-1]["role"] == "user"
    assert "Not sent: you answered with text instead of calling decide_move" in handed[-1]["content"]
    assert decision.usage.input_tokens == 20  # both calls count


BAD = {
    "text only": (text("Let me think."), "you answered with text instead of calling decide_move"),
    "two calls": (
        tool_calls(
            ("a", MOVE_TOOL, '{"action": "reject", "message": "No."}'),
            ("b", MOVE_TOOL, '{"action": "accept", "message": "Yes."}'),
        ),
        "you called 2 tools; call decide_move exactly once",
    ),
    "bad JSON": (tool_calls(("a", MOVE_TOOL, '{"action": "counter",')), "are not valid JSON"),
    "an array": (tool_calls(("a", MOVE_TOOL, '["counter"]')), "must be a JSON object"),
    "another tool": (tool_calls(("a", "send_email", "{}")), "you called 'send_email'"),
    "an unknown action": (
        move_call(action="threaten", message="Or else."),
        "action 'threaten' is not one of ['accept', 'ask', 'counter', 'propose', 'reject']",
    ),
    "no message": (move_call(action="counter", message=" "), "the move needs a message"),
    "terms not an object": (
        move_call(action="counter", message="This.", terms=[900, "EUR"]),
        "terms must be a flat JSON object, got array",
    ),
    "a term of another type": (
        move_call(action="counter", message="Lots.", terms={"amount": "lots", "currency": "EUR"}),
        "terms.amount must be a number (EUR per day), got 'lots'",
    ),
    "an offer never made": (
        move_call(action="accept", message="Deal.", acceptsOfferId="made-up"),
        "offer 'made-up' was never made by the counterparty",
    ),
    "an accept of other terms": (
        move_call(
            action="accept",
            message="Deal.",
            acceptsOfferId=THEIR_OFFER,
            terms={"amount": 1, "currency": "EUR"},
        ),
        "an accept must restate the terms of offer",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", BAD)
def test_a_second_invalid_reply_ends_the_decision_naming_why(
    case: str, buyer: Agent, chat: ChatServer
) -> None:
    reply, reason = BAD[case]
    chat.script(reply, reply)

    with pytest.raises(NegotiatorError, match="the model answered no valid move twice") as caught:
        decide(buyer, their_offer(1000))

    assert reason in str(caught.value)
    assert len(chat.requests) == 2
    assert caught.value.usage.input_tokens == 20


@pytest.mark.django_db
def test_a_move_that_breaks_a_guard_is_handed_back_then_the_party_is_asked(
    buyer: Agent, chat: ChatServer
) -> None:
    over = move_call(action="counter", message="1,150 then.", terms={"amount": 1150, "currency": "EUR"})
    chat.script(over, over)

    move = decide(buyer, their_offer()).move

    assert move.action == "ask"
    assert "amount: at most €1,100" in move.message
    correction = chat.requests[1].body["messages"][-1]
    assert correction["role"] == "tool"
    assert "breaks the guard amount <= 1100" in correction["content"]


@pytest.mark.django_db
def test_without_a_principal_a_move_that_keeps_breaking_a_guard_becomes_its_reject(
    buyer: Agent, chat: ChatServer
) -> None:
    buyer.principal = None
    buyer.save()
    over = move_call(action="accept", message="Deal.", acceptsOfferId=THEIR_OFFER)
    chat.script(over, over)

    move = decide(buyer, their_offer(1200)).move

    assert move.action == "reject"
    assert move.terms is None


@pytest.mark.django_db
def test_a_model_slower_than_the_turn_timeout_decides_nothing(buyer: Agent, chat: ChatServer) -> None:
    buyer.turn_timeout = 1
    buyer.save()
    chat.script(hang(4))

    with pytest.raises(NegotiatorError, match="did not decide within the turn timeout of 1 s"):
        decide(buyer)


@pytest.mark.django_db
def test_a_stopped_negotiation_stops_its_model(buyer: Agent, chat: ChatServer) -> None:
    chat.script(hang(4))

    with pytest.raises(NegotiatorError, match="stopped while its model decided"):
        decide(buyer, stopped=lambda: True)


@pytest.mark.django_db
def test_a_model_slow_to_begin_answering_is_given_up_at_the_turn_timeout(
    buyer: Agent, chat: ChatServer
) -> None:
    buyer.turn_timeout = 1
    buyer.save()
    # Silent for longer than the endpoint's own timeout (5 s): only the turn timeout can end it first.
    chat.script(hang(30))

    with pytest.raises(NegotiatorError, match="did not decide within the turn timeout of 1 s"):
        decide(buyer)


@pytest.mark.django_db
def test_a_stop_while_the_model_has_not_begun_answering_gives_it_up(buyer: Agent, chat: ChatServer) -> None:
    chat.script(hang(30))

    with pytest.raises(NegotiatorError, match="stopped while its model decided"):
        decide(buyer, stopped=lambda: bool(chat.requests))


@pytest.mark.django_db
def test_a_model_without_an_endpoint_is_named(buyer: Agent) -> None:
    buyer.model = "gone"

    with pytest.raises(NegotiatorError, match="model 'gone' is not available"):
        decide(buyer)


# --- asking the party again -----------------------------------------------------------------------


QUESTION = "What is your budget for this work?"
IN_WORDS = "No money changes hands: we would build it together, alongside our day jobs."


def offered(amount: int, offer_id: str) -> dict[str, Any]:
    return {
        "action": "propose",
        "message": f"€{amount}?",
        "terms": {"amount": amount, "currency": "EUR"},
        "offerId": offer_id,
    }


@pytest.mark.django_db
def test_the_model_is_shown_its_answered_question_and_asking_it_again_as_it_was_is_handed_back(
    buyer: Agent, intent: Intent, chat: ChatServer
) -> None:
    """The party answered in words. The next decision's prompt pairs the answer with the question
    (which never reached the record); a model that asks the same question again anyway gets it back
    quoting the answer, so the party is never asked it twice without a word of what was missing."""
    explained = f'You said: "{IN_WORDS}" Is unpaid work a firm rule, or is there a budget for design?'
    chat.script(
        move_call(action="ask", message=QUESTION),
        move_call(action="ask", message="  what is your budget for THIS work? "),
        move_call(action="ask", message=explained),
    )
    inbound(buyer, offered(800, "o-1"))
    parked = Negotiation.across_tenants.get(agent=buyer)
    parking.negotiation_guidance_give(negotiation=parked, answer=IN_WORDS, user=None)

    reply = inbound(buyer, offered(850, "o-2"))

    assert reply.message["parts"] == [{"text": HOLDING_TEXT}]
    parked.refresh_from_db()
    assert (parked.status, parked.parked_question) == (Negotiation.Status.WAITING, explained)
    assert parked.answers == [{"question": QUESTION, "answer": IN_WORDS}]
    system = chat.requests[1].body["messages"][0]["content"]
    assert (
        f'Guidance from the party you act for:\n- You asked: "{QUESTION}" They answered: {IN_WORDS}' in system
    )
    assert chat.requests[2].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": f'Not sent: the party already answered that question: "{IN_WORDS}". Decide with their '
        f"answer, or ask for what it left out and say so in the question. Decide again and call {MOVE_TOOL} "
        "exactly once.",
    }


@pytest.mark.django_db
def test_without_a_principal_the_model_is_never_offered_ask_and_an_ask_anyway_is_handed_back(
    buyer: Agent, intent: Intent, chat: ChatServer
) -> None:
    """An agent with nobody to ask: its model must decide with what it has; nothing waits on a party."""
    buyer.principal = None
    buyer.save()
    chat.script(
        move_call(action="ask", message=QUESTION),
        move_call(action="reject", message="I cannot take this on without a budget."),
    )

    reply = inbound(buyer, offered(800, "o-1"))

    parameters = chat.requests[0].body["tools"][0]["function"]["parameters"]
    assert parameters["properties"]["action"]["enum"] == ["propose", "counter", "accept", "reject"]
    assert "- ask (" not in chat.requests[0].body["messages"][0]["content"]
    assert (
        chat.requests[1]
        .body["messages"][-1]["content"]
        .startswith("Not sent: action 'ask' is not one of ['accept', 'counter', 'propose', 'reject'].")
    )
    assert reply.message["parts"] == [
        {"data": {"action": "reject", "message": "I cannot take this on without a budget."}}
    ]
    negotiation = Negotiation.across_tenants.get(agent=buyer)
    assert (negotiation.status, negotiation.parked_question) == (Negotiation.Status.SETTLED, "")


@pytest.mark.django_db
def test_the_model_is_told_how_the_end_works(buyer: Agent, chat: ChatServer) -> None:
    chat.script(move_call(action="reject", message="No."), move_call(action="reject", message="No."))

    decide(buyer, their_offer(1200), max_moves=2)
    decide(buyer, their_offer(1200), max_moves=1)

    before_last, last = (request.body["messages"][0]["content"] for request in chat.requests)
    assert "Your next move is your last and can only accept or reject" in before_last
    assert "This is your last move" in last
    assert "accept it rather than walk away from a deal" in last


@pytest.mark.django_db
def test_walking_away_on_the_last_move_from_an_offer_within_the_limits_is_handed_back(
    buyer: Agent, chat: ChatServer
) -> None:
    chat.script(
        move_call(action="reject", message="No deal."),
        move_call(action="accept", message="Deal.", acceptsOfferId=THEIR_OFFER),
    )

    move = decide(buyer, their_offer(1050), max_moves=1).move

    assert (move.action, move.accepts_offer_id, move.terms) == (
        "accept",
        THEIR_OFFER,
        {"amount": 1050, "currency": "EUR"},
    )
    correction = chat.requests[1].body["messages"][-1]["content"]
    assert f"their offer {THEIR_OFFER}" in correction
    assert "reject walks away from that deal" in correction


@pytest.mark.django_db
def test_a_model_that_insists_on_walking_away_keeps_its_move(buyer: Agent, chat: ChatServer) -> None:
    no = move_call(action="reject", message="No deal.")
    chat.script(no, no)

    move = decide(buyer, their_offer(1050), max_moves=1).move

    assert move.action == "reject"
    assert len(chat.requests) == 2


@pytest.mark.django_db
@pytest.mark.parametrize(("amount", "max_moves"), [(1200, 1), (1050, 3)])
def test_a_reject_is_not_handed_back_outside_the_limits_or_before_the_last_move(
    buyer: Agent, chat: ChatServer, amount: int, max_moves: int
) -> None:
    chat.script(move_call(action="reject", message="No deal."))

    move = decide(buyer, their_offer(amount), max_moves=max_moves).move

    assert move.action == "reject"
    assert len(chat.requests) == 1


@pytest.mark.django_db
def test_an_accept_in_prose_on_the_last_move_is_not_walking_away(buyer: Agent, chat: ChatServer) -> None:
    """With terms off an accept names no offer (the tool has no acceptsOfferId): it is still an accept,
    not a walk-away to hand back."""
    buyer.terms = ""
    buyer.save()
    chat.script(
        move_call(action="accept", message="Agreed at €1,050 a day."),
        move_call(action="reject", message="No deal then."),
    )

    move = decide(buyer, their_offer(1050), max_moves=1).move

    assert move.action == "accept"
    assert len(chat.requests) == 1


@pytest.mark.django_db
def test_a_guard_on_the_currency_alone_does_not_judge_the_price(buyer: Agent, chat: ChatServer) -> None:
    """The only guard fixes the currency: it says nothing of the amount, so a reject of 50,000 EUR a
    day on the last move is the model's call, not a walk-away from a deal within the limits."""
    buyer.term_guards = [{"term": "currency", "op": "==", "value": "EUR"}]
    buyer.save()
    chat.script(move_call(action="reject", message="Far too much."))

    move = decide(buyer, their_offer(50_000), max_moves=1).move

    assert move.action == "reject"
    assert len(chat.requests) == 1


@pytest.mark.django_db
def test_an_offer_with_a_term_no_guard_weighs_is_not_pressed_on_the_model(
    buyer: Agent, chat: ChatServer
) -> None:
    """Their 1,050 is within the ceiling, but it carries a penalty clause no guard limits: rejecting
    it on the last move is the model's call, not handed back."""
    penalty = Move(
        "propose",
        "1,050, with a penalty.",
        {"amount": 1050, "currency": "EUR", "penalty": 1000000},
        THEIR_OFFER,
    )
    chat.script(move_call(action="reject", message="No deal."))

    move = decide(buyer, TaskRecord("input-required", (Entry(role="agent", move=penalty),)), max_moves=1).move

    assert move.action == "reject"
    assert len(chat.requests) == 1
