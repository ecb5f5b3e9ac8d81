"""Start work: choose an agent the member may act for, an intent of it or a new one, the task and
limits, and start one run; refusals create nothing; the nav link only for those who may start."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from agents.models import Agent, Intent, Message, Run
from parley.models import Event, Membership, Tenant
from tests.agents.pages import member, run_url

TASK = "Find me a fractional CFO for two days a week."
START = reverse("agents:start", kwargs={"tenant": "acme"})


def counts() -> tuple[int, int, int, int]:
    """Rows starting work could write: intents, runs, messages, events."""
    return (
        Intent.across_tenants.count(),
        Run.across_tenants.count(),
        Message.across_tenants.count(),
        Event.across_tenants.count(),
    )


@pytest.fixture
def second_agent(agent: Agent, principal: AbstractUser) -> Agent:
    """Another agent of Tomas's, in Tokyo, with an intent of its own."""
    other = Agent.objects.create(
        tenant=agent.tenant,
        slug="tomas-hiring",
        name="Tomas's hiring agent",
        principal=principal,
        timezone="Asia/Tokyo",
    )
    Intent.objects.create(tenant=agent.tenant, agent=other, statement="Hire a designer.")
    return other


@pytest.fixture
def ines_agent(tenant: Tenant) -> Agent:
    ines = member(tenant, "ines", Membership.Role.PRINCIPAL)
    return Agent.objects.create(tenant=tenant, slug="ines", name="Ines's agent", principal=ines)


class TestThePage:
    def test_a_party_chooses_among_their_own_agents_and_the_first_ones_intents(
        self, logged_in: Client, agent: Agent, intent: Intent, second_agent: Agent, ines_agent: Agent
    ) -> None:
        response = logged_in.get(START)

        html = response.content.decode()
        assert response.status_code == 200
        assert "<h1>Start work</h1>" in html
        assert f'<a href="{START}" aria-current="page">Start work</a>' in html
        assert '<label for="id_agent">Agent:</label>' in html
        # By name: "Tomas's agent" before "Tomas's hiring agent"; the first is chosen.
        assert f'<option value="{agent.pk}" selected>Tomas&#x27;s agent</option>' in html
        assert f'<option value="{second_agent.pk}">Tomas&#x27;s hiring agent</option>' in html
        assert "Ines" not in html
        assert f'hx-get="{START}" hx-target="#intent-choice" hx-swap="outerHTML"' in html
        assert '<div class="field" id="intent-choice">' in html
        assert f'<option value="{intent.pk}">Bring in a fractional CFO.</option>' in html
        assert "Hire a designer." not in html
        for field, label in [("statement", "New intent:"), ("task", "Task:"), ("max_tokens", "Max tokens:")]:
            assert f'<label for="id_{field}">{label}</label>' in html
        assert 'name="action" value="choose-agent"' in html
        assert f'action="{START}"' in html

    def test_an_agent_chosen_in_the_address_shows_its_intents_and_timezone(
        self, logged_in: Client, agent: Agent, intent: Intent, second_agent: Agent
    ) -> None:
        html = logged_in.get(START, {"agent": str(second_agent.pk)}).content.decode()

        assert f'<option value="{second_agent.pk}" selected>' in html
        assert ">Hire a designer.</option>" in html
        assert "Bring in a fractional CFO." not in html
        assert "Optional. In the agent's timezone, Asia/Tokyo." in html

    def test_htmx_reloads_only_the_intent_choices_and_the_deadlines_timezone(
        self, logged_in: Client, agent: Agent, intent: Intent, second_agent: Agent
    ) -> None:
        response = logged_in.get(START, {"agent": str(second_agent.pk)}, HTTP_HX_REQUEST="true")

        html = response.content.decode()
        assert "<html" not in html
        assert html.startswith('\n<div class="field" id="intent-choice">')
        assert ">Hire a designer.</option>" in html
        assert "Bring in a fractional CFO." not in html
        assert (
            '<div class="helptext" id="id_deadline_helptext" hx-swap-oob="true">'
            "Optional. In the agent's timezone, Asia/Tokyo.</div>"
        ) in html

    def test_an_operator_may_start_any_agent_of_the_tenant(
        self, client: Client, operator: AbstractUser, agent: Agent, ines_agent: Agent, seller: Agent
    ) -> None:
        client.force_login(operator)

        html = client.get(START).content.decode()

        assert f'<option value="{ines_agent.pk}"' in html
        assert f'<option value="{agent.pk}"' in html
        assert "Idris" not in html  # another tenant's agent

    def test_a_viewer_may_not_and_sees_no_link(
        self, client: Client, tenant: Tenant, agent: Agent, intent: Intent
    ) -> None:
        client.force_login(member(tenant, "vera", Membership.Role.VIEWER))
        before = counts()

        assert client.get(START).status_code == 403
        assert (
            client.post(START, {"agent": str(agent.pk), "intent": str(intent.pk), "task": TASK}).status_code
            == 403
        )
        assert counts() == before
        inbox = client.get(reverse("agents:inbox", kwargs={"tenant": "acme"})).content.decode()
        assert "Start work" not in inbox

    def test_a_party_without_agents_is_told_so_and_sees_no_link(
        self, client: Client, tenant: Tenant, agent: Agent
    ) -> None:
        client.force_login(member(tenant, "ines", Membership.Role.PRINCIPAL))

        html = client.get(START).content.decode()

        assert "You have no agents to start work with yet." in html
        assert 'name="task"' not in html
        assert "Start work</a>" not in html

    def test_another_tenant_is_404(self, logged_in: Client, other_tenant: Tenant) -> None:
        assert logged_in.get(reverse("agents:start", kwargs={"tenant": "globex"})).status_code == 404


class TestStarting:
    def test_on_an_existing_intent_creates_exactly_one_run(
        self, logged_in: Client, agent: Agent, intent: Intent, second_agent: Agent
    ) -> None:
        intents = Intent.across_tenants.count()

        response = logged_in.post(
            START,
            {"agent": str(agent.pk), "intent": str(intent.pk), "task": TASK, "max_tokens": "5000"},
            follow=True,
        )

        run = Run.across_tenants.get()
        assert response.redirect_chain == [(run_url(run), 302)]
        assert "Run started." in response.content.decode()
        assert (run.agent_id, run.intent_id, run.status, run.max_tokens) == (
            agent.pk,
            intent.pk,
            Run.Status.QUEUED,
            5000,
        )
        assert Intent.across_tenants.count() == intents
        assert Message.across_tenants.get(run=run).content == TASK

    def test_on_a_new_intent_creates_exactly_one_run_and_one_intent(
        self, logged_in: Client, agent: Agent, second_agent: Agent
    ) -> None:
        before = Intent.across_tenants.count()

        response = logged_in.post(
            START, {"agent": str(second_agent.pk), "statement": " Hire a copywriter. ", "task": TASK}
        )

        run = Run.across_tenants.select_related("intent").get()
        assert response.status_code == 302
        assert response["Location"] == run_url(run)
        assert Intent.across_tenants.count() == before + 1
        assert (run.agent_id, run.intent.agent_id, run.intent.statement) == (
            second_agent.pk,
            second_agent.pk,
            "Hire a copywriter.",
        )

    def test_switching_agents_without_javascript_keeps_what_was_typed_and_starts_nothing(
        self, logged_in: Client, agent: Agent, intent: Intent, second_agent: Agent
    ) -> None:
        before = counts()

        html = logged_in.post(
            START,
            {"agent": str(second_agent.pk), "intent": str(intent.pk), "task": TASK, "action": "choose-agent"},
        ).content.decode()

        assert counts() == before
        assert f'<option value="{second_agent.pk}" selected>' in html
        assert ">Hire a designer.</option>" in html
        assert "Bring in a fractional CFO." not in html
        assert f">\n{TASK}</textarea>" in html
        assert "errorlist" not in html

    def test_a_busy_thread_is_refused_with_the_reason_and_nothing_created(
        self, logged_in: Client, agent: Agent, intent: Intent
    ) -> None:
        active = Run.objects.create(
            tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.RUNNING
        )
        before = counts()

        response = logged_in.post(START, {"agent": str(agent.pk), "intent": str(intent.pk), "task": TASK})

        html = response.content.decode()
        assert response.status_code == 200
        refusal = f"Run {active.pk} of this intent is still running; wait for it or cancel it."
        assert f'<li class="error">{refusal}</li>' in html
        assert f">\n{TASK}</textarea>" in html
        assert f'<option value="{intent.pk}" selected>' in html
        assert counts() == before

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            ({"deadline": "2001-01-01T00:00"}, "The deadline has already passed."),
            (
                {"output_schema": '{"type": "array"}'},
                'The output schema must describe a JSON object ("type": "object").',
            ),
        ],
    )
    def test_a_limit_the_service_refuses_is_shown_and_creates_no_intent_nor_run(
        self, logged_in: Client, agent: Agent, data: dict[str, str], message: str
    ) -> None:
        before = counts()

        response = logged_in.post(START, {"agent": str(agent.pk), "statement": "Hire.", "task": TASK, **data})

        assert response.status_code == 200
        assert f'<li class="error">{escape(message)}</li>' in response.content.decode()
        assert counts() == before

    @pytest.mark.parametrize(
        ("data", "field", "error"),
        [
            ({"task": ""}, "task", "Task: say what the agent should do."),
            ({"max_tokens": "0"}, "max_tokens", "Max tokens: at least 1."),
            ({"statement": ""}, "statement", "New intent: choose an intent or write a new one."),
        ],
    )
    def test_invalid_input_is_shown_at_its_field_and_nothing_is_created(
        self, logged_in: Client, agent: Agent, data: dict[str, str], field: str, error: str
    ) -> None:
        before = counts()

        html = logged_in.post(
            START, {"agent": str(agent.pk), "statement": "Hire.", "task": TASK, **data}
        ).content.decode()

        assert "The run was not started: correct the fields marked below." in html
        assert f'<ul class="errorlist" id="id_{field}_error"><li>{escape(error)}</li></ul>' in html
        assert counts() == before

    def test_an_agent_the_member_may_not_act_for_is_refused(
        self, logged_in: Client, agent: Agent, ines_agent: Agent, seller: Agent
    ) -> None:
        before = counts()

        for other in (ines_agent, seller):
            html = logged_in.post(
                START, {"agent": str(other.pk), "statement": "Hire.", "task": TASK}
            ).content.decode()
            assert "Agent: choose one of the agents you may start." in html
        assert counts() == before

    def test_an_intent_of_another_agent_is_refused(
        self, logged_in: Client, agent: Agent, second_agent: Agent
    ) -> None:
        theirs = Intent.across_tenants.get(agent=second_agent)
        before = counts()

        html = logged_in.post(
            START, {"agent": str(agent.pk), "intent": str(theirs.pk), "task": TASK}
        ).content.decode()

        assert "Intent: choose one of this agent&#x27;s intents." in html
        assert counts() == before

    def test_an_operator_starts_for_a_party(
        self, client: Client, operator: AbstractUser, ines_agent: Agent
    ) -> None:
        client.force_login(operator)

        response = client.post(START, {"agent": str(ines_agent.pk), "statement": "Hire.", "task": TASK})

        assert response.status_code == 302
        assert Run.across_tenants.get().agent_id == ines_agent.pk


DEEP_OBJECT = '{"a": ' * 50_000 + "1" + "}" * 50_000


@pytest.mark.parametrize("schema", ['{"type": "object", "maximum": NaN}', DEEP_OBJECT], ids=["nan", "deep"])
def test_a_principals_output_schema_with_nan_or_deep_nesting_is_refused_not_a_500(
    client: Client, principal: AbstractUser, agent: Agent, intent: Intent, schema: str
) -> None:
    """The agent page again with an error at the output schema, and no run (NaN would reach Postgres;
    deep JSON would exhaust the recursion limit)."""
    client.force_login(principal)
    client.raise_request_exception = False
    response = client.post(
        reverse("agents:run-start", kwargs={"tenant": agent.tenant.slug, "pk": agent.pk}),
        {"intent": str(intent.pk), "task": "Find a CFO.", "output_schema": schema},
    )

    assert response.status_code == 200
    assert response.context["form"].errors["output_schema"]
    assert not Run.across_tenants.filter(agent=agent).exists()
