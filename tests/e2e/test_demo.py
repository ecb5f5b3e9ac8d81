"""The demo scenario, end to end, on the live stack: three CFOs, one question, three settlements."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from agents.addresses import agent_url
from agents.models import Question, Run
from agents.services import questions, runs
from negotiations import demo
from negotiations.models import Settlement, Turn
from negotiations.verdict import prose_amounts
from tests.conftest import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "answer",
    [
        "Up to €1,100 a day.",
        # A tester's answer once read as a floor: Tomas's agent opened at €1,540 and agreed it.
        "Not above €1,100 a day.",
    ],
)
def test_fractional_cfo_scenario(live_stack: LiveStack, answer: str) -> None:
    world = demo.demo_seed()
    urls = [agent_url(a) for a in world.cfo_agents]
    run = runs.run_start(agent=world.tomas_agent, intent=world.intent, task=demo.demo_task(urls))

    question = wait_until(
        lambda: Question.across_tenants.filter(run=run, answered_at=None).first(),
        timeout=60,
        what="the question",
    )
    run.refresh_from_db()
    assert run.status == Run.Status.NEEDS_INPUT
    assert (
        question.question
        == "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
    )

    answered = questions.question_answer(
        question=question, answer=answer, user=get_user_model().objects.get(username="tomas")
    )
    assert answered.understood is not None
    assert answered.understood.message == "Understood: at most 1,100 EUR per day for amount."

    def finished() -> Run | None:
        run.refresh_from_db()
        return run if run.status not in Run.ACTIVE else None

    wait_until(finished, timeout=120, what="the run to finish")
    assert run.status == Run.Status.DONE, run.end_reason
    assert run.output.startswith("Here is where things stand.\nSettled (3):")

    pairs = demo.demo_pairs(world)
    assert [p.counterparty for p in pairs] == ["Idris Haddad", "Noor Lindqvist", "Priya Raman"]
    assert all(p.verdicts_match for p in pairs)
    outcomes = {p.counterparty: (p.ours.outcome, p.ours.basis) for p in pairs if p.ours}
    assert outcomes == {
        "Idris Haddad": (Settlement.Outcome.AGREED, Settlement.Basis.REFERENCE),
        "Noor Lindqvist": (Settlement.Outcome.DECLINED, Settlement.Basis.STATE),
        "Priya Raman": (Settlement.Outcome.UNCONFIRMED, Settlement.Basis.STATE),
    }
    agreed = pairs[0].ours
    assert agreed is not None
    assert agreed.terms is not None
    assert 950 <= agreed.terms["amount"] <= 1100
    assert agreed.terms["currency"] == "EUR"
    # Nothing above Tomas's ceiling was ever offered, nor agreed, in any of the three.
    ours = Turn.across_tenants.filter(negotiation__agent=world.tomas_agent, side=Turn.Side.OURS)
    offered = [t.terms["amount"] for t in ours if t.terms] + [
        a for t in ours if not t.terms for a in prose_amounts(t.message)
    ]
    assert offered
    assert max(offered) <= 1100
