"""Starting, cancelling and deciding from the dashboard; the run page's usage and timeline; the
system message preview: permissions, tenancy, validation and refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from agents.instructions import system_message
from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from agents.services import questions, runs, steps
from parley.models import Event, Membership, Tenant
from tests.agents.conftest import HostServer, step
from tests.agents.pages import member, run_url, start_url, waiting_question
from tests.chat_server import ChatServer, status, text, tool_calls

TASK = "Find me a fractional CFO for two days a week."
ARGUMENTS = {"task": "Draw a logo in blue.", "deadline": "2025-07-01"}


def cancel_url(run: Run, tenant: Tenant | None = None) -> str:
    return reverse("agents:run-cancel", kwargs={"tenant": (tenant or run.tenant).slug, "pk": run.pk})


def decide_url(question: Question, tenant: Tenant | None = None) -> str:
    slug = (tenant or question.tenant).slug
    return reverse("agents:approval-decide", kwargs={"tenant": slug, "pk": question.pk})


def preview_url(agent: Agent, tenant: Tenant | None = None) -> str:
    return reverse("agents:system-message", kwargs={"tenant": (tenant or agent.tenant).slug, "pk": agent.pk})


def counts() -> tuple[int, int, int, int]:
    """Rows the dashboard could write: intents, runs, messages, events."""
    return (
        Intent.across_tenants.count(),
        Run.across_tenants.count(),
        Message.across_tenants.count(),
        Event.across_tenants.count(),
    )


def waiting_approval(agent: Agent, intent: Intent, tool_name: str = "ask_designer") -> Question:
    """A run stopped on a ``requires_approval`` call, as the loop leaves it, and its approval."""
    question = waiting_question(agent, intent)
    Message.across_tenants.filter(run=question.run, role=Message.Role.ASSISTANT).update(
        tool_calls=[{"id": "call-1", "name": tool_name, "arguments": json.dumps(ARGUMENTS)}]
    )
    Question.across_tenants.filter(pk=question.pk).update(
        kind=Question.Kind.APPROVAL,
        tool_name=tool_name,
        arguments=ARGUMENTS,
        question=f"May your agent call {tool_name}?",
    )
    question.refresh_from_db()
    return question


@pytest.fixture
def question(agent: Agent, intent: Intent) -> Question:
    return waiting_question(agent, intent)


@pytest.fixture
def approval(agent: Agent, intent: Intent) -> Question:
    return waiting_approval(agent, intent)


@pytest.fixture
def designer_tool(agent: Agent) -> Tool:
    """Another agent of the tenant, offered to ``agent`` as a tool that needs the party's approval."""
    designer = Agent.objects.create(tenant=agent.tenant, slug="designer", name="Designer")
    tool = Tool.objects.create(
        tenant=agent.tenant,
        name="ask_designer",
        description="Ask the designer agent for artwork.",
        kind=Tool.Kind.AGENT,
        target_agent=designer,
        requires_approval=True,
        parameters={"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
    )
    agent.tools.add(tool)
    return tool


class TestStartRun:
    def test_the_party_sees_the_form_with_labelled_fields(self, logged_in: Client, agent: Agent) -> None:
        Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a designer.")

        html = logged_in.get(
            reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})
        ).content.decode()

        assert f'action="{start_url(agent)}"' in html
        for field, label in [
            ("intent", "Intent:"),
            ("statement", "New intent:"),
            ("task", "Task:"),
            ("output_schema", "Output JSON Schema:"),
            ("max_tokens", "Max tokens:"),
            ("max_cost", "Max cost:"),
            ("deadline", "Deadline:"),
        ]:
            assert f'<label for="id_{field}">{label}</label>' in html
        assert '<option value="" selected>A new intent (write it below)</option>' in html
        assert ">Hire a designer.</option>" in html
        assert 'type="datetime-local" name="deadline"' in html
        assert "Optional. In the agent's timezone, UTC." in html

    def test_starts_a_run_on_an_intent_with_its_limits_and_task(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        Agent.across_tenants.filter(pk=agent.pk).update(timezone="Europe/Berlin")
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

        response = logged_in.post(
            start_url(agent),
            {
                "intent": str(intent.pk),
                "task": f"  {TASK}  ",
                "output_schema": json.dumps(schema),
                "max_tokens": "5000",
                "max_cost": "0.25",
                "deadline": "2030-01-02T09:30",
            },
            follow=True,
        )

        run = Run.across_tenants.get()
        assert response.redirect_chain == [(run_url(run), 302)]
        assert "Run started." in response.content.decode()
        assert (run.agent_id, run.intent_id, run.status) == (agent.pk, intent.pk, Run.Status.QUEUED)
        assert run.output_schema == schema
        assert (run.max_tokens, run.max_cost) == (5000, Decimal("0.25"))
        # 09:30 in Berlin in winter is 08:30 UTC: the deadline is read in the agent's timezone.
        assert run.deadline == datetime(2030, 1, 2, 8, 30, tzinfo=UTC)
        first = Message.across_tenants.get(run=run)
        assert (first.seq, first.step, first.role, first.content) == (1, 0, Message.Role.USER, TASK)

    def test_starts_a_run_on_a_new_intent(self, logged_in: Client, agent: Agent) -> None:
        response = logged_in.post(start_url(agent), {"statement": " Hire a designer. ", "task": TASK})

        run = Run.across_tenants.select_related("intent").get()
        assert response.status_code == 302
        assert (run.intent.statement, run.intent.agent_id, run.intent.tenant_id) == (
            "Hire a designer.",
            agent.pk,
            agent.tenant_id,
        )
        assert (run.output_schema, run.max_tokens, run.max_cost, run.deadline) == (None, None, None, None)
        assert Message.across_tenants.get(run=run).content == TASK

    @pytest.mark.parametrize(
        ("data", "field", "error"),
        [
            ({"statement": "Hire.", "task": "  "}, "task", "Task: say what the agent should do."),
            ({"task": TASK}, "statement", "New intent: choose an intent or write a new one."),
            (
                {"statement": "Hire.", "task": TASK, "output_schema": "{type: object}"},
                "output_schema",
                "Output JSON Schema: not valid JSON "
                "(Expecting property name enclosed in double quotes, line 1).",
            ),
            (
                {"statement": "Hire.", "task": TASK, "output_schema": "[1, 2]"},
                "output_schema",
                "Output JSON Schema: must be a JSON object.",
            ),
            (
                {"statement": "Hire.", "task": TASK, "max_tokens": "0"},
                "max_tokens",
                "Max tokens: at least 1.",
            ),
            (
                {"statement": "Hire.", "task": TASK, "max_tokens": "many"},
                "max_tokens",
                "Max tokens: enter a whole number.",
            ),
            (
                {"statement": "Hire.", "task": TASK, "max_cost": "0"},
                "max_cost",
                "Max cost: must be more than 0.",
            ),
            (
                {"statement": "Hire.", "task": TASK, "max_cost": "cheap"},
                "max_cost",
                "Max cost: enter a number.",
            ),
            (
                {"statement": "Hire.", "task": TASK, "deadline": "next week"},
                "deadline",
                "Deadline: enter a date and time.",
            ),
        ],
    )
    def test_invalid_input_is_shown_at_its_field_and_nothing_is_created(
        self, logged_in: Client, agent: Agent, data: dict[str, str], field: str, error: str
    ) -> None:
        before = counts()

        response = logged_in.post(start_url(agent), data)

        html = response.content.decode()
        assert response.status_code == 200
        assert "The run was not started: correct the fields marked below." in html
        assert f'<ul class="errorlist" id="id_{field}_error"><li>{escape(error)}</li></ul>' in html
        assert f'aria-invalid="true" aria-describedby="id_{field}_helptext id_{field}_error"' in html
        assert counts() == before

    def test_what_was_typed_is_kept_when_the_form_is_refused(self, logged_in: Client, agent: Agent) -> None:
        html = logged_in.post(
            start_url(agent), {"statement": "Hire a designer.", "task": ""}
        ).content.decode()

        assert ">\nHire a designer.</textarea>" in html

    def test_an_intent_of_another_agent_is_refused(
        self, logged_in: Client, agent: Agent, tenant: Tenant, seller: Agent
    ) -> None:
        other = Agent.objects.create(tenant=tenant, slug="ines", name="Ines's agent")
        theirs = Intent.objects.create(tenant=tenant, agent=other, statement="Hire.")
        foreign = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell.")

        for intent in (theirs, foreign):
            html = logged_in.post(start_url(agent), {"intent": str(intent.pk), "task": TASK}).content.decode()
            assert "Intent: choose one of this agent&#x27;s intents." in html
        assert Run.across_tenants.count() == 0

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            ({"deadline": "2001-01-01T00:00"}, "The deadline has already passed."),
            ({"output_schema": '{"type": 12}'}, "The output schema is not usable: "),
        ],
    )
    def test_a_limit_the_service_refuses_is_shown_and_leaves_no_new_intent(
        self, logged_in: Client, agent: Agent, data: dict[str, str], message: str
    ) -> None:
        before = counts()

        response = logged_in.post(start_url(agent), {"statement": "Hire a designer.", "task": TASK, **data})

        html = response.content.decode()
        assert response.status_code == 200
        assert f'<li class="error">{escape(message)}' in html
        assert counts() == before

    def test_a_busy_thread_refuses_and_nothing_is_created(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        active = Run.objects.create(
            tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING
        )
        before = counts()

        response = logged_in.post(start_url(agent), {"intent": str(intent.pk), "task": TASK})

        html = response.content.decode()
        assert response.status_code == 200
        refusal = f"Run {active.pk} of this intent is still running; wait for it or cancel it."
        assert f'<li class="error">{refusal}</li>' in html
        assert f">\n{TASK}</textarea>" in html
        assert counts() == before

    def test_an_agent_that_queues_starts_the_run_pending(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        Agent.across_tenants.filter(pk=agent.pk).update(on_busy=Agent.OnBusy.QUEUE)
        active = Run.objects.create(
            tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING
        )

        response = logged_in.post(start_url(agent), {"intent": str(intent.pk), "task": TASK}, follow=True)

        run = Run.across_tenants.exclude(pk=active.pk).get()
        assert run.status == Run.Status.PENDING
        html = response.content.decode()
        assert 'data-status="pending">pending (behind another run of the thread)</strong>' in html
        assert 'class="danger">Cancel run</button>' in html

    def test_a_viewer_may_not_start_and_sees_no_form(
        self, client: Client, tenant: Tenant, agent: Agent, intent: Intent
    ) -> None:
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))
        before = counts()

        response = client.post(start_url(agent), {"intent": str(intent.pk), "task": TASK})

        assert response.status_code == 403
        assert "Only the agent&#x27;s party, an owner or an operator can start its runs." in (
            response.content.decode()
        )
        assert counts() == before
        page = client.get(reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})).content.decode()
        assert 'name="task"' not in page

    def test_another_party_may_not_start(self, client: Client, tenant: Tenant, agent: Agent) -> None:
        client.force_login(member(tenant, "ines", Membership.Role.PRINCIPAL))

        # Another party's agent is not theirs to see at all.
        assert client.post(start_url(agent), {"statement": "Hire.", "task": TASK}).status_code == 404
        assert Run.across_tenants.count() == 0

    def test_an_operator_may_start_for_the_party(
        self, client: Client, operator: AbstractUser, agent: Agent, intent: Intent
    ) -> None:
        client.force_login(operator)

        assert client.post(start_url(agent), {"intent": str(intent.pk), "task": TASK}).status_code == 302
        assert Run.across_tenants.get().intent_id == intent.pk

    def test_another_tenants_agent_is_404_and_nothing_is_created(
        self, logged_in: Client, tenant: Tenant, seller: Agent
    ) -> None:
        intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell.")
        before = counts()

        for url in (start_url(seller, tenant), start_url(seller)):
            assert logged_in.post(url, {"intent": str(intent.pk), "task": TASK}).status_code == 404
        assert counts() == before

    def test_get_is_not_allowed(self, logged_in: Client, agent: Agent) -> None:
        assert logged_in.get(start_url(agent)).status_code == 405


class TestCancel:
    @pytest.mark.parametrize(
        "status",
        [
            Run.Status.QUEUED,
            Run.Status.PENDING,
            Run.Status.RUNNING,
            Run.Status.NEEDS_INPUT,
            Run.Status.WAITING,
        ],
    )
    def test_an_active_run_is_cancelled(
        self, logged_in: Client, agent: Agent, intent: Intent, status: str
    ) -> None:
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=status)
        assert 'class="danger">Cancel run</button>' in logged_in.get(run_url(run)).content.decode()

        response = logged_in.post(cancel_url(run), follow=True)

        assert response.redirect_chain == [(run_url(run), 302)]
        html = response.content.decode()
        assert '<li class="success">Run cancelled.</li>' in html
        assert 'data-status="cancelled">Cancelled</strong>' in html
        assert "Cancelled by tomas." in html
        assert "Cancel run</button>" not in html
        run.refresh_from_db()
        assert (run.status, run.end_reason) == (Run.Status.CANCELLED, "Cancelled by tomas.")

    def test_cancelling_twice_says_the_run_already_ended(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
        logged_in.post(cancel_url(run))
        run.refresh_from_db()
        updated = run.updated_at

        response = logged_in.post(cancel_url(run), follow=True)

        assert '<li class="error">The run already ended (cancelled).</li>' in response.content.decode()
        run.refresh_from_db()
        assert (run.status, run.end_reason, run.updated_at) == (
            Run.Status.CANCELLED,
            "Cancelled by tomas.",
            updated,
        )

    def test_a_viewer_may_not_cancel_and_sees_no_button(
        self, client: Client, tenant: Tenant, agent: Agent, intent: Intent
    ) -> None:
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

        assert "Cancel run" not in client.get(run_url(run)).content.decode()
        response = client.post(cancel_url(run))

        assert response.status_code == 403
        assert "can cancel its runs" in response.content.decode()
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING

    def test_another_tenants_run_is_404_and_keeps_running(
        self, logged_in: Client, tenant: Tenant, seller: Agent
    ) -> None:
        intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell.")
        run = Run.objects.create(tenant=seller.tenant, agent=seller, intent=intent, status=Run.Status.RUNNING)

        for url in (cancel_url(run, tenant), cancel_url(run)):
            assert logged_in.post(url).status_code == 404
        run.refresh_from_db()
        assert (run.status, run.end_reason) == (Run.Status.RUNNING, "")


class TestApprovals:
    def test_the_run_page_shows_the_tool_its_arguments_and_the_decision_form(
        self, logged_in: Client, approval: Question
    ) -> None:
        html = logged_in.get(run_url(approval.run)).content.decode()

        assert "May your agent call ask_designer?" in html
        assert "Tool <code>ask_designer</code>, with these arguments:" in html
        arguments = escape(json.dumps(ARGUMENTS, indent=2))
        assert f'<pre class="arguments" id="arguments-{approval.pk}">{arguments}</pre>' in html
        assert f'action="{decide_url(approval)}"' in html
        label = "Reason (optional; your agent is told it if you reject)"
        assert f'<label for="reason-{approval.pk}">{label}</label>' in html
        assert 'name="decision" value="approve"' in html
        assert 'name="decision" value="reject"' in html
        assert 'name="answer"' not in html

    def test_rejecting_gives_the_model_the_reason_and_resumes_the_run(
        self, logged_in: Client, principal: AbstractUser, approval: Question
    ) -> None:
        response = logged_in.post(
            decide_url(approval), {"decision": "reject", "reason": " Too expensive. "}, follow=True
        )

        assert response.redirect_chain == [(run_url(approval.run), 302)]
        html = response.content.decode()
        assert '<li class="success">Rejected. Your agent carries on without it.</li>' in html
        assert "Rejected by tomas" in html
        assert "<q>Too expensive.</q>" in html
        approval.refresh_from_db()
        assert (approval.approved, approval.answer, approval.answered_by_id) == (
            False,
            "Too expensive.",
            principal.pk,
        )
        result = Message.across_tenants.get(run=approval.run, role=Message.Role.TOOL)
        assert (result.tool_call_id, result.name, result.content) == (
            "call-1",
            "ask_designer",
            "rejected: Too expensive.",
        )
        run = approval.run
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING
        # The step the worker would take: the model sees the rejection as the call's result.
        steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
        run.refresh_from_db()
        assert (run.status, run.output) == (
            Run.Status.DONE,
            "Here is where things stand.\nrejected: Too expensive.",
        )

    def test_rejecting_without_a_reason_says_none_was_given(
        self, logged_in: Client, approval: Question
    ) -> None:
        logged_in.post(decide_url(approval), {"decision": "reject"})

        assert (
            Message.across_tenants.get(run=approval.run, role=Message.Role.TOOL).content
            == "rejected: no reason given"
        )

    def test_approving_runs_the_tool_with_the_arguments_shown(
        self, logged_in: Client, principal: AbstractUser, approval: Question, designer_tool: Tool
    ) -> None:
        response = logged_in.post(decide_url(approval), {"decision": "approve"}, follow=True)

        html = response.content.decode()
        assert '<li class="success">Approved. Your agent calls ask_designer.</li>' in html
        assert "Approved by tomas" in html
        approval.refresh_from_db()
        assert (approval.approved, approval.answered_by_id) == (True, principal.pk)
        run = approval.run
        run.refresh_from_db()
        assert run.status == Run.Status.WAITING
        # What the worker does next: the tool runs with the arguments the party approved.
        questions.approved_tool_run(question_id=approval.pk, tenant_id=approval.tenant_id)
        child = Run.across_tenants.get(parent=run)
        assert (child.agent_id, child.parent_tool_call_id) == (designer_tool.target_agent_id, "call-1")
        assert Message.across_tenants.get(run=child).content == ARGUMENTS["task"]

    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_deciding_twice_says_so_and_changes_nothing(
        self, logged_in: Client, approval: Question, decision: str
    ) -> None:
        logged_in.post(decide_url(approval), {"decision": "reject", "reason": "No."})
        approval.refresh_from_db()
        first = (approval.approved, approval.answer, approval.answered_at)

        response = logged_in.post(decide_url(approval), {"decision": decision, "reason": "Yes."}, follow=True)

        when = first[2].astimezone(UTC).strftime("%Y-%m-%d %H:%M")
        refusal = f"This approval was already rejected by tomas at {when} (UTC)."
        assert f'<li class="error">{refusal}</li>' in response.content.decode()
        approval.refresh_from_db()
        assert (approval.approved, approval.answer, approval.answered_at) == first
        assert Message.across_tenants.filter(run=approval.run, role=Message.Role.TOOL).count() == 1

    def test_a_question_is_answered_not_decided(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        question = waiting_question(agent, intent)

        response = logged_in.post(decide_url(question), {"decision": "approve"}, follow=True)

        assert '<li class="error">This is a question; answer it.</li>' in response.content.decode()
        question.refresh_from_db()
        assert (question.approved, question.answered_at) == (None, None)

    @pytest.mark.parametrize("decision", ["", "maybe"])
    def test_a_decision_is_required(self, logged_in: Client, approval: Question, decision: str) -> None:
        response = logged_in.post(decide_url(approval), {"decision": decision}, follow=True)

        assert '<li class="error">Choose Approve or Reject.</li>' in response.content.decode()
        approval.refresh_from_db()
        assert approval.answered_at is None

    def test_a_viewer_may_not_decide_and_sees_no_buttons(
        self, client: Client, tenant: Tenant, approval: Question
    ) -> None:
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

        html = client.get(run_url(approval.run)).content.decode()
        assert "Waiting for the agent's party to decide." in html
        assert 'name="decision"' not in html
        assert client.post(decide_url(approval), {"decision": "approve"}).status_code == 403
        approval.refresh_from_db()
        assert (approval.approved, approval.answered_at) == (None, None)

    def test_another_tenants_approval_is_404_and_stays_open(
        self, logged_in: Client, tenant: Tenant, seller: Agent
    ) -> None:
        intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell.")
        approval = waiting_approval(seller, intent)

        for url in (decide_url(approval, tenant), decide_url(approval)):
            assert logged_in.post(url, {"decision": "approve"}).status_code == 404
        approval.refresh_from_db()
        assert (approval.approved, approval.answered_at) == (None, None)
        assert Run.across_tenants.get(pk=approval.run_id).status == Run.Status.NEEDS_INPUT


class TestRunPage:
    @pytest.fixture
    def priced_run(self, agent: Agent, intent: Intent) -> Run:
        """A finished run on a priced model, with limits, a structured answer and a retry and fallback."""
        ModelEndpoint.objects.create(
            tenant=agent.tenant,
            name="fast",
            base_url="https://models.example/v1",
            upstream_model="fast-1",
            currency="EUR",
        )
        Agent.across_tenants.filter(pk=agent.pk).update(
            model="fast", fallback_models=["steady"], timezone="Europe/Berlin"
        )
        run = Run.objects.create(
            tenant=agent.tenant,
            agent=agent,
            intent=intent,
            status=Run.Status.DONE,
            step_count=2,
            input_tokens=1200,
            output_tokens=345,
            cost=Decimal("0.004500"),
            max_tokens=9000,
            max_cost=Decimal("0.50"),
            deadline=datetime(2099, 1, 2, 8, 30, tzinfo=UTC),
            output_schema={"type": "object"},
            output_data={"name": "Idris Haddad", "rate": 1050},
            output='{"name": "Idris Haddad", "rate": 1050}',
        )
        for seq, number, model, tokens, cost in [
            (2, 1, "fast", (1000, 300), "0.004000"),
            (3, 2, "steady", (200, 45), "0.000500"),
        ]:
            Message.objects.create(
                tenant=agent.tenant,
                intent=intent,
                run=run,
                seq=seq,
                step=number,
                role=Message.Role.ASSISTANT,
                content=f"step {number}",
                model=model,
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                cost=Decimal(cost),
            )
        head = {"run": str(run.pk)}
        # Stored out of step order, to show the page orders them by step.
        for kind, payload in [
            ("run.fallback", {**head, "step": 2, "from": "fast", "to": "steady", "reason": "HTTP 503"}),
            (
                "run.retry",
                {**head, "step": 1, "model": "fast", "attempt": 1, "wait": 2.0, "reason": "HTTP 429"},
            ),
            (
                "run.retry",
                {**head, "step": 2, "model": "fast", "attempt": 1, "wait": 1.0, "reason": "timed out"},
            ),
            (
                "run.retry",
                {
                    "run": "00000000-0000-0000-0000-000000000000",
                    "step": 1,
                    "model": "x",
                    "attempt": 1,
                    "wait": 1.0,
                    "reason": "another run",
                },
            ),
            ("run.updated", {**head, "status": "done"}),
        ]:
            Event.objects.create(tenant=agent.tenant, kind=kind, payload=payload)
        return run

    def test_shows_usage_cost_limits_and_the_structured_result(
        self, logged_in: Client, priced_run: Run
    ) -> None:
        html = logged_in.get(run_url(priced_run)).content.decode()

        assert 'data-status="done">Done</strong> · step 2 of 10' in html
        assert "<dt>Tokens</dt><dd>1545 (1200 in, 345 out) of at most 9000</dd>" in html
        assert "<dt>Cost</dt><dd>0.004500 EUR of at most 0.500000 EUR</dd>" in html
        deadline = '<time datetime="2099-01-02T08:30:00+00:00">2099-01-02 09:30 (Europe/Berlin)</time>'
        assert f"<dt>Deadline</dt><dd>{deadline}</dd>" in html
        assert f'<pre class="output-schema">{escape(json.dumps({"type": "object"}, indent=2))}</pre>' in html
        data = json.dumps({"name": "Idris Haddad", "rate": 1050}, indent=2)
        assert f'<h2>Result</h2><pre class="output output-data">{escape(data)}</pre>' in html
        assert "Model fast · 1000 tokens in, 300 out · cost 0.004000 EUR" in html
        assert "Model steady · 200 tokens in, 45 out · cost 0.000500 EUR" in html
        assert "Cancel run" not in html

    def test_the_timeline_lists_the_runs_retries_and_fallbacks_in_step_order(
        self, logged_in: Client, priced_run: Run
    ) -> None:
        html = logged_in.get(run_url(priced_run)).content.decode()

        # Each under the heading of its step, before the reply the step stored.
        entries = [
            "<h3>Step 1</h3>",
            '<li data-kind="run.retry">fast failed try 1 (HTTP 429); trying again after 2.0 s',
            "Model fast · 1000 tokens in",
            "<h3>Step 2</h3>",
            '<li data-kind="run.fallback">Falling back from fast to steady (HTTP 503)',
            '<li data-kind="run.retry">fast failed try 1 (timed out); trying again after 1.0 s',
            "Model steady · 200 tokens in",
        ]
        positions = [html.index(e) for e in entries]
        assert positions == sorted(positions)
        assert "another run" not in html
        assert html.count('<li data-kind="run.') == 3

    def test_links_the_parent_run_and_the_runs_it_called(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        designer = Agent.objects.create(tenant=agent.tenant, slug="designer", name="Designer")
        parent = Run.objects.create(
            tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.WAITING
        )
        child_intent = Intent.objects.create(tenant=agent.tenant, agent=designer, statement="Asked: logo")
        child = Run.objects.create(
            tenant=agent.tenant, agent=designer, intent=child_intent, parent=parent, status=Run.Status.RUNNING
        )

        parent_html = logged_in.get(run_url(parent)).content.decode()
        child_html = logged_in.get(run_url(child)).content.decode()

        assert "<h2>Runs it called</h2>" in parent_html
        assert (
            f'<a href="{run_url(child)}">Designer</a> · <span class="status status-running">Running</span>'
            in (parent_html)
        )
        assert (
            f'Called as a tool by <a href="{run_url(parent)}">a run of Tomas&#x27;s agent</a>.' in child_html
        )

    def test_the_streaming_box_is_empty_in_the_stored_page(
        self, logged_in: Client, question: Question
    ) -> None:
        html = logged_in.get(run_url(question.run), {"fragment": "1"}).content.decode()

        assert f'<div class="stream" data-stream="{question.run_id}" data-stored-steps="1" hidden>' in html
        assert "<pre></pre>" in html

    def test_an_offline_step_names_the_offline_model(self, logged_in: Client, question: Question) -> None:
        html = logged_in.get(run_url(question.run)).content.decode()

        assert "Model offline · 0 tokens in, 0 out · cost 0.000000 ·" in html
        assert "<dt>Cost</dt><dd>0.000000</dd>" in html


class TestTimeline:
    """The run page's timeline, from runs the loop really took (a model on loopback, the offline model)."""

    def test_each_step_shows_its_model_call_retries_and_tool_calls_paired_with_their_results(
        self,
        logged_in: Client,
        llm_agent: Agent,
        intent: Intent,
        lookup: Tool,
        host: HostServer,
        chat: ChatServer,
    ) -> None:
        llm_agent.tools.add(lookup)
        chat.script(
            status(429, headers={"Retry-After": "1"}),
            tool_calls(
                ("c1", "lookup", '{"order": "A-17"}'),
                ("c2", "lookup", '{"order": "B-2"}'),
                input_tokens=1000,
                output_tokens=100,
            ),
            text("Both ship Monday.", input_tokens=3000, output_tokens=500),
        )
        run = step(step(runs.run_start(agent=llm_agent, intent=intent, task=TASK)))
        assert run.status == Run.Status.DONE

        html = logged_in.get(run_url(run)).content.decode()

        timeline = html[html.index("<h2>Timeline</h2>") :]
        order = [
            "<h3>The task</h3>",
            TASK,
            "<h3>Step 1</h3>",
            '<li data-kind="run.retry">house-model failed try 1 (HTTP 429',
            "Model house-model · 1000 tokens in, 100 out · cost 0.002800",
            "<h3>Step 2</h3>",
            "Model house-model · 3000 tokens in, 500 out · cost 0.010000",
            '<pre class="reply">Both ship Monday.</pre>',
        ]
        positions = [timeline.index(part) for part in order]
        assert positions == sorted(positions)
        calls = timeline.split('<li class="tool-call">')[1:]
        assert len(calls) == 2
        for call, (order_id, other) in zip(calls, [("A-17", "B-2"), ("B-2", "A-17")], strict=True):
            arguments = escape(json.dumps({"order": order_id}, indent=2))
            assert f'<pre class="tool-arguments">{arguments}</pre>' in call
            assert f'<pre class="tool-result">Order {order_id} ships Monday.</pre>' in call
            assert other not in call
        assert "<code>lookup</code>" in calls[0]

    def test_a_model_call_that_failed_after_retries_shows_them_and_no_reply(
        self, logged_in: Client, llm_agent: Agent, intent: Intent, chat: ChatServer
    ) -> None:
        chat.script(status(503), status(503))
        run = step(runs.run_start(agent=llm_agent, intent=intent, task=TASK))
        assert run.status == Run.Status.FAILED

        html = logged_in.get(run_url(run)).content.decode()

        step_one = html[html.index("<h3>Step 1</h3>") :]
        assert '<li data-kind="run.retry">house-model failed try 1 (HTTP 503' in step_one
        assert "No reply was stored: the model call failed." in step_one

    def test_a_question_asked_then_answered_shows_the_suspension_and_the_resumption(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        run = step(runs.run_start(agent=agent, intent=intent, task=TASK))
        question = Question.across_tenants.get(run=run)

        waiting = logged_in.get(run_url(run)).content.decode()
        assert "<h2>Waiting on the party</h2>" in waiting
        assert (
            f'hx-post="{reverse("agents:question-answer", kwargs={"tenant": "acme", "pk": question.pk})}"'
            in (waiting)
        )
        assert 'hx-target="#run"' in waiting
        assert f'Stopped to ask the party · <time datetime="{question.created_at.isoformat()}"' in waiting
        assert f'Waiting for the party (<a href="#question-{question.pk}">see above</a>).' in waiting
        assert waiting.count(f">{escape(question.question)}<") == 1  # the question itself, once

        logged_in.post(
            reverse("agents:question-answer", kwargs={"tenant": "acme", "pk": question.pk}),
            {"answer": "Nobody yet."},
        )
        step(run)
        answered = logged_in.get(run_url(run)).content.decode()

        assert "<h2>Waiting on the party</h2>" not in answered
        call = answered.split('<li class="tool-call">')[1]
        assert "<code>ask_user</code>" in call
        assert f"<q>{escape(question.question)}</q>" in call
        assert "Answered by tomas, <time" in call
        assert "<q>Nobody yet.</q>; the run resumed." in call
        assert '<pre class="tool-result">Nobody yet.</pre>' in call
        assert "<h3>Step 2</h3>" in answered

    def test_an_approval_decided_shows_who_decided(self, logged_in: Client, approval: Question) -> None:
        logged_in.post(decide_url(approval), {"decision": "reject", "reason": "Too dear."})

        html = logged_in.get(run_url(approval.run)).content.decode()

        call = html.split('<li class="tool-call">')[1]
        assert "Stopped for the party's approval" in call
        assert "Rejected by tomas, <time" in call
        assert "<q>Too dear.</q>; the run resumed." in call
        assert '<pre class="tool-result">rejected: Too dear.</pre>' in call

    def test_a_pending_run_shows_its_task_before_it_starts(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        Agent.across_tenants.filter(pk=agent.pk).update(on_busy=Agent.OnBusy.QUEUE)
        Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
        agent.refresh_from_db()
        pending = runs.run_start(agent=agent, intent=intent, task=TASK)

        html = logged_in.get(run_url(pending)).content.decode()

        assert f"<pre>{TASK}</pre>" in html
        assert "It enters the thread when the run ahead of it ends." in html


class TestCancelByHtmx:
    def test_cancelling_swaps_in_the_ended_run_and_says_so(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
        page = logged_in.get(run_url(run)).content.decode()
        assert f'hx-post="{cancel_url(run)}" hx-target="#run" hx-swap="outerHTML"' in page

        response = logged_in.post(cancel_url(run), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run")

        html = response.content.decode()
        assert response.status_code == 200
        assert html.startswith('\n<section id="run" data-live="run"')
        assert 'data-status="cancelled">Cancelled</strong>' in html
        assert "Cancel run</button>" not in html
        assert '<li class="success">Run cancelled.</li></ul></div>' in html
        assert 'id="action-status" class="action-status" role="status" hx-swap-oob="true"' in html
        run.refresh_from_db()
        assert run.status == Run.Status.CANCELLED

    def test_cancelling_an_ended_run_says_why_not(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.DONE)

        html = logged_in.post(cancel_url(run), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run").content.decode()

        assert '<li class="error">The run already ended (done).</li>' in html
        run.refresh_from_db()
        assert run.status == Run.Status.DONE

    def test_a_viewer_may_not_cancel_by_htmx_either(
        self, client: Client, tenant: Tenant, agent: Agent, intent: Intent
    ) -> None:
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING)
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))

        response = client.post(cancel_url(run), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run")

        assert response.status_code == 403
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING


class TestSystemMessagePreview:
    @pytest.fixture
    def operator_client(self, client: Client, operator: AbstractUser) -> Client:
        client.force_login(operator)
        return client

    def test_shows_the_exact_message_for_the_latest_intent_at_the_time_given(
        self, operator_client: Client, agent: Agent, intent: Intent
    ) -> None:
        Agent.across_tenants.filter(pk=agent.pk).update(timezone="Asia/Tokyo")
        agent.refresh_from_db()
        latest = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a designer.")
        before = counts()

        response = operator_client.get(preview_url(agent), {"at": "2025-06-02T23:30:00+00:00"})

        html = response.content.decode()
        assert response.status_code == 200
        at = datetime(2025, 6, 2, 23, 30, tzinfo=UTC)
        expected = system_message(agent=agent, intent=latest, now=at)
        assert f'<pre class="system-message">{escape(expected)}</pre>' in html
        assert "You act for Tomas." in expected
        assert "Today is Tuesday, 3 June 2025 (Asia/Tokyo)." in expected
        assert "Current intent: Hire a designer." in expected
        assert "2025-06-03 08:30 (Asia/Tokyo)" in html
        assert f'<option value="{latest.pk}" selected>Hire a designer.</option>' in html
        assert counts() == before

    def test_a_chosen_intent_at_a_time_in_the_agents_timezone(
        self, operator_client: Client, agent: Agent, intent: Intent
    ) -> None:
        Agent.across_tenants.filter(pk=agent.pk).update(timezone="America/New_York")
        agent.refresh_from_db()
        Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a designer.")

        html = operator_client.get(
            preview_url(agent), {"intent": str(intent.pk), "at": "2025-01-01T22:00"}
        ).content.decode()

        expected = system_message(agent=agent, intent=intent, now=datetime(2025, 1, 2, 3, 0, tzinfo=UTC))
        assert f'<pre class="system-message">{escape(expected)}</pre>' in html
        assert "Today is Wednesday, 1 January 2025 (America/New_York)." in expected
        assert "Current intent: Bring in a fractional CFO." in expected

    def test_defaults_to_now(self, operator_client: Client, agent: Agent, intent: Intent) -> None:
        html = operator_client.get(preview_url(agent)).content.decode()

        assert escape(system_message(agent=agent, intent=intent)) in html

    @pytest.mark.parametrize(
        ("params", "statement"),
        [({"statement": "Buy a van."}, "Buy a van."), ({}, "(the intent of the run goes here)")],
    )
    def test_an_agent_without_intents_gets_an_unsaved_one(
        self, operator_client: Client, agent: Agent, params: dict[str, str], statement: str
    ) -> None:
        before = counts()

        html = operator_client.get(preview_url(agent), {**params, "at": "2025-06-02T09:00"}).content.decode()

        assert f"Current intent: {escape(statement)}" in html
        assert "(not saved)" in html
        assert '<label for="id_statement">Intent:</label>' in html
        assert 'name="intent"' not in html
        assert counts() == before

    def test_an_unreadable_time_is_named(self, operator_client: Client, agent: Agent, intent: Intent) -> None:
        html = operator_client.get(preview_url(agent), {"at": "noon-ish"}).content.decode()

        assert "At: enter an ISO 8601 date and time, e.g. 2025-06-02T09:30." in html
        assert 'class="system-message"' not in html

    def test_an_owner_may_see_it(self, client: Client, tenant: Tenant, agent: Agent, intent: Intent) -> None:
        client.force_login(member(tenant, "omar", Membership.Role.OWNER))

        assert client.get(preview_url(agent)).status_code == 200

    @pytest.mark.parametrize(
        ("role", "status"), [(Membership.Role.PRINCIPAL, 404), (Membership.Role.VIEWER, 403)]
    )
    def test_another_party_or_a_viewer_may_not(
        self, client: Client, tenant: Tenant, agent: Agent, intent: Intent, role: str, status: int
    ) -> None:
        """Another party's agent is a 404 to a principal, as on its other pages; a viewer sees the
        agent but not what it is told."""
        client.force_login(member(tenant, "pat", role))

        response = client.get(preview_url(agent))

        assert response.status_code == status
        assert "You act for Tomas." not in response.content.decode()

    def test_the_agents_own_party_may_not_either(self, logged_in: Client, agent: Agent) -> None:
        assert logged_in.get(preview_url(agent)).status_code == 403

    def test_another_tenants_agent_is_404(
        self, client: Client, tenant: Tenant, other_tenant: Tenant, operator: AbstractUser, seller: Agent
    ) -> None:
        client.force_login(operator)

        for url in (preview_url(seller, tenant), preview_url(seller)):
            assert client.get(url).status_code == 404
