"""The agent loop's edges: careless models, odd ids, hostile JSON, limits at the ends of their range,
and what the dashboard refuses.

Every test drives the real services, views and the loopback chat-completions server.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents import configuration
from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from agents.services import questions, runs
from tests.agents.conftest import HostServer, step
from tests.agents.pages import start_url
from tests.chat_server import ChatServer, text, tool_calls
from tests.conftest import Listener

TWO_CURRENCIES = "the models house-model, yen are priced in JPY and USD; use one currency"


def results(run: Run) -> list[tuple[str, str]]:
    """The run's tool results as (tool call id, content), in order."""
    return list(
        Message.across_tenants.filter(run=run, role=Message.Role.TOOL)
        .order_by("seq")
        .values_list("tool_call_id", "content")
    )


# One active run per thread.


@pytest.mark.django_db
def test_a_queued_runs_task_enters_the_thread_when_its_run_starts(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser
) -> None:
    """A run queued behind an active one (``on_busy=queue``) writes its task into the thread only when
    it starts: the active run sees its call followed by that call's result, never the other run's task."""
    llm_agent.on_busy = Agent.OnBusy.QUEUE
    llm_agent.save()
    chat.script(tool_calls(("c1", "ask_user", '{"question": "Budget?"}')), text("Noted."))
    first = step(runs.run_start(agent=llm_agent, intent=intent, task="Find a CFO."))
    assert first.status == Run.Status.NEEDS_INPUT
    runs.run_start(agent=llm_agent, intent=intent, task="SECOND TASK: find a lawyer.")

    questions.question_answer(
        question=Question.across_tenants.get(run=first), answer="1200 a day", user=principal
    )
    step(first)

    sent = [(m["role"], m.get("content")) for m in chat.requests[1].body["messages"]][1:]
    assert sent == [("user", "Find a CFO."), ("assistant", ""), ("tool", "1200 a day")]


# Tool call ids the model chooses.


@pytest.mark.django_db
def test_a_tool_call_id_reused_in_a_later_step_is_replaced_by_ours(
    llm_agent: Agent, intent: Intent, chat: ChatServer, lookup: Tool
) -> None:
    """A tool call id the model reuses in a later step (some servers number calls ``call_0``… in every
    message) is replaced by one of ours, and the run goes on."""
    llm_agent.tools.add(lookup)
    chat.script(
        tool_calls(("call_0", "lookup", '{"order": "A"}')),
        tool_calls(("call_0", "lookup", '{"order": "B"}')),
        text("Both ship Monday."),
    )
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Where are A and B?"))
    run = step(run)

    assert run.step_count == 2
    assert [content for _, content in results(run)] == ["Order A ships Monday.", "Order B ships Monday."]


@pytest.mark.django_db
def test_the_same_tool_call_id_twice_in_one_message_gets_each_call_its_own_result(
    llm_agent: Agent, intent: Intent, chat: ChatServer, lookup: Tool
) -> None:
    """Two parallel calls the model gives one id get ids of their own, each its own result, and the
    run goes on."""
    llm_agent.tools.add(lookup)
    chat.script(tool_calls(("c1", "lookup", '{"order": "A"}'), ("c1", "lookup", '{"order": "B"}')))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Where are A and B?"))

    assert run.step_count == 1
    assert run.status == Run.Status.RUNNING
    ids, contents = zip(*results(run), strict=True)
    assert len(set(ids)) == 2
    assert contents == ("Order A ships Monday.", "Order B ships Monday.")


@pytest.mark.django_db
def test_two_ask_user_calls_with_one_id_resume_when_the_party_answers(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser
) -> None:
    """Two ``ask_user`` calls sharing an id: the run waits on the first question, and the party's
    answer resumes it."""
    chat.script(
        tool_calls(("c1", "ask_user", '{"question": "A?"}'), ("c1", "ask_user", '{"question": "B?"}'))
    )
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))
    assert run.status == Run.Status.NEEDS_INPUT

    questions.question_answer(question=Question.across_tenants.get(run=run), answer="Yes.", user=principal)

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


@pytest.mark.django_db
def test_a_tool_call_id_too_long_to_store_is_replaced_by_ours(
    llm_agent: Agent, intent: Intent, chat: ChatServer, lookup: Tool
) -> None:
    """A tool call id longer than ``Message.tool_call_id`` holds is replaced by one of ours, and the
    step is recorded."""
    llm_agent.tools.add(lookup)
    chat.script(tool_calls(("x" * 300, "lookup", '{"order": "A"}')))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Where is A?"))

    assert run.step_count == 1
    [(call_id, content)] = results(run)
    assert call_id != "x" * 300
    assert content == "Order A ships Monday."


# Approvals and suspending tools.


@pytest.mark.django_db
@pytest.mark.parametrize(
    "asking",
    [
        {"name": "ask_user", "kind": Tool.Kind.BUILTIN},
        {
            "name": "ask_host",
            "kind": Tool.Kind.HOST,
            "url": "https://host.test/ask",
            "secret": "s3cret",
            "suspends": True,
        },
    ],
    ids=["ask_user", "suspends"],
)
def test_a_tool_that_asks_the_party_cannot_require_approval(agent: Agent, asking: dict[str, object]) -> None:
    """A tool that asks the party (the built-in ``ask_user``, or any ``suspends`` tool) is refused
    ``requires_approval``: the party's answer is the approval."""
    tool = Tool(tenant=agent.tenant, description="Ask.", requires_approval=True, **asking)

    with pytest.raises(ValidationError) as refused:
        configuration.full_clean(tool)

    assert list(refused.value.message_dict) == ["requires_approval"]


@pytest.mark.django_db
def test_approving_a_tool_that_asks_the_party_gives_the_call_an_error_result(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser
) -> None:
    """An asking tool made to require approval anyway (through the ORM, past validation) gets, once
    approved, an error result saying it cannot also wait for an approval, and the run goes on."""
    ask = Tool.objects.create(
        tenant=llm_agent.tenant,
        name="ask_user",
        description="",
        kind=Tool.Kind.BUILTIN,
        requires_approval=True,
    )
    llm_agent.tools.add(ask)
    chat.script(tool_calls(("c1", "ask_user", '{"question": "Budget?"}')))
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))
    approval = Question.across_tenants.get(run=run)
    questions.approval_decide(question=approval, approve=True, user=principal)

    questions.approved_tool_run(question_id=approval.pk, tenant_id=run.tenant_id)

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert results(run) == [
        ("c1", "Error: ask_user asks the party itself; it cannot also wait for an approval.")
    ]


# JSON the model writes.


@pytest.mark.django_db
def test_nan_in_a_final_answer_is_not_json_and_the_model_is_asked_again(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    """A final answer with ``NaN`` (which Python's JSON reader takes and Postgres does not) is not JSON:
    the model is told its answer must be JSON, and the run goes on."""
    chat.script(text('{"amount": NaN}'), text('{"amount": 1}'))
    run = runs.run_start(agent=llm_agent, intent=intent, task="Price?", output_schema={"type": "object"})

    run = step(run)

    assert run.status == Run.Status.RUNNING
    assert (
        "must be JSON"
        in Message.across_tenants.filter(run=run, role=Message.Role.USER).order_by("seq").last().content
    )


@pytest.mark.django_db
def test_nan_in_the_arguments_of_a_tool_needing_approval_is_not_json(
    llm_agent: Agent, intent: Intent, chat: ChatServer, lookup: Tool
) -> None:
    """Tool arguments with ``NaN`` are not valid JSON, even for a tool awaiting approval: the call gets
    an error result, and the run goes on."""
    lookup.requires_approval = True
    lookup.parameters = {"type": "object"}
    lookup.save()
    llm_agent.tools.add(lookup)
    chat.script(tool_calls(("c1", "lookup", '{"order": NaN}')))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))

    assert run.status == Run.Status.RUNNING
    assert results(run)[0][1].startswith("Error: the arguments of lookup are not valid JSON")


@pytest.mark.django_db
def test_arguments_that_are_not_a_string_holding_an_object_are_each_an_error_result(
    llm_agent: Agent, intent: Intent, chat: ChatServer, lookup: Tool, host: HostServer
) -> None:
    """A bare JSON value sent in place of the arguments' string, or a string holding something else
    than an object, is that call's error result for the model; the good call runs and so does the run."""
    llm_agent.tools.add(lookup)
    chat.script(
        tool_calls(
            ("c1", "lookup", {"order": "A-17"}),
            ("c2", "lookup", ["A-17"]),
            ("c3", "lookup", 17),
            ("c4", "lookup", '["A-17"]'),
            ("c5", "lookup", "17"),
            ("c6", "lookup", '{"order": "B-2"}'),
        ),
        text("B-2 ships Monday."),
    )

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Where are my orders?"))

    bare = "Error: the arguments of lookup must be a string holding a JSON object, and the model sent"
    assert results(run) == [
        ("c1", f"{bare} a bare JSON object instead."),
        ("c2", f"{bare} a bare JSON array instead."),
        ("c3", f"{bare} a bare JSON number instead."),
        ("c4", "Error: the arguments of lookup must be a JSON object, not a JSON array."),
        ("c5", "Error: the arguments of lookup must be a JSON object, not a JSON number."),
        ("c6", "Order B-2 ships Monday."),
    ]
    assert [b["arguments"] for b in host.received] == [{"order": "B-2"}]
    # The record keeps chat completions' shape: every call's arguments are a string.
    stored = Message.across_tenants.get(run=run, role=Message.Role.ASSISTANT).tool_calls
    assert [c["arguments"] for c in stored] == [
        '{"order": "A-17"}',
        '["A-17"]',
        "17",
        '["A-17"]',
        "17",
        '{"order": "B-2"}',
    ]

    run = step(run)

    assert (run.status, run.output) == (Run.Status.DONE, "B-2 ships Monday.")
    sent = chat.requests[1].body["messages"]
    assert all(isinstance(c["function"]["arguments"], str) for m in sent for c in m.get("tool_calls", []))


# Guardrails and usage.


@pytest.mark.django_db
def test_an_output_guardrail_applies_to_the_streamed_text_too(
    llm_agent: Agent, intent: Intent, chat: ChatServer, listener: Listener
) -> None:
    """What streams live to the dashboard is guarded as the stored answer is: a redacted address is
    redacted in the ``run.delta`` events too."""
    llm_agent.guardrails = [{"name": "no-mail", "stage": "output", "action": "redact", "match": "email"}]
    llm_agent.save()
    chat.script(text("Write to jane@example.com today."))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Who do I write to?"))

    assert run.output == "Write to [email redacted] today."
    streamed = "".join(m["payload"]["delta"] for m in listener.pushed() if m["event"] == "run.delta")
    assert "jane@example.com" not in streamed


@pytest.mark.django_db
def test_input_guardrails_cover_the_intent_the_party_wrote(llm_agent: Agent, chat: ChatServer) -> None:
    """Input guardrails apply wherever the party's text enters the model, the intent in the system
    message included."""
    llm_agent.guardrails = [{"name": "no-mail", "stage": "input", "action": "redact", "match": "email"}]
    llm_agent.save()
    intent = runs.intent_create(agent=llm_agent, statement="Hire Jane (jane@example.com).")
    chat.script(text("ok"))

    step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))

    assert "jane@example.com" not in str(chat.requests[0].body["messages"])


@pytest.mark.django_db
def test_a_step_blocked_by_an_output_guardrail_still_counts_its_usage(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    """A reply an output guardrail blocks was paid for: its tokens and cost count in the run that it
    ends (1000 in at 2, 500 out at 8 per million)."""
    llm_agent.guardrails = [{"name": "no-mail", "stage": "output", "action": "block", "match": "email"}]
    llm_agent.save()
    chat.script(text("jane@example.com", input_tokens=1000, output_tokens=500))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))

    assert run.status == Run.Status.FAILED
    assert (run.input_tokens, run.output_tokens, run.cost) == (1000, 500, Decimal("0.006"))


@pytest.fixture
def yen_fallback(llm_agent: Agent, chat: ChatServer) -> Agent:
    """``llm_agent`` (on a USD-priced model) falling back on a JPY-priced one."""
    ModelEndpoint.objects.create(
        tenant=llm_agent.tenant,
        name="yen",
        base_url=chat.url,
        upstream_model="y",
        input_price=Decimal(300),
        output_price=Decimal(1200),
        currency="JPY",
        timeout=5,
        attempts=1,
    )
    llm_agent.fallback_models = ["yen"]
    llm_agent.save()
    return llm_agent


@pytest.mark.django_db
def test_an_agent_cannot_chain_models_priced_in_different_currencies(yen_fallback: Agent) -> None:
    """An agent's model and its fallbacks are priced in one currency: a run's cost and its budget add
    them up."""
    with pytest.raises(ValidationError) as refused:
        configuration.full_clean(yen_fallback)

    assert refused.value.message_dict["model"] == [TWO_CURRENCIES]


@pytest.mark.django_db
def test_a_run_on_models_priced_in_different_currencies_fails_without_calling_them(
    yen_fallback: Agent, intent: Intent, chat: ChatServer
) -> None:
    """A run whose agent chains models priced in different currencies fails, naming both currencies,
    before any request reaches a model."""
    run = step(runs.run_start(agent=yen_fallback, intent=intent, task="Answer."))

    assert run.status == Run.Status.FAILED
    assert run.end_reason == TWO_CURRENCIES
    assert chat.requests == []


# Dashboard input.


@pytest.mark.django_db
def test_a_token_budget_too_large_to_store_is_a_form_error(
    logged_in: Client, agent: Agent, intent: Intent
) -> None:
    """A ``Max tokens`` budget too large to store is refused at its field, and nothing is created."""
    response = logged_in.post(
        start_url(agent), {"intent": str(intent.pk), "task": "Go.", "max_tokens": "99999999999"}
    )

    assert response.status_code == 200
    assert "Max tokens: at most" in response.content.decode()
    assert not Run.across_tenants.exists()


@pytest.mark.django_db
def test_a_deadline_at_the_end_of_time_is_refused(logged_in: Client, agent: Agent, intent: Intent) -> None:
    """A deadline past the last time the database can give back (9999-12-31 23:59 in New York is year
    10000 in UTC) is refused, and nothing is created."""
    Agent.across_tenants.filter(pk=agent.pk).update(timezone="America/New_York")
    response = logged_in.post(
        start_url(agent), {"intent": str(intent.pk), "task": "Go.", "deadline": "9999-12-31T23:59"}
    )

    assert response.status_code == 200
    assert "The deadline must be within" in response.content.decode()
    assert not Run.across_tenants.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tz", "at"),
    [("Asia/Tokyo", "0001-01-01T00:00"), ("America/New_York", "9999-12-31T23:59")],
)
def test_the_preview_refuses_a_time_it_cannot_show(
    client: Client, operator: AbstractUser, agent: Agent, intent: Intent, tz: str, at: str
) -> None:
    """A preview time that falls outside the representable range once moved to UTC is a form error,
    like any unreadable time, and no system message is shown."""
    Agent.across_tenants.filter(pk=agent.pk).update(timezone=tz)
    client.force_login(operator)
    url = reverse("agents:system-message", kwargs={"tenant": agent.tenant.slug, "pk": agent.pk})

    response = client.get(url, {"at": at})

    assert response.status_code == 200
    html = response.content.decode()
    assert "At: pick a time between the years" in html
    assert 'class="system-message"' not in html


@pytest.mark.django_db
def test_a_question_of_a_run_that_ended_is_not_in_the_inbox(
    logged_in: Client, agent: Agent, intent: Intent
) -> None:
    """A question whose run ended (here: failed when its deadline passed) is no longer listed as open
    in the inbox."""
    run = step(
        runs.run_start(
            agent=agent, intent=intent, task="Find me a CFO.", deadline=timezone.now() + timedelta(minutes=5)
        )
    )
    assert run.status == Run.Status.NEEDS_INPUT
    Run.across_tenants.filter(pk=run.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    runs.run_expire(run_id=run.pk, tenant_id=run.tenant_id)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED

    html = logged_in.get(reverse("agents:inbox", kwargs={"tenant": agent.tenant.slug})).content.decode()

    assert 'name="answer"' not in html
