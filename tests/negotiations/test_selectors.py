"""The prompt of a negotiation's next decision (``selectors.decision_prompt``): what the negotiator
really sends next, outbound and inbound, on a chat model and on ``offline``."""

from __future__ import annotations

import dataclasses

import pytest

from agents.models import OFFLINE, Agent, Intent
from negotiations import negotiator, selectors
from negotiations.model_negotiator import MOVE_TOOL
from negotiations.models import Negotiation, Turn
from negotiations.services import outbound
from tests.chat_server import ChatServer
from tests.conftest import free_port, on_chat_model
from tests.negotiating_policy import NegotiatingPolicy
from tests.negotiations.pages import FLOOR, inbound

pytestmark = pytest.mark.django_db

CEILING = [{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}]


def as_sent(prompt: selectors.DecisionPrompt) -> dict[str, object]:
    """The prompt as the chat-completions request carries it: messages and tools."""
    return {
        "messages": prompt.messages,
        "tools": [{"type": "function", "function": dataclasses.asdict(prompt.tool)}],
    }


@pytest.fixture
def waiting_buyer(agent: Agent, intent: Intent, chat: ChatServer) -> Negotiation:
    """Tomas's agent on a chat model, in an outbound negotiation where the seller's €1,300 is the
    last move, with an objective and the party's guidance; the seller is not reachable."""
    agent.term_guards = CEILING
    agent.save()
    on_chat_model(agent, chat)
    chat.responder = NegotiatingPolicy()
    negotiation = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url=f"http://127.0.0.1:{free_port()}/a2a/idris",
        counterparty_name="Idris Haddad",
        objective="Two days a month.",
        guidance=["Prefer someone who knows robotics."],
        max_turns=6,
        turn_count=1,
    )
    for seq, side, action, amount in [
        (1, Turn.Side.OURS, "propose", 770),
        (2, Turn.Side.THEIRS, "counter", 1300),
    ]:
        Turn.objects.create(
            tenant=agent.tenant,
            negotiation=negotiation,
            seq=seq,
            side=side,
            action=action,
            message=f"{amount} a day.",
            terms={"amount": amount, "currency": "EUR"},
            offer_id=f"offer-{seq}",
        )
    return negotiation


def test_the_prompt_is_what_the_next_outbound_decision_sends(
    waiting_buyer: Negotiation, chat: ChatServer
) -> None:
    prompt = selectors.decision_prompt(waiting_buyer)

    outbound.negotiation_pump(negotiation_id=waiting_buyer.pk, tenant_id=waiting_buyer.tenant_id)

    body = chat.requests[0].body
    assert {"messages": body["messages"], "tools": body["tools"]} == as_sent(prompt)
    system, record = (m["content"] for m in prompt.messages)
    assert "In this negotiation: Two days a month." in system
    assert "- Prefer someone who knows robotics." in system
    assert "amount: at most €1,100" in system
    assert "You have 5 moves left" in system
    assert "2. They — counter: 1300 a day. [offer offer-2: " in record
    assert prompt.tool.name == MOVE_TOOL
    assert (prompt.model, prompt.sent, prompt.awaits_their_move) == ("house-model", True, False)
    # The seller was unreachable: the decision was made, and nothing else happened to the record.
    waiting_buyer.refresh_from_db()
    assert waiting_buyer.status == Negotiation.Status.FAILED
    assert waiting_buyer.turns.count() == 2


def test_inbound_the_prompt_is_the_next_decisions_before_their_next_move(
    agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    agent.term_guards = FLOOR
    agent.save()
    on_chat_model(agent, chat)
    chat.responder = NegotiatingPolicy()
    inbound(agent, {"action": "propose", "message": "€800?", "terms": {"amount": 800, "currency": "EUR"}})
    negotiation = Negotiation.across_tenants.get(agent=agent)

    prompt = selectors.decision_prompt(negotiation)
    inbound(agent, {"action": "counter", "message": "€850?", "terms": {"amount": 850, "currency": "EUR"}})

    sent = chat.requests[-1].body
    system, record = (m["content"] for m in prompt.messages)
    assert sent["messages"][0]["content"] == system
    so_far = record.rsplit("\n", 1)[0]
    assert sent["messages"][1]["content"].startswith(so_far + "\n3. They — counter: €850?")
    assert "1. They — propose: €800?" in so_far
    assert "2. You — " in so_far
    assert prompt.awaits_their_move is True


def test_on_offline_it_is_what_a_chat_model_would_be_shown(agent: Agent, intent: Intent) -> None:
    agent.term_guards = FLOOR
    agent.strategy = "linear"
    agent.save()
    inbound(agent, {"action": "propose", "message": "€800?", "terms": {"amount": 800, "currency": "EUR"}})
    negotiation = Negotiation.across_tenants.get(agent=agent)

    prompt = selectors.decision_prompt(negotiation)

    assert (prompt.model, prompt.strategy, prompt.sent) == (OFFLINE, "linear", False)
    assert [m["role"] for m in prompt.messages] == ["system", "user"]
    assert "amount: at least €950" in prompt.messages[0]["content"]
    assert "1. They — propose: €800?" in prompt.messages[1]["content"]


def test_a_malformed_guard_is_the_negotiators_error(waiting_buyer: Negotiation, intent: Intent) -> None:
    Intent.across_tenants.filter(pk=intent.pk).update(term_guards=[{"term": "amount", "op": "<", "value": 1}])
    waiting_buyer.refresh_from_db()

    with pytest.raises(negotiator.NegotiatorError, match="intent term guard 1 has op '<'"):
        selectors.decision_prompt(waiting_buyer)
