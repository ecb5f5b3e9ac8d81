"""The agent loop on a chat-completions model served on loopback: tool calls, usage and cost,
retries and fallbacks in the timeline, structured output, streaming, guardrails, history, limits."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from agents.services import delegation, questions, runs, steps, sweeps
from parley.models import Event
from tests.agents.conftest import HostServer, step
from tests.chat_server import ChatServer, Reply, drop, error_chunk, hang, status, text, tool_calls
from tests.conftest import Listener, on_chat_model, wait_until


def results(run: Run) -> list[tuple[str, str]]:
    return list(
        Message.across_tenants.filter(run=run, role=Message.Role.TOOL)
        .order_by("seq")
        .values_list("tool_call_id", "content")
    )


@pytest.mark.django_db
def test_parallel_tool_calls_all_run_and_every_failure_is_a_result(
    llm_agent: Agent, intent: Intent, lookup: Tool, host: HostServer, chat: ChatServer
) -> None:
    llm_agent.tools.add(lookup)
    chat.script(
        tool_calls(
            ("c1", "lookup", '{"order": "A-17"}'),
            ("c2", "refund", "{}"),
            ("c3", "lookup", '{"order": '),
            ("c4", "lookup", '{"order": 17}'),
            ("c5", "lookup", '{"order": "B-2"}'),
        ),
        text("Both orders ship Monday."),
    )
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Where are my orders?"))

    assert run.status == Run.Status.RUNNING
    found = dict(results(run))
    assert list(found) == ["c1", "c2", "c3", "c4", "c5"]
    assert found["c1"] == "Order A-17 ships Monday."
    assert found["c2"] == "Error: unknown tool 'refund'; the tools offered are lookup."
    assert found["c3"].startswith("Error: the arguments of lookup are not valid JSON")
    assert found["c4"].startswith("Error: the arguments of lookup do not match its schema:")
    assert "17 is not of type 'string'" in found["c4"]
    assert found["c5"] == "Order B-2 ships Monday."
    assert sorted(b["arguments"]["order"] for b in host.received) == ["A-17", "B-2"]

    run = step(run)

    assert (run.status, run.output) == (Run.Status.DONE, "Both orders ship Monday.")
    sent = chat.requests[1].body["messages"]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["c1", "c2", "c3", "c4", "c5"]
    assert [t["function"]["name"] for t in chat.requests[0].body["tools"]] == ["lookup"]


@pytest.mark.django_db
def test_usage_and_cost_are_stored_per_step_and_per_run(
    llm_agent: Agent, intent: Intent, lookup: Tool, chat: ChatServer
) -> None:
    llm_agent.tools.add(lookup)
    chat.script(
        tool_calls(("c1", "lookup", '{"order": "A-17"}'), input_tokens=1000, output_tokens=100),
        text("Monday.", input_tokens=3000, output_tokens=500),
    )
    run = step(step(runs.run_start(agent=llm_agent, intent=intent, task="Where is A-17?")))

    steps = list(
        Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT)
        .order_by("step")
        .values_list("step", "model", "input_tokens", "output_tokens", "cost")
    )
    assert steps == [
        (1, "house-model", 1000, 100, Decimal("0.002800")),
        (2, "house-model", 3000, 500, Decimal("0.010000")),
    ]
    assert (run.input_tokens, run.output_tokens, run.cost) == (4000, 600, Decimal("0.012800"))


@pytest.mark.django_db
def test_a_retry_is_an_event_of_the_run_and_the_run_goes_on(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(status(429, headers={"Retry-After": "1"}), text("Done."))
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Say done."))

    assert (run.status, run.output) == (Run.Status.DONE, "Done.")
    retry = Event.across_tenants.get(kind="run.retry")
    assert retry.payload == {
        "run": str(run.pk),
        "step": 1,
        "model": "house-model",
        "attempt": 1,
        "wait": 1.0,
        "reason": retry.payload["reason"],
    }
    assert "429" in retry.payload["reason"]


@pytest.mark.django_db
def test_a_retry_after_past_the_runs_deadline_fails_the_step_naming_it(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(status(429, headers={"Retry-After": "45"}))
    run = runs.run_start(
        agent=llm_agent, intent=intent, task="Answer.", deadline=timezone.now() + timedelta(seconds=30)
    )

    run = step(run)

    assert run.status == Run.Status.FAILED
    assert re.fullmatch(
        r"house-model: HTTP 429 after 1 try; Retry-After asks for 45 s, more than the \d+\.\d s left "
        r"before the deadline",
        run.end_reason,
    )
    assert len(chat.requests) == 1
    assert not Event.across_tenants.filter(kind="run.retry").exists()


@pytest.mark.django_db
def test_a_fallback_model_takes_over_and_is_recorded(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    ModelEndpoint.objects.create(
        tenant=llm_agent.tenant, name="backup", base_url=chat.url, upstream_model="backup-1", timeout=5
    )
    llm_agent.fallback_models = ["backup"]
    llm_agent.save()
    chat.script(status(503), status(503), text("From the backup."))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Answer."))

    assert (run.status, run.output) == (Run.Status.DONE, "From the backup.")
    assert Message.across_tenants.get(run=run, role=Message.Role.ASSISTANT).model == "backup"
    fallback = Event.across_tenants.get(kind="run.fallback")
    assert (fallback.payload["from"], fallback.payload["to"]) == ("house-model", "backup")
    assert [r.body["model"] for r in chat.requests] == ["house-model-1", "house-model-1", "backup-1"]


@pytest.mark.django_db
def test_a_non_retryable_model_error_fails_the_run_with_its_reason(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(status(401, body={"error": {"message": "Incorrect API key provided"}}))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Answer."))

    assert run.status == Run.Status.FAILED
    assert "401" in run.end_reason
    assert len(chat.requests) == 1
    assert not Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).exists()


@pytest.mark.django_db
def test_a_reply_cut_off_at_the_length_limit_never_runs_its_tools_and_fails_the_step_naming_it(
    llm_agent: Agent, intent: Intent, lookup: Tool, host: HostServer, chat: ChatServer
) -> None:
    llm_agent.tools.add(lookup)
    cut = tool_calls(("c1", "lookup", '{"order": "A-17"}'), content="Looking it up", finish_reason="length")
    chat.script(cut, cut)

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Where is A-17?"))

    assert (run.status, run.end_reason, run.output) == (
        Run.Status.FAILED,
        "house-model: the reply was cut off at the length limit after 2 tries",
        "",
    )
    assert host.received == []
    assert not Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).exists()
    assert not Question.across_tenants.filter(run=run).exists()


@pytest.mark.django_db
def test_a_reply_of_nothing_is_not_a_final_answer_and_is_asked_again(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(text(""), text("Monday."))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="When?"))

    assert (run.status, run.output) == (Run.Status.DONE, "Monday.")
    assert Event.across_tenants.get(kind="run.retry").payload["reason"] == "the model answered nothing"


@pytest.mark.django_db
def test_replies_of_nothing_on_every_try_fail_the_step_naming_it(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(text(""), text(" "))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="When?"))

    assert (run.status, run.end_reason) == (
        Run.Status.FAILED,
        "house-model: the model answered nothing after 2 tries",
    )
    assert not Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).exists()


@pytest.mark.django_db
def test_structured_output_is_asked_for_validated_and_stored(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}},
        "required": ["amount", "currency"],
    }
    chat.script(
        text("About a thousand euros."),
        text('{"amount": "1000"}'),
        text('{"amount": 1000, "currency": "EUR"}'),
    )
    run = runs.run_start(agent=llm_agent, intent=intent, task="What is the price?", output_schema=schema)

    run = step(run)
    assert run.status == Run.Status.RUNNING
    assert chat.requests[0].body["response_format"]["json_schema"]["schema"] == schema
    run = step(run)
    assert run.status == Run.Status.RUNNING
    feedback = Message.across_tenants.filter(run=run, role=Message.Role.USER).order_by("seq").last()
    assert feedback is not None
    assert "'1000' is not of type 'number'" in feedback.content
    run = step(run)

    assert run.status == Run.Status.DONE
    assert run.output_data == {"amount": 1000, "currency": "EUR"}


@pytest.mark.django_db
def test_an_output_schema_that_is_not_a_schema_is_refused(llm_agent: Agent, intent: Intent) -> None:
    with pytest.raises(runs.RunError, match="The output schema is not usable: "):
        runs.run_start(agent=llm_agent, intent=intent, task="Go.", output_schema={"type": "nonsense"})
    assert not Run.across_tenants.exists()


@pytest.mark.django_db
def test_the_models_text_streams_live_and_the_stored_run_is_the_same(
    llm_agent: Agent, intent: Intent, chat: ChatServer, listener: Listener
) -> None:
    chat.script(text("Here is a longer answer, streamed in pieces.", pieces=5))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Answer."))

    deltas = [m["payload"] for m in listener.pushed() if m["event"] == "run.delta"]
    assert len(deltas) == 5
    assert {(d["run"], d["step"]) for d in deltas} == {(str(run.pk), 1)}
    assert "".join(d["delta"] for d in deltas) == run.output == "Here is a longer answer, streamed in pieces."
    assert not Event.across_tenants.filter(kind__in=["run.delta", "run.withdrawn"]).exists()


def live_text(listener: Listener) -> list[tuple[str, Any]]:
    """The transient events pushed so far: ``("delta", text)`` and ``("withdrawn", step)``, in order."""
    return [
        ("delta", m["payload"]["delta"]) if m["event"] == "run.delta" else ("withdrawn", m["payload"]["step"])
        for m in listener.pushed()
        if m["event"] in ("run.delta", "run.withdrawn")
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("failed", "shown"),
    [
        (drop(after_chunks=2), ["cut of"]),
        (text("Cut off in the mid", finish_reason="length"), ["Cut of", "f in t", "he mid"]),
        (error_chunk(502, "Gone", content="Half"), ["Ha", "lf"]),
    ],
    ids=["dropped-mid-stream", "cut-at-the-length-limit", "error-chunk"],
)
def test_text_streamed_by_a_try_that_failed_is_withdrawn_before_the_retry_streams_again(
    llm_agent: Agent, intent: Intent, chat: ChatServer, listener: Listener, failed: Reply, shown: list[str]
) -> None:
    chat.script(failed, text("Whole.", pieces=1))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Answer."))

    assert (run.status, run.output) == (Run.Status.DONE, "Whole.")
    assert live_text(listener) == [
        *(("delta", piece) for piece in shown),
        ("withdrawn", 1),
        ("delta", "Whole."),
    ]
    assert Event.across_tenants.filter(kind="run.retry").count() == 1


@pytest.mark.django_db
def test_text_streamed_before_the_fallback_takes_over_is_withdrawn(
    llm_agent: Agent, intent: Intent, chat: ChatServer, listener: Listener
) -> None:
    on_chat_model(llm_agent, chat, name="backup")
    llm_agent.model, llm_agent.fallback_models = "house-model", ["backup"]
    llm_agent.save()
    ModelEndpoint.across_tenants.filter(name="house-model").update(attempts=1)
    chat.script(drop(after_chunks=2), text("From the backup.", pieces=1))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Answer."))

    assert (run.status, run.output) == (Run.Status.DONE, "From the backup.")
    assert live_text(listener) == [("delta", "cut of"), ("withdrawn", 1), ("delta", "From the backup.")]
    assert Event.across_tenants.filter(kind="run.fallback").count() == 1


@pytest.mark.django_db
def test_text_streamed_by_a_step_that_failed_is_withdrawn(
    llm_agent: Agent, intent: Intent, chat: ChatServer, listener: Listener
) -> None:
    cut = text("Two halves of noth", finish_reason="length", pieces=2)
    chat.script(cut, cut)

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Answer."))

    assert run.status == Run.Status.FAILED
    assert live_text(listener) == [
        ("delta", "Two halve"),
        ("delta", "s of noth"),
        ("withdrawn", 1),
        ("delta", "Two halve"),
        ("delta", "s of noth"),
        ("withdrawn", 1),
    ]


@pytest.mark.django_db(transaction=True)
def test_cancelling_stops_the_model_call_in_flight(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser
) -> None:
    chat.script(hang(30))
    # Made by hand, not by run_start: its enqueued step would go to the live stack's worker.
    run = Run.objects.create(
        tenant=llm_agent.tenant, agent=llm_agent, intent=intent, status=Run.Status.QUEUED
    )
    Message.objects.create(
        tenant=llm_agent.tenant,
        intent=intent,
        run=run,
        seq=1,
        role=Message.Role.USER,
        content="Take your time.",
    )

    def take_step() -> None:
        try:
            steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
        finally:
            connection.close()  # the thread's own; left open it keeps the test database in use

    worker = threading.Thread(target=take_step)
    worker.start()
    wait_until(lambda: chat.requests, what="the model call")

    runs.run_cancel(run=run, user=principal)
    worker.join(timeout=10)

    assert not worker.is_alive()
    run.refresh_from_db()
    assert (run.status, run.end_reason) == (Run.Status.CANCELLED, "Cancelled by tomas.")
    assert len(chat.requests) == 1
    assert not Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).exists()


@pytest.mark.django_db(transaction=True)
def test_text_streamed_before_a_cancel_is_withdrawn(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser, listener: Listener
) -> None:
    chat.script(text("one two three four five six", pieces=6, chunk_delay=0.3))
    # Made by hand, not by run_start: its enqueued step would go to the live stack's worker.
    run = Run.objects.create(
        tenant=llm_agent.tenant, agent=llm_agent, intent=intent, status=Run.Status.QUEUED
    )
    Message.objects.create(
        tenant=llm_agent.tenant, intent=intent, run=run, seq=1, role=Message.Role.USER, content="Count."
    )
    seen: list[tuple[str, Any]] = []

    def take_step() -> None:
        try:
            steps.run_step(run_id=run.pk, tenant_id=run.tenant_id)
        finally:
            connection.close()

    def streamed() -> bool:
        seen.extend(live_text(listener))
        return bool(seen)

    worker = threading.Thread(target=take_step)
    worker.start()
    wait_until(streamed, what="streamed text")
    runs.run_cancel(run=run, user=principal)
    worker.join(timeout=10)

    assert not worker.is_alive()
    seen.extend(live_text(listener))
    assert seen[-1] == ("withdrawn", 1)
    assert {kind for kind, _ in seen[:-1]} == {"delta"}
    assert Run.across_tenants.get(pk=run.pk).status == Run.Status.CANCELLED


@pytest.mark.django_db
def test_input_guardrails_redact_what_the_model_sees_not_what_is_stored(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    llm_agent.guardrails = [
        {"name": "no-email", "stage": "input", "action": "redact", "match": "email"},
        {"name": "no-phone", "stage": "output", "action": "redact", "match": "phone"},
    ]
    llm_agent.save()
    chat.script(text("Call me on +44 20 7946 0958."))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Mail tomas@example.com the terms."))

    sent = chat.requests[0].body["messages"][-1]["content"]
    assert sent == "Mail [email redacted] the terms."
    assert (
        Message.across_tenants.get(run=run, role=Message.Role.USER).content
        == "Mail tomas@example.com the terms."
    )
    assert run.output == "Call me on [phone redacted]."


@pytest.mark.django_db
def test_a_blocking_guardrail_fails_the_run_naming_it(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    llm_agent.guardrails = [
        {
            "name": "no-card-numbers",
            "stage": "input",
            "action": "block",
            "match": "regex",
            "pattern": r"\b\d{16}\b",
        }
    ]
    llm_agent.save()

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Pay with 4111111111111111."))

    assert run.status == Run.Status.FAILED
    assert "no-card-numbers" in run.end_reason
    assert chat.requests == []


@pytest.mark.django_db
def test_a_history_window_never_splits_a_call_from_its_results(
    llm_agent: Agent, intent: Intent, lookup: Tool, chat: ChatServer
) -> None:
    llm_agent.tools.add(lookup)
    llm_agent.history, llm_agent.history_window = Agent.History.WINDOW, 1
    llm_agent.save()
    chat.script(
        tool_calls(("c1", "lookup", '{"order": "A-1"}'), ("c2", "lookup", '{"order": "A-2"}')),
        text("Done."),
    )

    step(step(runs.run_start(agent=llm_agent, intent=intent, task="Look up A-1 and A-2.")))

    sent = chat.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in sent[2:]] == ["c1", "c2"]


@pytest.mark.django_db
def test_a_token_budget_ends_the_run_before_the_next_step(
    llm_agent: Agent, intent: Intent, lookup: Tool, chat: ChatServer
) -> None:
    llm_agent.tools.add(lookup)
    chat.script(tool_calls(("c1", "lookup", '{"order": "A-1"}'), input_tokens=150, output_tokens=60))
    run = runs.run_start(agent=llm_agent, intent=intent, task="Look up A-1.", max_tokens=200)

    run = step(step(run))

    assert run.status == Run.Status.FAILED
    assert run.end_reason == "The token budget of 200 is spent (210 used)."
    assert len(chat.requests) == 1


@pytest.mark.django_db
def test_a_cost_budget_ends_the_run(llm_agent: Agent, intent: Intent, lookup: Tool, chat: ChatServer) -> None:
    llm_agent.tools.add(lookup)
    chat.script(tool_calls(("c1", "lookup", '{"order": "A-1"}'), input_tokens=1_000_000, output_tokens=0))
    run = runs.run_start(agent=llm_agent, intent=intent, task="Look up A-1.", max_cost=Decimal("1.5"))

    run = step(step(run))

    assert (run.status, run.cost) == (Run.Status.FAILED, Decimal(2))
    assert run.end_reason.startswith("The cost budget of 1.5")


@pytest.mark.django_db
def test_a_deadline_ends_a_run_waiting_on_the_party(agent: Agent, intent: Intent) -> None:
    run = runs.run_start(
        agent=agent, intent=intent, task="Find me a CFO.", deadline=timezone.now() + timedelta(hours=1)
    )
    run = step(run)
    assert run.status == Run.Status.NEEDS_INPUT
    assert sweeps.runs_expire_due() == 0
    run.refresh_from_db()
    assert run.status == Run.Status.NEEDS_INPUT  # not yet due

    Run.across_tenants.filter(pk=run.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert sweeps.runs_expire_due() == 1

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.end_reason.startswith("The deadline (")


@pytest.mark.django_db
def test_a_deadline_in_the_past_is_refused(agent: Agent, intent: Intent) -> None:
    with pytest.raises(runs.RunError, match="already passed"):
        runs.run_start(agent=agent, intent=intent, task="Go.", deadline=timezone.now() - timedelta(minutes=1))


@pytest.mark.django_db
def test_one_model_reply_per_step_is_a_database_rule(agent: Agent, intent: Intent) -> None:
    run = step(runs.run_start(agent=agent, intent=intent, task="Find me a CFO."))
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(
            tenant=agent.tenant, intent=intent, run=run, seq=99, step=1, role=Message.Role.ASSISTANT
        )


# Tools: the agent's own, approval, suspending, and agents as tools.


@pytest.mark.django_db
def test_the_agents_own_tools_replace_the_defaults_and_a_builtin_comes_back(
    llm_agent: Agent, intent: Intent, lookup: Tool, chat: ChatServer
) -> None:
    chat.script(text("a"), text("b"), text("c"))
    offered = []
    for tools_of_agent in (
        [],
        [lookup],
        [
            lookup,
            Tool.objects.create(
                tenant=llm_agent.tenant, name="ask_user", description="", kind=Tool.Kind.BUILTIN
            ),
        ],
    ):
        llm_agent.tools.set(tools_of_agent)
        run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))
        offered.append([t["function"]["name"] for t in chat.requests[-1].body.get("tools", [])])
        assert run.status == Run.Status.DONE

    assert offered == [["ask_user", "negotiate", "answer"], ["lookup"], ["ask_user", "lookup"]]


@pytest.fixture
def awaiting_approval(llm_agent: Agent, intent: Intent, lookup: Tool, chat: ChatServer) -> Run:
    """A run stopped on its ``lookup`` call of order A-17, which needs the party's approval."""
    lookup.requires_approval = True
    lookup.save()
    llm_agent.tools.add(lookup)
    chat.script(tool_calls(("c1", "lookup", '{"order": "A-17"}')))
    return step(runs.run_start(agent=llm_agent, intent=intent, task="Look up A-17."))


@pytest.mark.django_db
def test_an_approved_tool_runs_with_the_original_arguments(
    awaiting_approval: Run, host: HostServer, principal: AbstractUser
) -> None:
    run = awaiting_approval
    approval = Question.across_tenants.get(run=run)
    assert (run.status, approval.kind, approval.tool_name, approval.arguments) == (
        Run.Status.NEEDS_INPUT,
        Question.Kind.APPROVAL,
        "lookup",
        {"order": "A-17"},
    )
    assert host.received == []

    questions.approval_decide(question=approval, approve=True, user=principal)
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    questions.approved_tool_run(question_id=approval.pk, tenant_id=run.tenant_id)

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert results(run) == [("c1", "Order A-17 ships Monday.")]
    assert [b["arguments"] for b in host.received] == [{"order": "A-17"}]
    with pytest.raises(questions.QuestionAlreadyAnswered, match="already decided"):
        questions.approval_decide(question=approval, approve=False, user=principal)


@pytest.mark.django_db
def test_a_rejected_tool_gives_the_model_the_reason(
    awaiting_approval: Run, host: HostServer, principal: AbstractUser
) -> None:
    run = awaiting_approval

    questions.approval_decide(
        question=Question.across_tenants.get(run=run), approve=False, reason="Not now.", user=principal
    )

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert results(run) == [("c1", "rejected: Not now.")]
    assert host.received == []


@pytest.mark.django_db
def test_a_suspending_tool_hands_its_arguments_to_the_party(
    llm_agent: Agent, intent: Intent, chat: ChatServer, principal: AbstractUser
) -> None:
    confirm = Tool.objects.create(
        tenant=llm_agent.tenant,
        name="confirm_booking",
        description="Ask the party to confirm a booking.",
        parameters={"type": "object", "properties": {"slot": {"type": "string"}}, "required": ["slot"]},
        kind=Tool.Kind.HOST,
        url="https://host.example/unused",
        secret="s",
        suspends=True,
    )
    llm_agent.tools.add(confirm)
    chat.script(tool_calls(("c1", "confirm_booking", '{"slot": "Tue 10:00"}')))
    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Book me in."))

    question = Question.across_tenants.get(run=run)
    assert (run.status, question.kind, question.arguments) == (
        Run.Status.NEEDS_INPUT,
        Question.Kind.QUESTION,
        {"slot": "Tue 10:00"},
    )
    questions.question_answer(question=question, answer="Yes, Tuesday works.", user=principal)
    assert results(run) == [("c1", "Yes, Tuesday works.")]


@pytest.mark.django_db
def test_without_a_principal_a_suspending_tool_is_answered_that_nobody_would_answer(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    """An agent with nobody to ask never asks: no question waits on a party it does not have."""
    llm_agent.principal = None
    llm_agent.save()
    confirm = Tool.objects.create(
        tenant=llm_agent.tenant,
        name="confirm_booking",
        description="Ask the party to confirm a booking.",
        parameters={"type": "object", "properties": {"slot": {"type": "string"}}, "required": ["slot"]},
        kind=Tool.Kind.HOST,
        url="https://host.example/unused",
        secret="s",
        suspends=True,
    )
    llm_agent.tools.add(confirm)
    chat.script(tool_calls(("c1", "confirm_booking", '{"slot": "Tue 10:00"}')))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Book me in."))

    assert run.status == Run.Status.RUNNING
    assert not Question.across_tenants.filter(run=run).exists()
    assert results(run) == [
        (
            "c1",
            "Error: confirm_booking cannot ask: this agent has no principal to ask, so nobody would "
            "answer. Go on without asking, or finish and say what you would need to know.",
        )
    ]


@pytest.mark.django_db
def test_a_cancelled_run_takes_no_answer(agent: Agent, intent: Intent, principal: AbstractUser) -> None:
    run = step(runs.run_start(agent=agent, intent=intent, task="Find me a CFO."))
    runs.run_cancel(run=run, user=principal)

    with pytest.raises(runs.RunError, match="cancelled; it no longer takes answers"):
        questions.question_answer(
            question=Question.across_tenants.get(run=run), answer="Later.", user=principal
        )
    with pytest.raises(runs.RunError, match=r"already ended \(cancelled\)"):
        runs.run_cancel(run=run, user=None)


@pytest.fixture
def researcher(llm_agent: Agent) -> Agent:
    return Agent.objects.create(
        tenant=llm_agent.tenant,
        slug="researcher",
        name="Researcher",
        model="house-model",
        system_prompt="Research.",
    )


@pytest.fixture
def research_tool(researcher: Agent) -> Tool:
    return Tool.objects.create(
        tenant=researcher.tenant,
        name="research",
        description="Ask the researcher.",
        parameters={"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
        kind=Tool.Kind.AGENT,
        target_agent=researcher,
    )


@pytest.mark.django_db
def test_an_agent_runs_another_as_a_tool_and_gets_its_final_text(
    llm_agent: Agent, intent: Intent, researcher: Agent, research_tool: Tool, chat: ChatServer
) -> None:
    llm_agent.tools.add(research_tool)
    chat.script(
        tool_calls(("c1", "research", '{"task": "Typical CFO day rates in Berlin?"}')),
        text("Between 900 and 1,400 EUR a day."),
        text("The going rate is 900 to 1,400 EUR."),
    )
    parent = step(runs.run_start(agent=llm_agent, intent=intent, task="What should I budget?"))
    assert parent.status == Run.Status.WAITING
    child = Run.across_tenants.get(parent=parent)
    assert (child.agent_id, child.parent_tool_call_id) == (researcher.pk, "c1")
    assert child.intent.statement == "Asked by Tomas's agent: Typical CFO day rates in Berlin?"

    child = step(child)
    assert child.status == Run.Status.DONE
    delegation.delegate_return(run_id=child.pk, tenant_id=child.tenant_id)

    parent.refresh_from_db()
    assert parent.status == Run.Status.RUNNING
    assert results(parent) == [("c1", "Between 900 and 1,400 EUR a day.")]
    parent = step(parent)
    assert (parent.status, parent.output) == (Run.Status.DONE, "The going rate is 900 to 1,400 EUR.")


@pytest.mark.django_db
def test_cancelling_the_caller_cancels_the_agent_it_called(
    llm_agent: Agent, intent: Intent, research_tool: Tool, chat: ChatServer
) -> None:
    llm_agent.tools.add(research_tool)
    chat.script(tool_calls(("c1", "research", '{"task": "Rates?"}')))
    parent = step(runs.run_start(agent=llm_agent, intent=intent, task="Budget?"))

    runs.run_cancel(run=parent, user=None)

    child = Run.across_tenants.get(parent=parent)
    assert (child.status, child.end_reason) == (
        Run.Status.CANCELLED,
        "Cancelled with the run that called it.",
    )
    parent.refresh_from_db()
    assert (parent.status, parent.end_reason) == (Run.Status.CANCELLED, "Cancelled by the host.")


@pytest.mark.django_db
def test_an_agent_cannot_call_itself_through_a_tool(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    itself = Tool.objects.create(
        tenant=llm_agent.tenant,
        name="me",
        description="Me again.",
        kind=Tool.Kind.AGENT,
        target_agent=llm_agent,
    )
    llm_agent.tools.add(itself)
    chat.script(tool_calls(("c1", "me", '{"task": "Loop forever."}')))

    run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))

    assert run.status == Run.Status.RUNNING
    assert results(run) == [
        ("c1", "Error: me would run Tomas's agent, which is already working on this call.")
    ]
    assert not Run.across_tenants.filter(parent=run).exists()


# One active run per thread.


@pytest.mark.django_db
def test_a_busy_thread_queues_the_next_run_when_the_agent_says_so(
    agent: Agent, intent: Intent, principal: AbstractUser
) -> None:
    agent.on_busy = Agent.OnBusy.QUEUE
    agent.save()
    first = step(runs.run_start(agent=agent, intent=intent, task="Find me a CFO."))
    second = runs.run_start(agent=agent, intent=intent, task="And a lawyer.")
    assert second.status == Run.Status.PENDING
    assert step(second).step_count == 0  # a pending run takes no step

    runs.run_cancel(run=first, user=principal)

    second.refresh_from_db()
    assert second.status == Run.Status.QUEUED
    second = step(second)
    assert second.status == Run.Status.NEEDS_INPUT


@pytest.mark.django_db
def test_a_busy_thread_refuses_by_default(agent: Agent, intent: Intent) -> None:
    first = runs.run_start(agent=agent, intent=intent, task="Find me a CFO.")
    with pytest.raises(runs.RunBusy, match=f"Run {first.pk} of this intent is still queued"):
        runs.run_start(agent=agent, intent=intent, task="Again.")
