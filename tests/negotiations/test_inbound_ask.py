"""An inbound ``ask`` parks with the party: the holding reply on the wire, the party's answer as
standing guidance, and the reply decided with it — at the counterparty's next message, or at once
(:func:`negotiations.services.inbound.inbound_reply_decided`, which the A2A gateway calls for a Task with a
push notification config).

Moves arrive through :func:`negotiations.services.inbound.inbound_turn` as the gateway calls it. Tomas's
agent sells here with no term guard and no guidance, so the offline negotiator asks for its limit.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError

from agents.models import Agent, Intent, Run
from agents.services import runs
from negotiations import selectors
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import batches, parking
from negotiations.services.inbound import HOLDING_TEXT, InboundReply, TaskMovedOn, inbound_reply_decided
from negotiations.verdict import settle
from negotiations.wire import TaskRecord
from parley.models import Event, Membership
from tests.agents.pages import member
from tests.negotiations.pages import inbound, outbound

pytestmark = pytest.mark.django_db

QUESTION = "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
ANSWER = "At least €1,000 a day."
HOLDING = {"text": HOLDING_TEXT}
NOT_ALLOWED = r"^Only the agent's party, an owner or an operator can answer its negotiations\.$"


def propose(amount: int, offer_id: str = "o-1") -> dict[str, Any]:
    return {
        "action": "propose",
        "message": f"Would €{amount} a day work?",
        "terms": {"amount": amount, "currency": "EUR"},
        "offerId": offer_id,
    }


def kinds(negotiation: Negotiation, kind: str) -> int:
    """How many events of ``kind`` were stored about ``negotiation``."""
    return sum(
        1
        for e in Event.across_tenants.filter(tenant_id=negotiation.tenant_id, kind=kind)
        if e.payload["negotiation"] == str(negotiation.pk)
    )


def turns(negotiation: Negotiation) -> list[tuple[str, str, str]]:
    return list(negotiation.turns.order_by("seq").values_list("side", "action", "message"))


@pytest.fixture
def parked(agent: Agent, intent: Intent) -> Negotiation:
    """Tomas's agent was offered €800 a day and asked Tomas for his limit."""
    inbound(agent, propose(800))
    return Negotiation.across_tenants.get(agent=agent)


def test_an_inbound_ask_parks_with_the_party_and_the_wire_gets_the_holding_reply(
    agent: Agent, intent: Intent
) -> None:
    reply = inbound(agent, propose(800))

    assert reply.state == "input-required"
    assert reply.message["parts"] == [HOLDING]
    assert reply.message["role"] == "ROLE_AGENT"
    assert reply.settlement is None
    negotiation = Negotiation.across_tenants.get(agent=agent)
    assert (negotiation.status, negotiation.parked_question) == (Negotiation.Status.WAITING, QUESTION)
    assert (negotiation.task_state, negotiation.turn_count, negotiation.intent) == (
        "input-required",
        0,
        intent,
    )
    assert turns(negotiation) == [
        (Turn.Side.THEIRS, "propose", "Would €800 a day work?"),
        (Turn.Side.OURS, "", HOLDING_TEXT),
    ]
    holding = negotiation.turns.get(seq=2)
    assert (holding.raw, holding.terms, holding.task_state) == (reply.message, None, "input-required")
    assert kinds(negotiation, "negotiation.waiting") == 1


def test_the_holding_reply_is_no_move_to_either_sides_verdict(agent: Agent, parked: Negotiation) -> None:
    """They walk away while we hold: both sides read "they closed, nobody answered" off the same
    record, whichever role they read it as, with or without the holding replies in it."""
    reply = inbound(agent, {"action": "reject", "message": "Never mind."})

    assert reply.settlement is not None
    assert (reply.settlement.outcome, reply.settlement.basis) == ("unanswered", "state")
    parked.refresh_from_db()
    assert parked.status == Negotiation.Status.WAITING  # still the party's to answer
    record = selectors.turns_record(parked)
    bare = TaskRecord(record.state, tuple(e for e in record.history if e.move is not None))
    terminal = frozenset({"accept", "reject"})
    verdicts = {
        (v.outcome, v.basis, v.terms)
        for r in (record, bare)
        for role in ("agent", "user")
        if (v := settle(r, our_role=role, terminal_actions=terminal)) is not None
    }
    assert verdicts == {("unanswered", "state", None)}


def test_while_parked_their_next_move_gets_the_holding_reply_again_undecided(
    agent: Agent, parked: Negotiation
) -> None:
    reply = inbound(agent, propose(850, "o-2"))

    assert (reply.state, reply.message["parts"]) == ("input-required", [HOLDING])
    parked.refresh_from_db()
    assert (parked.status, parked.parked_question, parked.guidance) == (
        Negotiation.Status.WAITING,
        QUESTION,
        [],
    )
    assert [side for side, _, _ in turns(parked)] == [Turn.Side.THEIRS, Turn.Side.OURS] * 2
    assert turns(parked)[3] == (Turn.Side.OURS, "", HOLDING_TEXT)
    # No new decision, so no second question.
    assert kinds(parked, "negotiation.waiting") == 1


def test_the_answer_is_standing_guidance_and_their_next_move_is_answered_with_it(
    agent: Agent, parked: Negotiation, principal: AbstractUser
) -> None:
    answered = parking.negotiation_guidance_give(negotiation=parked, answer=f"  {ANSWER} ", user=principal)

    assert (answered.status, answered.parked_question, answered.guidance) == (
        Negotiation.Status.OPEN,
        "",
        [ANSWER],
    )
    assert kinds(parked, "negotiation.answered") == 1

    reply = inbound(agent, propose(850, "o-2"))

    # A seller's opening at its floor of €1,000 / 0.7, decided with the guidance.
    data = reply.message["parts"][0]["data"]
    assert (data["action"], data["terms"]) == ("propose", {"amount": 1429, "currency": "EUR"})
    assert reply.state == "input-required"
    parked.refresh_from_db()
    assert (parked.status, parked.turn_count) == (Negotiation.Status.OPEN, 1)
    assert [action for _, action, _ in turns(parked)] == ["propose", "", "propose", "propose"]


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        (Membership.Role.OWNER, True),
        (Membership.Role.OPERATOR, True),
        (Membership.Role.VIEWER, False),
        (Membership.Role.PRINCIPAL, False),  # another party of the tenant
    ],
)
def test_who_may_answer_is_who_may_answer_questions(parked: Negotiation, role: str, allowed: bool) -> None:
    user = member(parked.tenant, f"someone-{role}", role)

    if allowed:
        parking.negotiation_guidance_give(negotiation=parked, answer=ANSWER, user=user)
        assert Negotiation.across_tenants.get(pk=parked.pk).guidance == [ANSWER]
    else:
        with pytest.raises(runs.NotAllowed, match=NOT_ALLOWED):
            parking.negotiation_guidance_give(negotiation=parked, answer=ANSWER, user=user)
        assert Negotiation.across_tenants.get(pk=parked.pk).status == Negotiation.Status.WAITING


def test_an_answer_is_refused_by_name_and_changes_nothing(
    agent: Agent, intent: Intent, parked: Negotiation
) -> None:
    def refusal(negotiation: Negotiation, answer: str = ANSWER) -> str:
        before = Negotiation.across_tenants.filter(pk=negotiation.pk).values().get()
        with pytest.raises(parking.GuidanceRefused) as refused:
            parking.negotiation_guidance_give(negotiation=negotiation, answer=answer, user=None)
        assert Negotiation.across_tenants.filter(pk=negotiation.pk).values().get() == before
        return refused.value.code

    with pytest.raises(ValidationError) as empty:
        parking.negotiation_guidance_give(negotiation=parked, answer="  ", user=None)
    assert empty.value.message_dict == {"answer": ["The answer is empty."]}

    parking.negotiation_guidance_give(negotiation=parked, answer=ANSWER, user=None)
    assert refusal(parked, "Make it 1,200.") == "already_answered"
    inbound(agent, propose(850, "o-2"))
    assert refusal(parked) == "not_waiting"
    waiting_outbound = outbound(agent, "Noor Lindqvist", intent=intent, status=Negotiation.Status.WAITING)
    assert refusal(waiting_outbound) == "outbound"


def test_the_agent_loops_answer_tool_answers_a_parked_one_the_same_way(
    agent: Agent, intent: Intent, parked: Negotiation
) -> None:
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)

    batches.batch_answer(run=run, tool_call_id="call-1", ids=[str(parked.pk)], guidance=ANSWER)

    parked.refresh_from_db()
    assert (parked.status, parked.parked_question, parked.guidance) == (Negotiation.Status.OPEN, "", [ANSWER])
    assert kinds(parked, "negotiation.answered") == 1


# Decided at once, as for a Task with a push notification config.


def stored(negotiation: Negotiation) -> TaskRecord:
    """The Task as the counterparty holds it: here, every recorded turn (the gateway reads its store)."""
    return selectors.turns_record(negotiation)


def test_the_reply_decided_at_once_is_recorded_and_put_on_the_task(agent: Agent, parked: Negotiation) -> None:
    parking.negotiation_guidance_give(negotiation=parked, answer=ANSWER, user=None)
    put: list[InboundReply] = []

    reply = inbound_reply_decided(agent=agent, task_id=parked.task_id, prior=stored(parked), put=put.append)

    assert reply is not None
    assert put == [InboundReply(message=reply.message, state="input-required", settlement=None)]
    data = reply.message["parts"][0]["data"]
    assert (data["action"], data["terms"]) == ("propose", {"amount": 1429, "currency": "EUR"})
    assert (reply.message["taskId"], reply.message["contextId"]) == (parked.task_id, parked.context_id)
    last = parked.turns.order_by("-seq").first()
    assert last is not None
    assert (last.seq, last.side, last.action, last.raw) == (3, Turn.Side.OURS, "propose", reply.message)
    parked.refresh_from_db()
    assert (parked.status, parked.turn_count, parked.task_state) == (
        Negotiation.Status.OPEN,
        1,
        "input-required",
    )

    # Decided once: a second call (a task delivered twice) finds nothing to do.
    again = inbound_reply_decided(agent=agent, task_id=parked.task_id, prior=stored(parked), put=put.append)
    assert (again, len(put), parked.turns.count()) == (None, 1, 3)


def test_a_reply_the_task_moved_past_is_not_kept(agent: Agent, parked: Negotiation) -> None:
    parking.negotiation_guidance_give(negotiation=parked, answer=ANSWER, user=None)

    def moved_on(reply: InboundReply) -> None:
        raise TaskMovedOn

    reply = inbound_reply_decided(agent=agent, task_id=parked.task_id, prior=stored(parked), put=moved_on)

    assert reply is None
    assert parked.turns.count() == 2
    assert not Event.across_tenants.filter(kind="negotiation.turn", payload__seq=3).exists()
    # Their next message then gets the decided reply, as without a push config.
    assert inbound(agent, propose(850, "o-2")).message["parts"][0]["data"]["action"] == "propose"


def test_an_answer_that_leaves_the_limit_unknown_parks_it_again_saying_what_was_missing(
    agent: Agent, parked: Negotiation
) -> None:
    parking.negotiation_guidance_give(negotiation=parked, answer="Whatever you think is fair.", user=None)
    put: list[InboundReply] = []

    reply = inbound_reply_decided(agent=agent, task_id=parked.task_id, prior=stored(parked), put=put.append)

    assert (reply, put, parked.turns.count()) == (None, [], 2)
    parked.refresh_from_db()
    assert (parked.status, parked.parked_question) == (
        Negotiation.Status.WAITING,
        "Your answer gives no usable limit on amount (EUR per day): it names no number. "
        f'You said: "Whatever you think is fair." {QUESTION}',
    )
    assert kinds(parked, "negotiation.waiting") == 2


@pytest.mark.parametrize("answered", [False, True])
def test_nothing_is_decided_at_once_for_a_negotiation_not_answered_or_moved_on(
    agent: Agent, parked: Negotiation, answered: bool
) -> None:
    if answered:
        parking.negotiation_guidance_give(negotiation=parked, answer=ANSWER, user=None)
        inbound(agent, propose(850, "o-2"))
    put: list[InboundReply] = []

    for task_id in (parked.task_id, f"task-{uuid.uuid4()}"):
        assert (
            inbound_reply_decided(agent=agent, task_id=task_id, prior=stored(parked), put=put.append) is None
        )

    assert put == []
    assert parked.turns.count() == (4 if answered else 2)
    assert not Settlement.across_tenants.filter(negotiation=parked).exists()
