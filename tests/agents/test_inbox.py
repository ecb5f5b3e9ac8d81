"""The inbox: whose questions each role sees, the negotiations they came from, inbound negotiations
parked on their party with questions of their own, answering by htmx,
answers given elsewhere, and a fixed number of queries however many questions are open."""

from __future__ import annotations

import json
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from agents.models import Agent, Intent, Message, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES
from agents.selectors import waiting_on_party
from agents.services import questions, runs
from negotiations.models import Negotiation, Turn
from negotiations.services import parking
from parley.models import Event, Membership, Tenant
from tests.agents.conftest import step
from tests.agents.pages import QUESTION as PARKED_QUESTION
from tests.agents.pages import member
from tests.chat_server import ChatServer
from tests.conftest import on_chat_model, principal_member
from tests.negotiations.pages import inbound

TASK = "Find me a fractional CFO for two days a week."
ANSWER = "https://cfo.example/a2a"
# What the party is told of an answer to an inbound negotiation, and when it is acted on.
WHEN_THEY_WRITE = "when they next write, or at once if they asked to be notified."
ANSWERS_THEM = f"Your agent answers them with it {WHEN_THEY_WRITE}"
AT_LEAST_1000 = "Understood: at least 1,000 EUR per day for amount."
NO_USABLE = "Your answer gives no usable limit on amount (EUR per day):"


def htmx(target: str) -> dict[str, str]:
    """The headers htmx sends with a form whose ``hx-target`` is ``#<target>``."""
    return {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}


def inbox_url(slug: str = "acme") -> str:
    return reverse("agents:inbox", kwargs={"tenant": slug})


def answer_url(question: Question) -> str:
    return reverse("agents:question-answer", kwargs={"tenant": question.tenant.slug, "pk": question.pk})


def decide_url(question: Question) -> str:
    return reverse("agents:approval-decide", kwargs={"tenant": question.tenant.slug, "pk": question.pk})


def asked(agent: Agent, statement: str = "Bring in a fractional CFO.") -> Question:
    """A real run of ``agent`` on a new intent, stepped once: the offline model asks its party
    which agents to negotiate with, and the run waits on that question."""
    intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement=statement)
    run = step(runs.run_start(agent=agent, intent=intent, task=TASK))
    assert run.status == Run.Status.NEEDS_INPUT
    return Question.across_tenants.select_related("run__intent").get(run=run)


def approval_asked(agent: Agent, statement: str = "Book a room.") -> Question:
    """A run stopped on a ``requires_approval`` call, as the loop leaves it, and its approval."""
    intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement=statement)
    run = Run.objects.create(
        tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.NEEDS_INPUT, step_count=1
    )
    arguments = {"room": "A", "nights": 2}
    Message.objects.create(
        tenant=agent.tenant,
        intent=intent,
        run=run,
        seq=1,
        step=1,
        role=Message.Role.ASSISTANT,
        tool_calls=[{"id": "call-1", "name": "book_room", "arguments": json.dumps(arguments)}],
        model="offline",
    )
    return Question.objects.create(
        tenant=agent.tenant,
        run=run,
        tool_call_id="call-1",
        kind=Question.Kind.APPROVAL,
        tool_name="book_room",
        arguments=arguments,
        question="May your agent call book_room?",
    )


def negotiation(
    agent: Agent,
    intent: Intent | None,
    name: str,
    *moves: tuple[str, str, str, Any],
    status: str = Negotiation.Status.WAITING,
) -> Negotiation:
    """A negotiation of ``agent`` with ``name`` and its turns in order, each ``(side, action, message,
    terms)``; by default parked on the party, as the negotiator leaves it."""
    n = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_name=name,
        counterparty_url=f"https://{name.split()[0].lower()}.example/a2a",
        status=status,
        parked_question="May we go above 1,000 EUR a day?" if status == Negotiation.Status.WAITING else "",
    )
    for seq, (side, action, message, terms) in enumerate(moves, start=1):
        Turn.objects.create(
            tenant=agent.tenant,
            negotiation=n,
            seq=seq,
            side=side,
            action=action,
            message=message,
            terms=terms,
        )
    return n


@pytest.fixture
def ines_agent(tenant: Tenant) -> Agent:
    """Another party's agent in the same tenant."""
    ines = member(tenant, "ines", Membership.Role.PRINCIPAL)
    return Agent.objects.create(tenant=tenant, slug="ines", name="Ines's agent", principal=ines)


class TestWhoSeesWhat:
    @pytest.mark.parametrize(
        ("role", "sees_ines", "forms"),
        [
            (Membership.Role.OWNER, True, True),
            (Membership.Role.OPERATOR, True, True),
            (Membership.Role.VIEWER, True, False),
        ],
    )
    def test_owners_operators_and_viewers_see_every_partys_questions(
        self,
        client: Client,
        tenant: Tenant,
        agent: Agent,
        ines_agent: Agent,
        role: str,
        sees_ines: bool,
        forms: bool,
    ) -> None:
        tomas_question = asked(agent)
        ines_question = approval_asked(ines_agent)
        client.force_login(member(tenant, "sam", role))

        html = client.get(inbox_url()).content.decode()

        assert "Questions from the agents (2)" in html
        assert ASK_FOR_COUNTERPARTIES in html
        assert ("May your agent call book_room?" in html) is sees_ines
        assert "Tomas&#x27;s agent (for tomas)" in html
        assert "Ines&#x27;s agent (for ines)" in html
        for question, url in ((tomas_question, answer_url), (ines_question, decide_url)):
            assert (f'hx-post="{url(question)}"' in html) is forms
        assert ('name="answer"' in html) is forms
        assert ('name="decision"' in html) is forms
        assert ("viewers cannot answer" in html) is (role == Membership.Role.VIEWER)

    def test_a_party_sees_only_their_own_agents_questions(
        self, logged_in: Client, agent: Agent, ines_agent: Agent
    ) -> None:
        mine = asked(agent)
        approval_asked(ines_agent)

        html = logged_in.get(inbox_url()).content.decode()

        assert "Questions from your agents (1)" in html
        assert ASK_FOR_COUNTERPARTIES in html
        assert f'hx-post="{answer_url(mine)}"' in html
        assert "book_room" not in html
        assert "(for tomas)" not in html
        assert "viewers cannot answer" not in html

    def test_newest_first_with_the_agent_and_the_intent_linked_to_its_run(
        self, logged_in: Client, agent: Agent
    ) -> None:
        older = asked(agent, "Bring in a fractional CFO.")
        newer = approval_asked(agent, "Book a room for the board.")

        html = logged_in.get(inbox_url()).content.decode()

        assert html.index(f'id="item-{newer.pk}"') < html.index(f'id="item-{older.pk}"')
        run_link = reverse("agents:run", kwargs={"tenant": "acme", "pk": older.run_id})
        assert f'Intent: <a href="{run_link}">Bring in a fractional CFO.</a>' in html
        assert "<strong>Approval</strong> · Tomas&#x27;s agent · asked" in html

    def test_another_tenants_questions_never_show(
        self, client: Client, tenant: Tenant, other_tenant: Tenant, agent: Agent, seller: Agent
    ) -> None:
        seller.principal = principal_member(other_tenant, "idris")
        seller.save(update_fields=["principal"])
        asked(seller, "Take on CFO clients.")
        owner = member(tenant, "olivia", Membership.Role.OWNER)
        Membership.objects.create(user=owner, tenant=other_tenant, role=Membership.Role.OWNER)
        client.force_login(owner)

        html = client.get(inbox_url()).content.decode()

        assert "No open questions." in html
        assert ASK_FOR_COUNTERPARTIES not in html


class TestNegotiationContext:
    def test_each_question_shows_the_negotiations_waiting_on_the_party_with_their_last_move(
        self, logged_in: Client, agent: Agent
    ) -> None:
        question = asked(agent)
        intent = question.run.intent
        idris = negotiation(
            agent,
            intent,
            "Idris Haddad",
            ("ours", "propose", "We offer 800 EUR a day.", {"amount": 800, "currency": "EUR"}),
            ("theirs", "counter", "1,200 is my rate.", {"amount": 1200, "currency": "EUR"}),
            ("ours", "counter", "How about 900?", {"amount": 900, "currency": "EUR"}),
            ("theirs", "counter", "1,050 and I start Monday.", {"amount": 1050, "remote": True}),
        )
        noor = negotiation(agent, intent, "Noor Lindqvist")
        negotiation(agent, intent, "Priya Raman", status=Negotiation.Status.OPEN)
        elsewhere = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a designer.")
        negotiation(agent, elsewhere, "Dana Designer")

        html = logged_in.get(inbox_url()).content.decode()

        detail = reverse("negotiations:detail", kwargs={"tenant": "acme", "pk": idris.pk})
        assert f'<a href="{detail}">With Idris Haddad</a>' in html
        assert 'Their last move: <strong class="action">counter</strong>' in html
        assert '<blockquote class="said">1,050 and I start Monday.</blockquote>' in html
        assert "<div><dt>amount</dt><dd>1050</dd></div><div><dt>remote</dt><dd>true</dd></div>" in html
        assert "1,200 is my rate." not in html  # an earlier move of theirs
        assert "How about 900?" not in html  # our own move
        noor_detail = reverse("negotiations:detail", kwargs={"tenant": "acme", "pk": noor.pk})
        assert f'<a href="{noor_detail}">With Noor Lindqvist</a>' in html
        assert "They have not moved yet." in html
        assert "From these negotiations, waiting on you:" in html
        assert "Priya Raman" not in html  # open, not waiting on the party
        assert "Dana Designer" not in html  # another intent's

    def test_only_the_negotiations_of_a_questions_own_agent_and_intent_are_shown(
        self, client: Client, operator: AbstractUser, agent: Agent, ines_agent: Agent
    ) -> None:
        """Two questions, each of another agent and intent (an operator sees both): a negotiation of
        one's agent under the other's intent belongs to neither thread, on the page or in what the
        inbox reads (only the pairs asked for)."""
        client.force_login(operator)
        ours = asked(agent).run.intent
        theirs = asked(ines_agent).run.intent
        negotiation(agent, ours, "Idris Haddad")
        negotiation(ines_agent, theirs, "Noor Lindqvist")
        negotiation(agent, theirs, "Crossed Once")
        negotiation(ines_agent, ours, "Crossed Twice")

        html = client.get(inbox_url()).content.decode()

        assert "With Idris Haddad" in html
        assert "With Noor Lindqvist" in html
        assert "Crossed Once" not in html
        assert "Crossed Twice" not in html
        found = waiting_on_party(tenant=agent.tenant, pairs={(agent.pk, ours.pk), (ines_agent.pk, theirs.pk)})
        assert {pair: [n.counterparty_name for n, _ in rows] for pair, rows in found.items()} == {
            (agent.pk, ours.pk): ["Idris Haddad"],
            (ines_agent.pk, theirs.pk): ["Noor Lindqvist"],
        }

    def test_a_question_without_negotiations_shows_none(self, logged_in: Client, agent: Agent) -> None:
        asked(agent)

        html = logged_in.get(inbox_url()).content.decode()

        assert 'class="waiting"' not in html

    def test_the_number_of_queries_does_not_grow_with_the_questions(
        self, client: Client, operator: AbstractUser, agent: Agent, ines_agent: Agent
    ) -> None:
        client.force_login(operator)

        def with_negotiation(question: Question, name: str) -> None:
            negotiation(
                question.run.agent,
                question.run.intent,
                name,
                ("theirs", "propose", f"{name} proposes.", {"amount": 1000}),
            )

        with_negotiation(asked(agent, "Intent one."), "Idris Haddad")

        def queries() -> int:
            with CaptureQueriesContext(connection) as ctx:
                response = client.get(inbox_url())
            assert response.status_code == 200
            return len(ctx)

        one = queries()
        with_negotiation(asked(agent, "Intent two."), "Noor Lindqvist")
        with_negotiation(asked(ines_agent, "Intent three."), "Priya Raman")
        with_negotiation(approval_asked(ines_agent, "Intent four."), "Dana Designer")
        four = queries()

        assert four == one
        html = client.get(inbox_url()).content.decode()
        assert "Questions from the agents (4)" in html
        for name in ("Idris Haddad", "Noor Lindqvist", "Priya Raman", "Dana Designer"):
            assert f"{name} proposes." in html


class TestAnsweringByHtmx:
    def test_the_answer_swaps_in_the_fresh_region_without_the_question_and_says_so(
        self, logged_in: Client, principal: AbstractUser, agent: Agent
    ) -> None:
        answered = asked(agent, "Intent one.")
        still_open = approval_asked(agent, "Intent two.")

        response = logged_in.post(answer_url(answered), {"answer": f" {ANSWER} "}, **htmx("questions"))

        html = response.content.decode()
        assert response.status_code == 200
        assert "<html" not in html
        assert html.startswith('\n<section id="questions" data-live="questions"')
        assert 'data-announce="1 open question"' in html
        assert f'id="item-{answered.pk}"' not in html
        assert f'id="item-{still_open.pk}"' in html
        assert (
            '<div id="action-status" class="action-status" role="status" hx-swap-oob="true">'
            '<ul class="messages"><li class="success">Answer sent. Your agent carries on.</li></ul></div>'
        ) in html
        answered.refresh_from_db()
        assert (answered.answer, answered.answered_by_id) == (ANSWER, principal.pk)
        assert Event.across_tenants.filter(
            kind="question.answered", payload__question=str(answered.pk)
        ).exists()
        # The message was shown here: the next page does not show it again.
        assert "Answer sent" not in logged_in.get(inbox_url()).content.decode()

    @pytest.mark.parametrize(
        ("decision", "said", "approved"),
        [
            ("approve", "Approved. Your agent calls book_room.", True),
            ("reject", "Rejected. Your agent carries on without it.", False),
        ],
    )
    def test_a_decision_swaps_in_the_fresh_region(
        self, logged_in: Client, agent: Agent, decision: str, said: str, approved: bool
    ) -> None:
        approval = approval_asked(agent)

        response = logged_in.post(
            decide_url(approval), {"decision": decision, "reason": "Fine."}, **htmx("questions")
        )

        html = response.content.decode()
        assert f'<li class="success">{said}</li>' in html
        assert "No open questions." in html
        approval.refresh_from_db()
        assert approval.approved is approved

    def test_an_empty_answer_is_refused_and_the_question_stays(self, logged_in: Client, agent: Agent) -> None:
        question = asked(agent)

        html = logged_in.post(answer_url(question), {"answer": "  "}, **htmx("questions")).content.decode()

        assert '<li class="error">The answer is empty.</li>' in html
        assert f'id="item-{question.pk}"' in html
        question.refresh_from_db()
        assert question.answered_at is None

    def test_answered_elsewhere_cannot_be_answered_again_and_says_by_whom_and_when(
        self, client: Client, logged_in: Client, operator: AbstractUser, agent: Agent
    ) -> None:
        question = asked(agent)
        # Tomas's tab still shows the question; meanwhile an operator answers it from another tab.
        assert f'id="item-{question.pk}"' in logged_in.get(inbox_url()).content.decode()
        Agent.across_tenants.filter(pk=agent.pk).update(timezone="Europe/Berlin")
        questions.question_answer(question=question, answer="https://noor.example/a2a", user=operator)
        question.refresh_from_db()
        first = (question.answer, question.answered_by_id, question.answered_at)
        messages_before = Message.across_tenants.filter(run=question.run).count()

        response = logged_in.post(answer_url(question), {"answer": ANSWER}, **htmx("questions"))

        html = response.content.decode()
        assert first[2] is not None
        when = first[2].astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M")
        refusal = f"This question was already answered by olga at {when} (Europe/Berlin)."
        assert f'<li class="error">{escape(refusal)}</li>' in html
        assert "Answer sent" not in html
        assert f'id="item-{question.pk}"' not in html
        assert "No open questions." in html
        question.refresh_from_db()
        assert (question.answer, question.answered_by_id, question.answered_at) == first
        assert Message.across_tenants.filter(run=question.run).count() == messages_before

    def test_from_the_run_page_it_swaps_the_run_region(self, logged_in: Client, agent: Agent) -> None:
        question = asked(agent)

        response = logged_in.post(answer_url(question), {"answer": ANSWER}, **htmx("run"))

        html = response.content.decode()
        assert html.startswith('\n<section id="run" data-live="run"')
        assert "Answered by tomas" in html
        assert f"<q>{ANSWER}</q>; the run resumed." in html
        assert '<li class="success">Answer sent. Your agent carries on.</li>' in html

    def test_a_viewer_is_refused_and_nothing_changes(
        self, client: Client, tenant: Tenant, agent: Agent
    ) -> None:
        question = asked(agent)
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

        response = client.post(answer_url(question), {"answer": ANSWER}, **htmx("questions"))

        assert response.status_code == 403
        question.refresh_from_db()
        assert (question.answer, question.answered_at) == ("", None)
        assert not Event.across_tenants.filter(kind="question.answered").exists()


class TestLive:
    def test_a_question_asked_is_announced_and_the_live_fragment_shows_it(
        self, logged_in: Client, agent: Agent
    ) -> None:
        page = logged_in.get(inbox_url()).content.decode()
        assert f'data-live-src="{inbox_url()}?fragment=1"' in page
        assert '<div id="action-status" class="action-status" role="status"></div>' in page

        question = asked(agent)

        assert Event.across_tenants.filter(
            kind="question.opened", payload__question=str(question.pk)
        ).exists()
        fragment = logged_in.get(inbox_url(), {"fragment": "1"}).content.decode()
        assert ASK_FOR_COUNTERPARTIES in fragment
        # Only the form is kept across a live refresh (with what is typed in it): the rest re-renders.
        assert f'id="form-{question.pk}" data-key="{question.pk}" hx-preserve="true"' in fragment
        assert fragment.count("data-key=") == 1

    def test_an_answer_given_elsewhere_leaves_the_live_fragment(
        self, logged_in: Client, operator: AbstractUser, agent: Agent
    ) -> None:
        question = asked(agent)

        questions.question_answer(question=question, answer=ANSWER, user=operator)

        assert Event.across_tenants.filter(
            kind="question.answered", payload__question=str(question.pk)
        ).exists()
        fragment = logged_in.get(inbox_url(), {"fragment": "1"}).content.decode()
        assert ASK_FOR_COUNTERPARTIES not in fragment
        assert 'data-announce="No open questions"' in fragment


def parked(agent: Agent, task_id: str = "task-1", amount: int = 800) -> Negotiation:
    """An inbound negotiation of ``agent`` (which has no limit) parked on its party by the real
    service: they offered ``amount`` a day and the agent asked for its limit."""
    move = {
        "action": "propose",
        "message": f"Would €{amount} a day work?",
        "terms": {"amount": amount, "currency": "EUR"},
        "offerId": f"offer-{task_id}",
    }
    inbound(agent, move, task_id)
    n = Negotiation.across_tenants.get(agent=agent, task_id=task_id)
    assert n.status == Negotiation.Status.WAITING
    return n


def guidance_url(n: Negotiation) -> str:
    return reverse("negotiations:answer", kwargs={"tenant": n.tenant.slug, "pk": n.pk})


class TestParkedNegotiations:
    def test_an_inbound_negotiation_parked_on_the_party_is_listed_with_its_question_and_a_form(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        n = parked(agent)

        html = logged_in.get(inbox_url()).content.decode()

        assert "Questions from your agents (1)" in html
        assert f'<p class="question-text" id="question-{n.pk}">{escape(PARKED_QUESTION)}</p>' in html
        assert 'Their last move: <strong class="action">propose</strong>' in html
        assert '<blockquote class="said">Would €800 a day work?</blockquote>' in html
        assert "<div><dt>amount</dt><dd>800</dd></div><div><dt>currency</dt><dd>EUR</dd></div>" in html
        assert f"Intent: {intent.statement}" in html
        assert f'action="{guidance_url(n)}"' in html
        assert f'hx-post="{guidance_url(n)}" hx-target="#questions"' in html
        assert f'<label for="answer-{n.pk}">Your answer</label>' in html

    def test_it_is_answered_on_its_own_not_under_a_question_of_the_same_thread(
        self, logged_in: Client, agent: Agent
    ) -> None:
        question = asked(agent)
        n = parked(agent)
        assert n.intent_id == question.run.intent_id

        html = logged_in.get(inbox_url()).content.decode()

        assert "Questions from your agents (2)" in html
        assert 'class="waiting"' not in html
        assert html.count(f'id="item-{n.pk}"') == 1

    @pytest.mark.parametrize(
        ("role", "sees", "form"),
        [
            (Membership.Role.OWNER, True, True),
            (Membership.Role.OPERATOR, True, True),
            (Membership.Role.VIEWER, True, False),
            (Membership.Role.PRINCIPAL, False, False),  # another party of the tenant
        ],
    )
    def test_who_sees_it_and_who_may_answer_it(
        self, client: Client, tenant: Tenant, agent: Agent, role: str, sees: bool, form: bool
    ) -> None:
        n = parked(agent)
        client.force_login(member(tenant, "someone", role))

        html = client.get(inbox_url()).content.decode()

        assert (f'id="item-{n.pk}"' in html, f'action="{guidance_url(n)}"' in html) == (sees, form)
        if sees and not form:
            assert "Waiting for the agent's party to answer." in html

    def test_the_answer_by_htmx_becomes_guidance_and_the_item_leaves_the_region(
        self, logged_in: Client, agent: Agent
    ) -> None:
        n = parked(agent)
        other = parked(agent, "task-2", 850)

        response = logged_in.post(
            guidance_url(n), {"answer": " At least €1,000 a day. "}, **htmx("questions")
        )

        html = response.content.decode()
        assert response.status_code == 200
        assert html.startswith('\n<section id="questions" data-live="questions"')
        assert 'data-announce="1 open question"' in html
        assert f'id="item-{n.pk}"' not in html
        assert f'id="item-{other.pk}"' in html
        assert f'<li class="success">{AT_LEAST_1000} {ANSWERS_THEM}</li>' in html
        n.refresh_from_db()
        assert (n.status, n.parked_question, n.guidance) == (
            Negotiation.Status.OPEN,
            "",
            ["At least €1,000 a day."],
        )
        assert Event.across_tenants.filter(
            kind="negotiation.answered", payload__negotiation=str(n.pk)
        ).exists()

    def test_without_javascript_the_answer_redirects_to_the_negotiation_which_says_so(
        self, logged_in: Client, agent: Agent
    ) -> None:
        n = parked(agent)

        response = logged_in.post(guidance_url(n), {"answer": "At least €1,000 a day."}, follow=True)

        detail = reverse("negotiations:detail", kwargs={"tenant": "acme", "pk": n.pk})
        assert response.redirect_chain == [(detail, 302)]
        html = response.content.decode()
        assert f'<li class="success">{AT_LEAST_1000} {ANSWERS_THEM}</li>' in html
        assert '<dt>Standing guidance</dt><dd><ul class="plain"><li>At least €1,000 a day.</li>' in html

    @pytest.mark.parametrize(
        ("answer", "said"),
        [
            # Words: nothing of a limit, and nothing understood but that it will be asked again.
            ("Whatever you think is fair.", f"{NO_USABLE} it names no number."),
            (
                "Not above 1,100, or 1,200 with travel",
                f"{NO_USABLE} it names several numbers (1,100 and 1,200).",
            ),
            ("at most 1100 USD", f"{NO_USABLE} it is in USD, and amount is in EUR."),
        ],
    )
    def test_an_answer_with_no_usable_limit_says_why_and_that_it_is_asked_again(
        self, logged_in: Client, agent: Agent, answer: str, said: str
    ) -> None:
        n = parked(agent)

        response = logged_in.post(guidance_url(n), {"answer": answer}, **htmx("questions"))

        assert f'<li class="success">{escape(said)} Your agent will ask you again {WHEN_THEY_WRITE}</li>' in (
            response.content.decode()
        )
        n.refresh_from_db()
        assert (n.status, n.guidance) == (Negotiation.Status.OPEN, [answer])

    def test_without_javascript_the_limit_as_read_is_said_on_the_negotiations_page(
        self, logged_in: Client, agent: Agent
    ) -> None:
        n = parked(agent)

        response = logged_in.post(guidance_url(n), {"answer": "Never under €950 a day"}, follow=True)

        understood = "Understood: at least 950 EUR per day for amount."
        assert f'<li class="success">{understood} {ANSWERS_THEM}</li>' in response.content.decode()

    def test_an_answer_to_a_question_that_was_not_for_a_limit_is_saved_and_says_when_it_is_acted_on(
        self, logged_in: Client, agent: Agent
    ) -> None:
        """Its operator has since given the agent a term guard, so it needs no limit from the party: the
        answer is kept as guidance and nothing of a limit is said. Nothing has reached them yet."""
        n = parked(agent)
        agent.term_guards = [{"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}]
        agent.save()

        response = logged_in.post(guidance_url(n), {"answer": "Hold at 1,200."}, **htmx("questions"))

        assert f'<li class="success">Answer saved. {ANSWERS_THEM}</li>' in response.content.decode()

    @pytest.mark.parametrize(
        ("answer", "refusal"),
        [
            ("  ", "The answer is empty."),
            (
                "Twice.",
                "This negotiation&#x27;s question was already answered; the answer goes out with the reply "
                "to their next message.",
            ),
        ],
    )
    def test_a_refused_answer_says_why_and_changes_nothing(
        self, logged_in: Client, agent: Agent, answer: str, refusal: str
    ) -> None:
        n = parked(agent)
        if answer == "Twice.":
            parking.negotiation_guidance_give(negotiation=n, answer="Once.", user=None)
        before = Negotiation.across_tenants.filter(pk=n.pk).values().get()

        html = logged_in.post(guidance_url(n), {"answer": answer}, **htmx("questions")).content.decode()

        assert f'<li class="error">{refusal}</li>' in html
        assert Negotiation.across_tenants.filter(pk=n.pk).values().get() == before

    def test_a_viewer_gets_403_and_another_party_or_tenant_404_and_nothing_changes(
        self, client: Client, tenant: Tenant, other_tenant: Tenant, agent: Agent
    ) -> None:
        n = parked(agent)
        before = Negotiation.across_tenants.filter(pk=n.pk).values().get()
        viewer = member(tenant, "vera", Membership.Role.VIEWER)
        ines = member(tenant, "ines", Membership.Role.PRINCIPAL)
        stranger = member(other_tenant, "gus", Membership.Role.OWNER)
        foreign = reverse("negotiations:answer", kwargs={"tenant": "globex", "pk": n.pk})

        for user, url, status in (
            (viewer, guidance_url(n), 403),
            (ines, guidance_url(n), 404),
            (stranger, foreign, 404),
        ):
            client.force_login(user)
            assert client.post(url, {"answer": "Mine now."}, **htmx("questions")).status_code == status

        assert Negotiation.across_tenants.filter(pk=n.pk).values().get() == before
        assert not Event.across_tenants.filter(kind="negotiation.answered").exists()

    def test_parked_and_answered_elsewhere_the_live_fragment_follows(
        self, logged_in: Client, operator: AbstractUser, agent: Agent
    ) -> None:
        n = parked(agent)

        assert Event.across_tenants.filter(
            kind="negotiation.waiting", payload__negotiation=str(n.pk)
        ).exists()
        fragment = logged_in.get(inbox_url(), {"fragment": "1"}).content.decode()
        assert 'data-announce="1 open question"' in fragment
        assert f'id="form-{n.pk}" data-key="{n.pk}" hx-preserve="true"' in fragment

        parking.negotiation_guidance_give(negotiation=n, answer="At least €1,000.", user=operator)

        fragment = logged_in.get(inbox_url(), {"fragment": "1"}).content.decode()
        assert f'id="item-{n.pk}"' not in fragment
        assert 'data-announce="No open questions"' in fragment

    def test_the_number_of_queries_does_not_grow_with_them(
        self, client: Client, operator: AbstractUser, agent: Agent, ines_agent: Agent
    ) -> None:
        client.force_login(operator)
        parked(agent, "task-1")

        def queries() -> int:
            with CaptureQueriesContext(connection) as ctx:
                response = client.get(inbox_url())
            assert response.status_code == 200
            return len(ctx)

        one = queries()
        parked(agent, "task-2", 850)
        ines_agent.terms = agent.terms
        ines_agent.save()
        parked(ines_agent, "task-3", 900)

        assert queries() == one
        html = client.get(inbox_url()).content.decode()
        assert "Questions from the agents (3)" in html
        assert "(for ines)" in html


class TestWhatTheAnswerToARunsQuestionTellsItsNegotiations:
    """The offline loop answers the negotiations waiting on the party with the party's words: what
    their negotiator reads of a limit in them is said as the answer is sent."""

    def test_the_limit_as_read_is_said_with_the_answer(self, logged_in: Client, agent: Agent) -> None:
        question = asked(agent)
        negotiation(agent, question.run.intent, "Idris Haddad")

        response = logged_in.post(
            answer_url(question), {"answer": "Not above €1,100 a day."}, **htmx("questions")
        )

        said = "Answer sent. Your agent carries on. Understood: at most 1,100 EUR per day for amount."
        assert f'<li class="success">{said}</li>' in response.content.decode()

    def test_without_javascript_an_answer_with_no_usable_limit_says_why_on_the_runs_page(
        self, logged_in: Client, agent: Agent
    ) -> None:
        question = asked(agent)
        negotiation(agent, question.run.intent, "Idris Haddad")

        response = logged_in.post(answer_url(question), {"answer": "1e3"}, follow=True)

        run_page = reverse("agents:run", kwargs={"tenant": "acme", "pk": question.run_id})
        assert response.redirect_chain == [(run_page, 302)]
        said = (
            f"Answer sent. Your agent carries on. {NO_USABLE} it names 1e3, which I cannot read as an "
            "amount. Your agent will ask you again."
        )
        assert f'<li class="success">{said}</li>' in response.content.decode()

    def test_negotiations_that_read_it_differently_are_each_named(
        self, logged_in: Client, agent: Agent
    ) -> None:
        """Noor's negotiation has Tomas's ceiling from before, so a floor now contradicts it."""
        question = asked(agent)
        negotiation(agent, question.run.intent, "Idris Haddad")
        noor = negotiation(agent, question.run.intent, "Noor Lindqvist")
        Negotiation.across_tenants.filter(pk=noor.pk).update(guidance=["Up to €1,100 a day."])

        response = logged_in.post(answer_url(question), {"answer": "At least €900"}, **htmx("questions"))

        said = (
            "Answer sent. Your agent carries on. With Idris Haddad: Understood: at least 900 EUR per day "
            f"for amount. With Noor Lindqvist: {NO_USABLE} it gives 900 as the least you will take, and you "
            "gave your limit as the most you will pay before. Your agent will ask you again."
        )
        assert f'<li class="success">{said}</li>' in response.content.decode()

    def test_nothing_is_said_of_a_limit_where_the_agents_model_reads_the_answer(
        self, logged_in: Client, agent: Agent, chat: ChatServer
    ) -> None:
        question = asked(agent)
        negotiation(agent, question.run.intent, "Idris Haddad")
        on_chat_model(agent, chat)

        response = logged_in.post(
            answer_url(question), {"answer": "Not above €1,100 a day."}, **htmx("questions")
        )

        assert '<li class="success">Answer sent. Your agent carries on.</li>' in response.content.decode()


class TestPages:
    """The inbox lists its open questions a page at a time (``agents.pages.INBOX_PAGE``, 2 here):
    runs' questions newest first, then those parked on the party; every one is on some page."""

    @pytest.fixture(autouse=True)
    def two_a_page(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("agents.pages.INBOX_PAGE", 2)

    def test_each_page_lists_its_share_and_links_to_the_others(self, logged_in: Client, agent: Agent) -> None:
        older, newer = approval_asked(agent, "Intent one."), approval_asked(agent, "Intent two.")
        n = parked(agent)

        first = logged_in.get(inbox_url()).content.decode()
        second = logged_in.get(inbox_url(), {"page": "2"}).content.decode()

        assert "Questions from your agents (3)" in first
        assert "Questions from your agents (3)" in second
        assert first.index(f'id="item-{newer.pk}"') < first.index(f'id="item-{older.pk}"')
        assert f'id="item-{n.pk}"' not in first
        assert '<a href="?page=2" rel="next">Older</a>' in first
        assert "Page 1 of 2" in first
        assert f'id="item-{n.pk}"' in second
        assert f'id="item-{older.pk}"' not in second
        assert '<a href="?page=1" rel="prev">Newer</a>' in second
        assert 'rel="next"' not in second
        assert f'data-live-src="{inbox_url()}?fragment=1&amp;page=2"' in second
        # A page past the end is the last, a malformed one the first.
        assert f'id="item-{n.pk}"' in logged_in.get(inbox_url(), {"page": "9"}).content.decode()
        assert f'id="item-{newer.pk}"' in logged_in.get(inbox_url(), {"page": "x"}).content.decode()

    def test_an_answer_by_htmx_comes_back_at_the_page_it_was_sent_from(
        self, logged_in: Client, agent: Agent
    ) -> None:
        approval_asked(agent, "Intent one.")
        approval_asked(agent, "Intent two.")
        n = parked(agent)
        parked(agent, task_id="task-2")

        response = logged_in.post(
            guidance_url(n),
            {"answer": "At least €1,000."},
            HTTP_HX_CURRENT_URL=f"http://testserver{inbox_url()}?page=2",
            **htmx("questions"),
        )

        html = response.content.decode()
        assert "Questions from your agents (3)" in html
        assert f'id="item-{n.pk}"' not in html
        assert "Page 2 of 2" in html
