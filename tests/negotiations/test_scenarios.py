"""The seed's live scenarios (Index Network's ``dev/stress.ts``) with the offline model, live.

Each scenario puts two agents in two tenants. The buyer's run gets a task naming
the seller's public A2A endpoint; its negotiator talks to the seller's over HTTP
through the web process and the Celery worker, exactly as in production. The
parties' limits are term guards, so nobody needs to be asked. Each test asserts
the exact outcome both sides recorded (the Settlement rows of both tenants) and
that the two verdicts match. Each party is its agent's principal, as the importer
makes them: an agent with nobody to ask never asks.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from a2a_gateway.models import A2ATask
from agents.addresses import agent_url
from agents.models import Agent, Intent, Question, Run
from agents.services import questions, runs
from negotiations import negotiator
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import outbound, parking
from negotiations.services.inbound import HOLDING_TEXT
from negotiations.services.outbound import HELD_WITHOUT_PRINCIPAL
from parley.models import Membership, Tenant
from tests.conftest import README_SCENARIO, LiveStack, make_user, wait_until

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
        """The party's tenant, its account as the agent's principal (who answers what it asks), the
        agent and its intent."""
        tenant = Tenant.objects.create(slug=f"{self.slug}-co", name=f"{self.name}'s firm")
        person = make_user(self.slug)
        Membership.objects.create(user=person, tenant=tenant, role=Membership.Role.PRINCIPAL)
        agent = Agent.objects.create(
            tenant=tenant,
            slug=self.slug,
            name=self.name,
            terms=self.terms,
            term_guards=self.guards,
            timezone=self.timezone,
            principal=person,
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
    run = runs.run_start(
        agent=buyer_agent, intent=buyer_intent, task=f"{task} Talk to {agent_url(seller_agent)}"
    )

    def ended() -> Run | None:
        run.refresh_from_db()
        return run if run.status not in Run.ACTIVE else None

    wait_until(ended, timeout=120, what="the buyer's run to end")
    assert run.status == Run.Status.DONE, run.end_reason
    assert not Question.across_tenants.filter(run=run).exists()
    outbound = Negotiation.across_tenants.get(agent=buyer_agent)
    inbound = Negotiation.across_tenants.get(agent=seller_agent, task_id=outbound.task_id)
    assert (outbound.tenant_id, inbound.tenant_id) == (buyer_agent.tenant_id, seller_agent.tenant_id)
    ours = Settlement.across_tenants.get(negotiation=outbound, tenant_id=buyer_agent.tenant_id)
    theirs = Settlement.across_tenants.get(negotiation=inbound, tenant_id=seller_agent.tenant_id)
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

    assert outcome.verdict == ("agreed", "reference", {"amount": 1040, "currency": "EUR", "days": 2})
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
    hal_agent = Agent.across_tenants.get(slug="hal")
    start = negotiator.resolve_relative_date("next Tuesday", negotiator.local_today(hal_agent))
    assert outcome.verdict == ("agreed", "reference", {"amount": 650, "currency": "EUR", "start": start})


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
    run = runs.run_start(
        agent=buyer_agent, intent=buyer_intent, task=f"Hire a CFO. Talk to {agent_url(seller_agent)}"
    )

    question = wait_until(
        lambda: Question.across_tenants.filter(run=run, answered_at=None).first(),
        what="Tomas's agent to ask him",
    )
    ours = Negotiation.across_tenants.get(agent=buyer_agent)
    theirs = Negotiation.across_tenants.get(agent=seller_agent, task_id=ours.task_id)
    assert question.question == outbound.HELD_QUESTION
    assert (ours.status, ours.parked_question) == (Negotiation.Status.WAITING, outbound.HELD_QUESTION)
    assert [(t.side, t.action, t.message) for t in ours.turns.order_by("seq")][1:] == [
        (Turn.Side.THEIRS, "", HOLDING_TEXT)
    ]
    assert theirs.status == Negotiation.Status.WAITING
    assert theirs.parked_question.startswith("What is your limit on amount")

    parking.negotiation_guidance_give(negotiation=theirs, answer="At least €700 a day.", user=None)
    questions.question_answer(question=question, answer="Go on now.", user=None)

    def ended() -> Run | None:
        run.refresh_from_db()
        return run if run.status not in Run.ACTIVE else None

    wait_until(ended, timeout=120, what="the buyer's run to end")
    assert run.status == Run.Status.DONE, run.end_reason
    mine = Settlement.across_tenants.get(negotiation=ours)
    yours = Settlement.across_tenants.get(negotiation=theirs)
    assert (mine.outcome, mine.basis) == ("agreed", "reference")
    assert (yours.outcome, yours.basis, yours.terms) == (mine.outcome, mine.basis, mine.terms)
    # The same record on both sides, holding reply included.
    assert list(ours.turns.order_by("seq").values_list("raw__messageId", "action")) == list(
        theirs.turns.order_by("seq").values_list("raw__messageId", "action")
    )


# --- the README's scenario, imported --------------------------------------------------------------

LIMIT_QUESTION = "What is your limit on amount: the most you will pay, or the least you will take?"
IN_WORDS = "No money changes hands: we would build it together, alongside our day jobs."
DECLINE = "I must decline: I have no limit on amount and no principal to ask for one."


def imported(*, taken: tuple[str, ...] = ()) -> tuple[dict[str, Agent], str]:
    """The README's example, ``import_scenario <README_SCENARIO> --tenant lisbon --create-tenant``:
    its agents by slug and what the command wrote to stderr. Each of ``taken`` is first made an
    account of someone outside the tenant, so the importer cannot make it a principal."""
    for username in taken:
        make_user(username)
    err = StringIO()
    call_command(
        "import_scenario",
        str(README_SCENARIO),
        "--tenant",
        "lisbon",
        "--create-tenant",
        stdout=StringIO(),
        stderr=err,
    )
    agents = Agent.across_tenants.filter(tenant__slug="lisbon").select_related("principal")
    return {a.slug: a for a in agents}, err.getvalue()


def open_question(run: Run) -> Question | None:
    return Question.across_tenants.filter(run=run, answered_at=None).first()


def heard_nothing(agent: Agent) -> bool:
    """Whether nothing of a negotiation ever reached ``agent``'s public endpoint."""
    return (
        not A2ATask.across_tenants.filter(agent=agent).exists()
        and not Negotiation.across_tenants.filter(agent=agent).exists()
    )


def test_the_readme_scenario_asks_alice_in_her_inbox_and_says_what_her_answer_in_words_lacked(
    live_stack: LiveStack, client: Client
) -> None:
    """Imported as the README says, Alice is her agent's principal. Her agent asks her for its limit in
    her inbox, never over the wire; she answers in words, and it asks again saying what was missing."""
    agents, _ = imported()
    alice, bob = agents["alice"], agents["bob"]
    assert alice.principal is not None
    client.force_login(alice.principal)
    inbox = reverse("agents:inbox", kwargs={"tenant": "lisbon"})

    started = client.post(
        reverse("agents:start", kwargs={"tenant": "lisbon"}),
        {
            "agent": str(alice.pk),
            "intent": str(Intent.across_tenants.get(agent=alice).pk),
            "task": f"Talk to {agent_url(bob)}",
        },
    )
    run = Run.across_tenants.get(agent=alice)
    assert started.status_code == 302
    question = wait_until(lambda: open_question(run), what="Alice's agent to ask her")

    assert question.question == LIMIT_QUESTION
    assert LIMIT_QUESTION in client.get(inbox).content.decode()
    assert heard_nothing(bob)
    assert not Negotiation.across_tenants.get(agent=alice).turns.exists()

    client.post(
        reverse("agents:question-answer", kwargs={"tenant": "lisbon", "pk": question.pk}),
        {"answer": IN_WORDS},
    )
    again = wait_until(lambda: open_question(run), what="Alice's agent to ask her again")

    explained = (
        f'Your answer gives no usable limit on amount: it names no number. You said: "{IN_WORDS}" '
        + LIMIT_QUESTION
    )
    assert again.question == explained
    assert html.escape(explained) in client.get(inbox).content.decode()
    assert heard_nothing(bob)
    assert Negotiation.across_tenants.get(agent=alice).answers == [
        {"question": LIMIT_QUESTION, "answer": IN_WORDS}
    ]


def test_an_imported_agent_the_importer_found_no_principal_for_declines_on_the_wire_and_never_asks(
    live_stack: LiveStack,
) -> None:
    """Bob's account name is someone else's, so the importer says so and Bob's agent has nobody to
    ask. Offered an amount it has no limit for, it declines, naming why, instead of holding Alice's
    agent with a question no one will answer."""
    agents, err = imported(taken=("lisbon.bob",))
    alice, bob = agents["alice"], agents["bob"]
    assert (
        "No principal for bob: the username lisbon.bob is taken by an account that is not a member of lisbon."
        in err
    )
    assert bob.principal is None
    alice.term_guards = [{"term": "amount", "op": "<=", "value": 500, "currency": "EUR"}]
    alice.save()

    run = runs.run_start(
        agent=alice, intent=Intent.across_tenants.get(agent=alice), task=f"Talk to {agent_url(bob)}"
    )
    wait_until(lambda: Run.across_tenants.get(pk=run.pk).status not in Run.ACTIVE, what="Alice's run to end")

    ours, theirs = Negotiation.across_tenants.get(agent=alice), Negotiation.across_tenants.get(agent=bob)
    # What Alice's agent received over the wire is Bob's agent's decline, and nothing else.
    received = ours.turns.filter(side=Turn.Side.THEIRS).get()
    assert received.raw["parts"] == [{"data": {"action": "reject", "message": DECLINE}}]
    assert [(t.side, t.action, t.message) for t in ours.turns.order_by("seq")] == [
        (Turn.Side.OURS, "propose", "I can offer €350."),
        (Turn.Side.THEIRS, "reject", DECLINE),
    ]
    assert (theirs.status, theirs.parked_question, theirs.task_state) == (
        Negotiation.Status.SETTLED,
        "",
        "rejected",
    )
    assert Settlement.across_tenants.get(negotiation=theirs).outcome == Settlement.Outcome.DECLINED
    assert Settlement.across_tenants.get(negotiation=ours).outcome == Settlement.Outcome.DECLINED
    assert not Question.across_tenants.exists()


def test_an_imported_agent_without_a_principal_sends_nothing_when_it_would_ask(live_stack: LiveStack) -> None:
    """Alice's account name is taken, so her agent has nobody to ask for its limit: rather than open
    an exchange only to decline it, it sends nothing and its run reports why."""
    agents, _ = imported(taken=("lisbon.alice",))
    alice, bob = agents["alice"], agents["bob"]
    assert alice.principal is None

    run = runs.run_start(
        agent=alice, intent=Intent.across_tenants.get(agent=alice), task=f"Talk to {agent_url(bob)}"
    )
    wait_until(lambda: Run.across_tenants.get(pk=run.pk).status not in Run.ACTIVE, what="Alice's run to end")

    run.refresh_from_db()
    negotiation = Negotiation.across_tenants.get(agent=alice)
    assert (negotiation.status, negotiation.error) == (
        Negotiation.Status.FAILED,
        f"nothing was sent: {DECLINE}",
    )
    assert heard_nothing(bob)
    assert not Question.across_tenants.exists()
    assert (run.status, run.output) == (
        Run.Status.DONE,
        "Here is where things stand.\nFailed (1):\n"
        f"- {negotiation.pk} ({agent_url(bob)}) — nothing was sent: {DECLINE}",
    )


def test_without_a_principal_a_holding_reply_ends_our_side_instead_of_asking_when_to_go_on(
    live_stack: LiveStack,
) -> None:
    """Bob's agent consults Bob and holds Alice's agent. Alice's agent, with nobody to ask when to go
    on, stops its side naming why (a retry can follow), rather than leave a question no one answers."""
    agents, _ = imported(taken=("lisbon.alice",))
    alice, bob = agents["alice"], agents["bob"]
    alice.term_guards = [{"term": "amount", "op": "<=", "value": 500, "currency": "EUR"}]
    alice.save()

    run = runs.run_start(
        agent=alice, intent=Intent.across_tenants.get(agent=alice), task=f"Talk to {agent_url(bob)}"
    )
    wait_until(lambda: Run.across_tenants.get(pk=run.pk).status not in Run.ACTIVE, what="Alice's run to end")

    ours, theirs = Negotiation.across_tenants.get(agent=alice), Negotiation.across_tenants.get(agent=bob)
    assert (ours.status, ours.error, ours.parked_question) == (
        Negotiation.Status.FAILED,
        HELD_WITHOUT_PRINCIPAL,
        "",
    )
    assert [(t.side, t.action, t.message) for t in ours.turns.order_by("seq")] == [
        (Turn.Side.OURS, "propose", "I can offer €350."),
        (Turn.Side.THEIRS, "", HOLDING_TEXT),
    ]
    assert (theirs.status, theirs.parked_question) == (Negotiation.Status.WAITING, LIMIT_QUESTION)
    assert not Question.across_tenants.exists()
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    assert run.output.endswith(
        f"— {HELD_WITHOUT_PRINCIPAL} — the exchange stays with them; answer this id to try again"
    )
