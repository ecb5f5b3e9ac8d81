"""Agents on chat models negotiating through the running platform (issue 15, "Tests").

Everything runs on the live stack: a uvicorn web process and a Celery worker on
the test database. The models are chat-completions servers on loopback in the
test process (:mod:`tests.chat_server`), whose replies come from the policies of
:mod:`tests.negotiating_policy` — they read only what the platform sends. The
buyer, Tomas's agent in ``acme``, is driven as a user drives it: a run whose
task names the seller's A2A URL, so its loop (on the chat model too) calls
``negotiate``. The seller, Idris in ``globex``, answers at its public endpoint
over real A2A, on a chat model of its own tenant or on ``offline``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractUser

from a2a_gateway.cards import agent_url
from agents.models import Agent, Intent, Message, Question, Run
from agents.services import question_answer, run_start
from negotiations.model_negotiator import MOVE_TOOL
from negotiations.models import Negotiation, Settlement, Turn
from tests.chat_server import ChatServer, Reply, text, tool_calls
from tests.conftest import LiveStack, on_chat_model, runs_settle, wait_until
from tests.negotiating_policy import AgentLoopPolicy, NegotiatingPolicy

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


def negotiate(buyer: Agent, intent: Intent, seller: Agent, **limits: object) -> Run:
    """Give the buyer the party's task naming the seller's public endpoint."""
    task = f"Find me a fractional CFO for two days a month. Talk to {agent_url(seller)}"
    return run_start(agent=buyer, intent=intent, task=task, **limits)  # type: ignore[arg-type]


def finished(run: Run) -> Run:
    def ended() -> Run | None:
        fresh = Run.objects.get(pk=run.pk)
        return fresh if fresh.status not in Run.ACTIVE else None

    ended_run: Run = wait_until(ended, timeout=120, what="the run to end")
    return ended_run


def decisions(chat: ChatServer) -> list[dict[str, object]]:
    """The bodies of the requests to ``chat`` that asked for a negotiation move."""
    return [
        r.body
        for r in chat.requests
        if any(t["function"]["name"] == MOVE_TOOL for t in r.body.get("tools") or [])
    ]


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
    ours = Negotiation.objects.get(agent=buyer)
    theirs = Negotiation.objects.get(agent=seller)
    assert (ours.direction, theirs.direction) == (
        Negotiation.Direction.OUTBOUND,
        Negotiation.Direction.INBOUND,
    )
    assert (ours.status, theirs.status) == (Negotiation.Status.SETTLED, Negotiation.Status.SETTLED)
    assert ours.counterparty_name == "Idris Haddad"
    assert ours.objective == run.task

    # Both sides reached the same verdict, within both parties' limits.
    mine, yours = Settlement.objects.get(negotiation=ours), Settlement.objects.get(negotiation=theirs)
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
    first, last = Message.objects.filter(run=run, role=Message.Role.ASSISTANT).order_by("seq")
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
    ours, theirs = Negotiation.objects.get(agent=buyer), Negotiation.objects.get(agent=seller)
    assert Settlement.objects.get(negotiation=ours).outcome == Settlement.Outcome.AGREED
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

    ours, theirs = Negotiation.objects.get(agent=buyer), Negotiation.objects.get(agent=seller)
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
    ours, theirs = Negotiation.objects.get(agent=buyer), Negotiation.objects.get(agent=seller)
    assert Settlement.objects.get(negotiation=ours).outcome == Settlement.Outcome.AGREED
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

    question = wait_until(lambda: Question.objects.filter(run=run).first(), timeout=120, what="the question")
    ours, theirs = Negotiation.objects.get(agent=buyer), Negotiation.objects.get(agent=seller)
    assert question.question == asked
    assert (ours.status, ours.parked_question) == (Negotiation.Status.WAITING, asked)
    assert theirs.turns.count() == 2
    never_sent(theirs)

    question_answer(question=question, answer="Stay within it and meet them halfway.", user=principal)
    run = finished(run)

    assert run.status == Run.Status.DONE, run.end_reason
    assert run.output.startswith("Here is where things stand.\nSettled (1):\n")
    ours.refresh_from_db()
    assert ours.guidance == ["Stay within it and meet them halfway."]
    assert Settlement.objects.get(negotiation=ours).outcome == Settlement.Outcome.AGREED
    never_sent(theirs)
    assert [wire(t) for t in ours.turns.order_by("seq")] == [wire(t) for t in theirs.turns.order_by("seq")]
