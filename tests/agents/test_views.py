"""The inbox, answering a question, the run page and the agent page: permissions, tenancy, refusals."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from parley.models import Membership, Tenant
from tests.agents.pages import QUESTION, member, run_url, waiting_question

ANSWER = "Up to €1,100 a day."


def answer_url(question: Question, tenant: Tenant | None = None) -> str:
    slug = (tenant or question.tenant).slug
    return reverse("agents:question-answer", kwargs={"tenant": slug, "pk": question.pk})


def assert_unchanged(question: Question) -> None:
    """The question is still open, its run still waits, and no tool result was written."""
    question.refresh_from_db()
    assert (question.answer, question.answered_by_id, question.answered_at) == ("", None, None)
    assert question.run.messages.filter(role=Message.Role.TOOL).count() == 0
    question.run.refresh_from_db()
    assert question.run.status == Run.Status.NEEDS_INPUT


@pytest.fixture
def question(agent: Agent, intent: Intent) -> Question:
    return waiting_question(agent, intent)


@pytest.fixture
def foreign_question(seller: Agent) -> Question:
    """An open question of another tenant's agent."""
    intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Take on CFO clients.")
    return waiting_question(seller, intent, text="What is my floor?")


class TestInbox:
    def test_lists_the_partys_open_questions_with_a_labelled_answer_form(
        self, logged_in: Client, question: Question
    ) -> None:
        response = logged_in.get(reverse("agents:inbox", kwargs={"tenant": "acme"}))

        assert response.status_code == 200
        html = response.content.decode()
        assert QUESTION in html
        assert f'<label for="answer-{question.pk}">Your answer</label>' in html
        assert f'id="answer-{question.pk}" name="answer"' in html
        assert 'data-announce="1 open question"' in html
        assert "<h1>Acme Robotics</h1>" in html
        assert 'aria-live="polite"' in html

    def test_lists_approvals_next_to_questions(
        self, logged_in: Client, agent: Agent, intent: Intent, question: Question
    ) -> None:
        other_intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Book a room.")
        approval = waiting_question(agent, other_intent, text="May your agent call book_room?")
        Question.across_tenants.filter(pk=approval.pk).update(
            kind=Question.Kind.APPROVAL, tool_name="book_room", arguments={"room": "A", "nights": 2}
        )

        html = logged_in.get(reverse("agents:inbox", kwargs={"tenant": "acme"})).content.decode()

        assert 'data-announce="2 open questions"' in html
        assert QUESTION in html
        assert f'<li class="question approval" id="item-{approval.pk}">' in html
        assert f'id="form-{approval.pk}" data-key="{approval.pk}" hx-preserve="true"' in html
        assert "<strong>Approval</strong> · Tomas&#x27;s agent" in html
        assert "Tool <code>book_room</code>, with these arguments:" in html
        assert "{\n  &quot;room&quot;: &quot;A&quot;,\n  &quot;nights&quot;: 2\n}</pre>" in html
        assert reverse("agents:approval-decide", kwargs={"tenant": "acme", "pk": approval.pk}) in html
        assert '<button type="submit" name="decision" value="approve"' in html

    def test_fragment_is_the_live_regions_alone(self, logged_in: Client, question: Question) -> None:
        response = logged_in.get(reverse("agents:inbox", kwargs={"tenant": "acme"}), {"fragment": "1"})

        html = response.content.decode()
        assert response.status_code == 200
        assert "<html" not in html
        assert 'data-live="questions"' in html
        assert 'data-live="runs"' in html
        assert f'data-key="{question.pk}"' in html

    def test_without_questions_says_so(self, logged_in: Client, agent: Agent) -> None:
        response = logged_in.get(reverse("agents:inbox", kwargs={"tenant": "acme"}))

        assert "No open questions." in response.content.decode()
        assert 'data-announce="No open questions"' in response.content.decode()

    def test_hides_answered_questions_and_other_parties_questions(
        self, logged_in: Client, tenant: Tenant, question: Question, intent: Intent
    ) -> None:
        other_party = member(tenant, "ines", Membership.Role.PRINCIPAL)
        other_agent = Agent.objects.create(
            tenant=tenant, slug="ines", name="Ines's agent", principal=other_party
        )
        other_intent = Intent.objects.create(tenant=tenant, agent=other_agent, statement="Hire.")
        waiting_question(other_agent, other_intent, text="Ines only?")
        Question.across_tenants.filter(pk=question.pk).update(answer="x", answered_at=question.created_at)

        html = logged_in.get(reverse("agents:inbox", kwargs={"tenant": "acme"})).content.decode()

        assert QUESTION not in html
        assert "Ines only?" not in html
        assert "No open questions." in html

    @pytest.mark.parametrize("slug", ["globex", "no-such-tenant"])
    def test_a_tenant_the_user_is_not_a_member_of_is_404(
        self, logged_in: Client, other_tenant: Tenant, foreign_question: Question, slug: str
    ) -> None:
        for url in (
            reverse("agents:inbox", kwargs={"tenant": slug}),
            reverse("agents:inbox", kwargs={"tenant": slug}) + "?fragment=1",
        ):
            response = logged_in.get(url)
            assert response.status_code == 404
            assert "What is my floor?" not in response.content.decode()

    def test_anonymous_is_sent_to_log_in(self, client: Client, tenant: Tenant) -> None:
        response = client.get(reverse("agents:inbox", kwargs={"tenant": "acme"}))

        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


class TestAnswer:
    def test_records_the_answer_and_resumes_the_run(
        self, logged_in: Client, principal: AbstractUser, question: Question
    ) -> None:
        response = logged_in.post(answer_url(question), {"answer": f"  {ANSWER}  "}, follow=True)

        assert response.redirect_chain == [(run_url(question.run), 302)]
        assert "Answer sent. Your agent carries on." in response.content.decode()
        question.refresh_from_db()
        assert (question.answer, question.answered_by_id) == (ANSWER, principal.pk)
        assert question.answered_at is not None
        result = question.run.messages.get(role=Message.Role.TOOL)
        assert (result.tool_call_id, result.content) == ("call-1", ANSWER)
        question.run.refresh_from_db()
        assert question.run.status == Run.Status.RUNNING

    def test_a_second_answer_is_refused_and_changes_nothing(
        self, logged_in: Client, principal: AbstractUser, question: Question
    ) -> None:
        logged_in.post(answer_url(question), {"answer": ANSWER}, follow=True)
        question.refresh_from_db()
        first = (question.answer, question.answered_by_id, question.answered_at)

        response = logged_in.post(answer_url(question), {"answer": "Up to €5,000 a day."}, follow=True)

        assert response.redirect_chain == [(run_url(question.run), 302)]
        html = response.content.decode()
        when = first[2].astimezone(UTC).strftime("%Y-%m-%d %H:%M")
        assert f'<li class="error">This question was already answered by tomas at {when} (UTC).</li>' in html
        assert "Answer sent" not in html
        question.refresh_from_db()
        assert (question.answer, question.answered_by_id, question.answered_at) == first
        assert question.run.messages.filter(role=Message.Role.TOOL).count() == 1

    def test_an_empty_answer_is_refused(self, logged_in: Client, question: Question) -> None:
        response = logged_in.post(answer_url(question), {"answer": "   "}, follow=True)

        assert '<li class="error">The answer is empty.</li>' in response.content.decode()
        assert_unchanged(question)

    def test_a_stopped_run_takes_no_answer(self, logged_in: Client, question: Question) -> None:
        Run.across_tenants.filter(pk=question.run_id).update(status=Run.Status.CANCELLED)

        response = logged_in.post(answer_url(question), {"answer": ANSWER}, follow=True)

        assert "The run is cancelled; it no longer takes answers." in response.content.decode()
        question.refresh_from_db()
        assert question.answered_at is None

    def test_a_viewer_cannot_answer(self, client: Client, tenant: Tenant, question: Question) -> None:
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

        response = client.post(answer_url(question), {"answer": ANSWER})

        assert response.status_code == 403
        assert "Only the agent&#x27;s party, an owner or an operator can answer" in response.content.decode()
        assert_unchanged(question)

    def test_a_viewer_sees_no_answer_form(self, client: Client, tenant: Tenant, question: Question) -> None:
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

        html = client.get(run_url(question.run)).content.decode()

        assert QUESTION in html
        assert 'name="answer"' not in html
        assert "Waiting for the agent's party to answer." in html

    def test_another_party_of_the_tenant_cannot_answer(
        self, client: Client, tenant: Tenant, question: Question
    ) -> None:
        client.force_login(member(tenant, "ines", Membership.Role.PRINCIPAL))

        # Another party's question is not theirs to see at all.
        assert client.post(answer_url(question), {"answer": ANSWER}).status_code == 404
        assert_unchanged(question)

    def test_an_operator_may_answer_for_the_party(
        self, client: Client, operator: AbstractUser, question: Question
    ) -> None:
        client.force_login(operator)

        response = client.post(answer_url(question), {"answer": ANSWER})

        assert response.status_code == 302
        question.refresh_from_db()
        assert (question.answer, question.answered_by_id) == (ANSWER, operator.pk)

    def test_another_tenants_question_is_404_and_changes_nothing(
        self, logged_in: Client, tenant: Tenant, foreign_question: Question
    ) -> None:
        # Through the user's own tenant, and through the other tenant's URL.
        for url in (answer_url(foreign_question, tenant), answer_url(foreign_question)):
            assert logged_in.post(url, {"answer": ANSWER}).status_code == 404
        assert_unchanged(foreign_question)

    def test_another_tenants_question_is_404_even_to_a_member_of_both(
        self, client: Client, tenant: Tenant, other_tenant: Tenant, foreign_question: Question
    ) -> None:
        # An owner of acme who is also an owner of globex still cannot reach globex's question via acme.
        user = member(tenant, "olivia", Membership.Role.OWNER)
        Membership.objects.create(user=user, tenant=other_tenant, role=Membership.Role.OWNER)
        client.force_login(user)

        assert client.post(answer_url(foreign_question, tenant), {"answer": ANSWER}).status_code == 404
        assert_unchanged(foreign_question)

    def test_get_is_not_allowed(self, logged_in: Client, question: Question) -> None:
        assert logged_in.get(answer_url(question)).status_code == 405


class TestRunPage:
    def test_shows_status_question_and_steps(self, logged_in: Client, question: Question) -> None:
        response = logged_in.get(run_url(question.run))

        html = response.content.decode()
        assert response.status_code == 200
        assert 'data-status="needs_input">Needs Input</strong>' in html
        assert 'data-announce="Run status: Needs Input"' in html
        assert QUESTION in html
        assert f'id="answer-{question.pk}"' in html
        assert "Find me a CFO." in html

    def test_an_answered_question_shows_who_answered_and_what(
        self, logged_in: Client, question: Question
    ) -> None:
        logged_in.post(answer_url(question), {"answer": ANSWER})

        html = logged_in.get(run_url(question.run), {"fragment": "1"}).content.decode()

        assert "<html" not in html
        assert "Answered by tomas" in html
        assert f"<q>{ANSWER}</q>" in html
        assert 'name="answer"' not in html
        assert 'data-status="running"' in html

    def test_another_tenants_run_is_404(
        self, logged_in: Client, tenant: Tenant, foreign_question: Question
    ) -> None:
        for url in (run_url(foreign_question.run, tenant), run_url(foreign_question.run)):
            response = logged_in.get(url)
            assert response.status_code == 404
            assert "What is my floor?" not in response.content.decode()


class TestAgentPage:
    def test_its_party_sees_who_it_is_but_not_how_it_is_built(self, logged_in: Client, agent: Agent) -> None:
        html = logged_in.get(
            reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})
        ).content.decode()

        assert "<dt>Answers its questions</dt><dd>tomas</dd>" in html
        for built in (
            "<h2>System prompt</h2>",
            "You act for Tomas.",
            "<h2>Tools</h2>",
            "<h2>Guardrails</h2>",
        ):
            assert built not in html

    def test_an_agent_without_a_principal_says_it_declines_where_it_would_ask(
        self, client: Client, agent: Agent, operator: AbstractUser
    ) -> None:
        agent.principal = None
        agent.save()
        client.force_login(operator)

        html = client.get(reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})).content.decode()

        assert (
            "<dt>Answers its questions</dt>"
            "<dd>nobody yet: without a principal it declines where it would ask</dd>"
        ) in html

    def test_shows_the_agent(self, logged_in: Client, agent: Agent) -> None:
        response = logged_in.get(reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk}))

        assert response.status_code == 200
        assert "<h1>Tomas&#x27;s agent</h1>" in response.content.decode()

    def test_another_tenants_agent_is_404(self, logged_in: Client, tenant: Tenant, seller: Agent) -> None:
        for slug in ("acme", "globex"):
            response = logged_in.get(reverse("agents:agent", kwargs={"tenant": slug, "pk": seller.pk}))
            assert response.status_code == 404
            assert "Idris" not in response.content.decode()

    def test_shows_its_configuration_read_only_to_an_operator(
        self, client: Client, operator: AbstractUser, agent: Agent
    ) -> None:
        client.force_login(operator)
        ModelEndpoint.objects.create(
            tenant=agent.tenant,
            name="fast",
            base_url="https://models.example/v1",
            upstream_model="fast-1",
            input_price=Decimal("0.15"),
            output_price=Decimal("0.60"),
            currency="EUR",
        )
        Agent.across_tenants.filter(pk=agent.pk).update(
            model="fast",
            fallback_models=["offline", "missing"],
            guardrails=[
                {"name": "no-emails", "stage": "output", "action": "redact", "match": "email"},
                {
                    "name": "no-iban",
                    "stage": "input",
                    "action": "block",
                    "match": "regex",
                    "pattern": "DE\\d+",
                },
            ],
            history=Agent.History.WINDOW,
            history_window=6,
            on_busy=Agent.OnBusy.QUEUE,
            max_steps=7,
        )
        booking = Tool.objects.create(
            tenant=agent.tenant,
            name="book_room",
            description="Book a meeting room.",
            kind=Tool.Kind.HOST,
            url="https://host.example/book",
            requires_approval=True,
        )
        designer = Agent.objects.create(tenant=agent.tenant, slug="designer", name="Designer")
        ask = Tool.objects.create(
            tenant=agent.tenant,
            name="ask_designer",
            description="Ask the designer.",
            kind=Tool.Kind.AGENT,
            target_agent=designer,
            suspends=True,
        )
        agent.tools.add(booking, ask)

        html = client.get(reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})).content.decode()

        for fact in [
            "<dt>Model</dt><dd>fast</dd>",
            "<dt>Fallback models</dt><dd>offline, missing</dd>",
            "<dt>Steps / turns</dt><dd>7 / 10</dd>",
            "<dt>History</dt><dd>Last N exchanges (N = 6)</dd>",
            "<dt>When a thread is busy</dt><dd>Queue it behind the active run</dd>",
            "<tr><td>fast</td><td>primary</td><td>fast-1 at https://models.example/v1</td>",
            "<td>0.150000 / 0.600000 EUR</td></tr>",
            "<tr><td>offline</td><td>fallback</td>",
            "<td>built in: the deterministic offline model, no network</td><td>free</td></tr>",
            "<tr><td>missing</td><td>fallback</td><td>no endpoint of this name is configured</td>",
            "<tr><td><code>ask_designer</code></td><td>Another agent: Designer</td>",
            "<td>Ask the designer.</td><td>asks the party</td></tr>",
            "<tr><td><code>book_room</code></td><td>Host operation (HTTPS)</td>",
            "<td>Book a meeting room.</td><td>needs approval</td></tr>",
            "<tr><td>no-emails</td><td>output</td><td>redact</td><td>email</td></tr>",
            "<tr><td>no-iban</td><td>input</td><td>block</td><td>regex: <code>DE\\d+</code></td></tr>",
            "<pre>You act for Tomas.</pre>",
        ]:
            assert fact in html
        assert "The defaults:" not in html

    def test_an_agent_without_tools_or_guardrails_offers_the_defaults(
        self, client: Client, operator: AbstractUser, agent: Agent
    ) -> None:
        client.force_login(operator)
        html = client.get(reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})).content.decode()

        assert (
            "<p>The defaults: <code>ask_user</code>, <code>negotiate</code>, <code>answer</code>.</p>" in html
        )
        assert "<h2>Guardrails</h2>\n\n<p>None.</p>" in html

    @pytest.mark.parametrize(
        ("role", "staff", "preview", "admin"),
        [
            (Membership.Role.OPERATOR, False, True, False),
            (Membership.Role.OWNER, True, True, True),
            (Membership.Role.PRINCIPAL, False, False, False),
            (Membership.Role.VIEWER, True, False, True),
        ],
    )
    def test_links_the_preview_for_operators_and_the_admin_for_staff(
        self, client: Client, tenant: Tenant, agent: Agent, role: str, staff: bool, preview: bool, admin: bool
    ) -> None:
        user = member(tenant, "sam", role)
        user.is_staff = staff
        user.save(update_fields=["is_staff"])
        client.force_login(user)

        html = client.get(reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})).content.decode()

        preview_url = reverse("agents:system-message", kwargs={"tenant": "acme", "pk": agent.pk})
        assert (f'<a href="{preview_url}">Preview its system message</a>' in html) is preview
        admin_url = reverse("admin:agents_agent_change", args=[agent.pk])
        assert (f'<a href="{admin_url}">Change it in the admin</a>' in html) is admin


@pytest.mark.django_db
def test_answering_an_approval_says_to_approve_or_reject_it(
    logged_in: Client, agent: Agent, intent: Intent
) -> None:
    approval = waiting_question(agent, intent, text="Book room A?")
    Question.across_tenants.filter(pk=approval.pk).update(kind=Question.Kind.APPROVAL, tool_name="book_room")
    url = reverse("agents:question-answer", kwargs={"tenant": "acme", "pk": approval.pk})

    html = logged_in.post(url, {"answer": "yes"}, follow=True).content.decode()

    assert "This is a approval" not in html
    assert "This is an approval; approve or reject it." in html
