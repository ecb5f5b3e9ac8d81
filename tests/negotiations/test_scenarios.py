"""The seed's live scenarios (index-wire-protocol.md §5, dev/stress.ts) with the offline model, live.

Each scenario puts two agents in two tenants. The buyer's run gets a task naming
the seller's public A2A endpoint; its negotiator talks to the seller's over HTTP
through the web process and the Celery worker, exactly as in production. The
parties' limits are term guards, so nobody needs to be asked. Each test asserts
the exact outcome both sides recorded (the Settlement rows of both tenants) and
that the two verdicts match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from a2a_gateway.cards import agent_url
from agents.models import Agent, Intent, Question, Run
from agents.services import question_answer, run_start
from negotiations import negotiator, services
from negotiations.models import Negotiation, Settlement, Turn
from parley.models import Tenant
from tests.conftest import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DAY_RATE = "amount (number, EUR per day), currency"
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def eur(bound: str, value: float, **more: Any) -> dict[str, Any]:
    return {"term": "amount", "op": bound, "value": value, "currency": "EUR", **more}


@dataclass(frozen=True)
class Party:
    """One side of a scenario: who it is, what its terms say, and its hard limits."""

    slug: str
    name: str
    guards: list[dict[str, Any]]
    terms: str = DAY_RATE
    timezone: str = "UTC"

    def create(self, intent: str) -> tuple[Agent, Intent]:
        tenant = Tenant.objects.create(slug=f"{self.slug}-co", name=f"{self.name}'s firm")
        agent = Agent.objects.create(
            tenant=tenant,
            slug=self.slug,
            name=self.name,
            terms=self.terms,
            term_guards=self.guards,
            timezone=self.timezone,
        )
        return agent, Intent.objects.create(tenant=tenant, agent=agent, statement=intent)


@dataclass(frozen=True)
class Outcome:
    """Both sides of one exchange as recorded, after the buyer's run ended."""

    run: Run
    ours: Settlement
    theirs: Settlement

    @property
    def verdict(self) -> tuple[str, str, dict[str, Any] | None]:
        return self.ours.outcome, self.ours.basis, self.ours.terms


def negotiate(buyer: Party, seller: Party, task: str) -> Outcome:
    """Run ``buyer``'s agent on ``task`` against ``seller``'s endpoint; both sides' settlements."""
    buyer_agent, buyer_intent = buyer.create(task)
    seller_agent, _ = seller.create(f"Work for {buyer.name}'s kind of client.")
    run = run_start(agent=buyer_agent, intent=buyer_intent, task=f"{task} Talk to {agent_url(seller_agent)}")

    def ended() -> Run | None:
        run.refresh_from_db()
        return run if run.status not in Run.ACTIVE else None

    wait_until(ended, timeout=120, what="the buyer's run to end")
    assert run.status == Run.Status.DONE, run.end_reason
    assert not Question.objects.filter(run=run).exists()
    outbound = Negotiation.objects.get(agent=buyer_agent)
    inbound = Negotiation.objects.get(agent=seller_agent, task_id=outbound.task_id)
    assert (outbound.tenant_id, inbound.tenant_id) == (buyer_agent.tenant_id, seller_agent.tenant_id)
    ours = Settlement.objects.get(negotiation=outbound, tenant_id=buyer_agent.tenant_id)
    theirs = Settlement.objects.get(negotiation=inbound, tenant_id=seller_agent.tenant_id)
    # One pure function over the same Task: both sides reach the same verdict.
    assert (theirs.outcome, theirs.basis, theirs.terms) == (ours.outcome, ours.basis, ours.terms)
    assert run.output.startswith("Here is where things stand.\nSettled (1):")
    return Outcome(run=run, ours=ours, theirs=theirs)


def test_settled_terms(live_stack: LiveStack) -> None:
    """Idris asks €1,200 a day and goes to €1,000; Tomas pays up to €1,100: a deal within both limits."""
    two_days = {"term": "days", "op": "==", "value": 2}
    tomas = Party("tomas", "Tomas Berg", [eur("<=", 1100), two_days], terms=f"{DAY_RATE}, days (per month)")
    idris = Party(
        "idris",
        "Idris Haddad",
        [eur(">=", 1000, aspiration=1200), two_days],
        terms=f"{DAY_RATE}, days (per month)",
    )

    outcome = negotiate(tomas, idris, "Bring in a fractional CFO for two days a month.")

    assert outcome.verdict == ("agreed", "reference", {"amount": 1042, "currency": "EUR", "days": 2})
    assert "— agreed: {" in outcome.run.output


def test_location_mismatch(live_stack: LiveStack) -> None:
    """Noor hires on-site in Berlin only; Eli works remotely only: no deal, whatever the rate."""
    noor = Party(
        "noor", "Noor Lindqvist", [eur("<=", 700), {"term": "location", "op": "==", "value": "Berlin"}]
    )
    eli = Party("eli", "Eli Moreno", [eur(">=", 400), {"term": "location", "op": "==", "value": "remote"}])

    outcome = negotiate(noor, eli, "Hire a data engineer, on-site in Berlin, five days a week.")

    assert outcome.verdict == ("declined", "state", None)


def test_time_conflict(live_stack: LiveStack) -> None:
    """Frank charges €300 a session firm, weekends only; Gita pays €300 but only on weekdays."""
    per_session = "amount (number, EUR per session), currency, day (weekday)"
    gita = Party(
        "gita",
        "Gita Rao",
        [eur("<=", 300), {"term": "day", "op": "in", "value": WEEKDAYS}],
        terms=per_session,
    )
    frank = Party(
        "frank",
        "Frank Osei",
        [eur("==", 300), {"term": "day", "op": "in", "value": ["Saturday", "Sunday"]}],
        terms=per_session,
    )

    outcome = negotiate(gita, frank, "Book a weekly coaching session.")

    # The price matches; the schedule cannot. That is no agreement.
    assert outcome.verdict == ("declined", "state", None)


def test_relative_date(live_stack: LiveStack) -> None:
    """Hal can start "next Tuesday"; the agreed terms carry that day as a date, worked out from his clock."""
    ivy = Party(
        "ivy",
        "Ivy Chen",
        [eur("<=", 700), {"term": "start", "op": ">=", "value": "tomorrow"}],
        terms=f"{DAY_RATE}, start (date)",
    )
    hal = Party(
        "hal",
        "Hal Jensen",
        [eur(">=", 600), {"term": "start", "op": "==", "value": "next Tuesday"}],
        terms=f"{DAY_RATE}, start (date)",
        timezone="Europe/Berlin",
    )

    outcome = negotiate(ivy, hal, "Find a contractor who can start before the month is out.")

    # The web and worker processes run on the real clock, so the expectation does too.
    hal_agent = Agent.objects.get(slug="hal")
    start = negotiator.resolve_relative_date("next Tuesday", negotiator.local_today(hal_agent))
    assert outcome.verdict == ("agreed", "reference", {"amount": 651, "currency": "EUR", "start": start})


def test_currency_mismatch(live_stack: LiveStack) -> None:
    """Jo's €800 a day is firm and in euros; Kim's ceiling is $800: 800 EUR is never 800 USD."""
    kim = Party(
        "kim",
        "Kim Park",
        [{"term": "amount", "op": "<=", "value": 800, "currency": "USD"}],
        terms="amount (number, USD per day), currency",
    )
    jo = Party("jo", "Jo Brandt", [eur("==", 800)])

    outcome = negotiate(kim, jo, "Hire a designer for a week.")

    assert outcome.verdict == ("declined", "state", None)


def test_a_seller_that_asks_its_party_holds_and_the_buyer_waits_until_told_to_go_on(
    live_stack: LiveStack,
) -> None:
    """Idris's agent knows no floor, so it asks Idris and Tomas's agent gets the holding reply. It
    records that as their turn without a move and asks Tomas when to go on, rather than spend its
    turns on a counterparty with nothing to say. Once both parties have answered, the exchange goes
    on to a deal both sides verify alike."""
    buyer_agent, buyer_intent = Party("tomas", "Tomas Berg", [eur("<=", 1100)]).create("Hire a CFO.")
    seller_agent, _ = Party("idris", "Idris Haddad", []).create("Sell CFO days.")
    run = run_start(
        agent=buyer_agent, intent=buyer_intent, task=f"Hire a CFO. Talk to {agent_url(seller_agent)}"
    )

    question = wait_until(
        lambda: Question.objects.filter(run=run, answered_at=None).first(), what="Tomas's agent to ask him"
    )
    ours = Negotiation.objects.get(agent=buyer_agent)
    theirs = Negotiation.objects.get(agent=seller_agent, task_id=ours.task_id)
    assert question.question == services.HELD_QUESTION
    assert (ours.status, ours.parked_question) == (Negotiation.Status.WAITING, services.HELD_QUESTION)
    assert [(t.side, t.action, t.message) for t in ours.turns.order_by("seq")][1:] == [
        (Turn.Side.THEIRS, "", services.HOLDING_TEXT)
    ]
    assert theirs.status == Negotiation.Status.WAITING
    assert theirs.parked_question.startswith("What is your limit on amount")

    services.negotiation_guidance_give(negotiation=theirs, answer="At least €700 a day.", user=None)
    question_answer(question=question, answer="Go on now.", user=None)

    def ended() -> Run | None:
        run.refresh_from_db()
        return run if run.status not in Run.ACTIVE else None

    wait_until(ended, timeout=120, what="the buyer's run to end")
    assert run.status == Run.Status.DONE, run.end_reason
    mine = Settlement.objects.get(negotiation=ours)
    yours = Settlement.objects.get(negotiation=theirs)
    assert (mine.outcome, mine.basis) == ("agreed", "reference")
    assert (yours.outcome, yours.basis, yours.terms) == (mine.outcome, mine.basis, mine.terms)
    # The same record on both sides, holding reply included.
    assert list(ours.turns.order_by("seq").values_list("raw__messageId", "action")) == list(
        theirs.turns.order_by("seq").values_list("raw__messageId", "action")
    )
