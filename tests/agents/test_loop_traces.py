"""The loop's spans, as the running loop records them: one trace per run, steps under the run span,
model and tool calls under their step, with the GenAI semantic-convention attributes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.models import Agent, Intent, Run, Tool
from agents.services import runs
from parley import telemetry
from tests.agents.conftest import step
from tests.chat_server import ChatServer, status, text, tool_calls

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans the loop records through the global tracer provider, kept in memory.

    The global provider can be set once per process: the first use installs an SDK provider
    exporting here; every test starts from an empty exporter.
    """
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = telemetry.build_tracer_provider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.mark.django_db
def test_a_run_is_one_trace_of_steps_model_calls_and_tool_calls(
    spans: InMemorySpanExporter,
    llm_agent: Agent,
    intent: Intent,
    lookup: Tool,
    chat: ChatServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    llm_agent.tools.add(lookup)
    chat.script(
        tool_calls(("c1", "lookup", '{"order": "A-17"}'), input_tokens=40, output_tokens=7),
        text("It ships Monday.", input_tokens=60, output_tokens=9),
    )
    with django_capture_on_commit_callbacks(execute=True):
        run = step(step(runs.run_start(agent=llm_agent, intent=intent, task="Where is A-17?")))
    assert run.status == Run.Status.DONE

    recorded: list[ReadableSpan] = list(spans.get_finished_spans())
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in recorded:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == [
        "chat house-model",
        "execute_tool lookup",
        "invoke_agent Tomas's agent",
        "run_step Tomas's agent",
    ]
    assert {span.context.trace_id for span in recorded} == {uuid.UUID(str(run.pk)).int}

    [root] = by_name["invoke_agent Tomas's agent"]
    steps = by_name["run_step Tomas's agent"]
    assert root.parent is None
    assert [s.attributes["parley.run.step"] for s in steps] == [1, 2]
    assert {s.parent.span_id for s in steps if s.parent} == {root.context.span_id}
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.conversation.id"] == str(intent.pk)

    first_chat, second_chat = by_name["chat house-model"]
    assert first_chat.parent is not None
    assert first_chat.parent.span_id == steps[0].context.span_id
    assert {k: first_chat.attributes[k] for k in ("gen_ai.operation.name", "gen_ai.request.model")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "house-model",
    }
    assert (
        second_chat.attributes["gen_ai.usage.input_tokens"],
        second_chat.attributes["gen_ai.usage.output_tokens"],
    ) == (60, 9)

    [tool_span] = by_name["execute_tool lookup"]
    assert tool_span.parent is not None
    assert tool_span.parent.span_id == steps[0].context.span_id
    assert (tool_span.attributes["gen_ai.tool.name"], tool_span.attributes["gen_ai.tool.call.id"]) == (
        "lookup",
        "c1",
    )


@pytest.mark.django_db
def test_a_failed_model_call_is_an_error_span_and_the_run_span_says_why(
    spans: InMemorySpanExporter,
    llm_agent: Agent,
    intent: Intent,
    chat: ChatServer,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    chat.script(status(400, body={"error": {"message": "bad request"}}))
    with django_capture_on_commit_callbacks(execute=True):
        run = step(runs.run_start(agent=llm_agent, intent=intent, task="Go."))

    assert run.status == Run.Status.FAILED
    by_name = {span.name: span for span in spans.get_finished_spans()}
    assert by_name["chat house-model"].status.status_code == trace.StatusCode.ERROR
    assert by_name["invoke_agent Tomas's agent"].status.status_code == trace.StatusCode.ERROR
