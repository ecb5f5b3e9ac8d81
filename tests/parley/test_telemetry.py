"""Agent-loop spans (GenAI semconv), their export over OTLP/HTTP, and run-scoped structured logs.

Spans go to an SDK provider with an in-memory exporter that each test builds and hands to the
helpers, so the process-wide provider is never touched; what only the process-wide provider can
show (``setup()`` and ``LOGGING``) runs in a fresh subprocess.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parley import telemetry
from tests.loopback import LoopbackServer

REPO = Path(__file__).resolve().parents[2]
RUN_ID = uuid.UUID("3f1c2a9e-8b7d-4c6e-9a5f-0d1e2f3a4b5c")
INTENT_ID = uuid.UUID("7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d")
RUN = {"run_id": RUN_ID, "tenant_id": 7, "agent_id": 12, "agent_name": "Buyer", "intent_id": INTENT_ID}
RUN_ATTRIBUTES = {
    "gen_ai.agent.id": "12",
    "gen_ai.agent.name": "Buyer",
    "gen_ai.conversation.id": str(INTENT_ID),
    "parley.run.id": str(RUN_ID),
    "parley.tenant.id": 7,
}
STARTED_AT = datetime(2026, 3, 1, 9, 0, 0, 123456, tzinfo=UTC)
# The same kind of moment in another zone: 09:02:30.000005 UTC.
ENDED_AT = datetime(2026, 3, 1, 11, 2, 30, 5, tzinfo=timezone(timedelta(hours=2)))


class UpstreamDown(Exception):
    pass


@dataclass
class Tracing:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> dict[str, ReadableSpan]:
        """Finished spans by name; fails on a name seen twice."""
        finished = self.exporter.get_finished_spans()
        by_name = {span.name: span for span in finished}
        assert len(by_name) == len(finished), [span.name for span in finished]
        return by_name


def _tracing() -> Tracing:
    exporter = InMemorySpanExporter()
    provider = telemetry.build_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, exporter)


@pytest.fixture
def tracing() -> Iterator[Tracing]:
    tracing = _tracing()
    yield tracing
    tracing.provider.shutdown()


def _record_run(tracer_provider: trace.TracerProvider, **overrides: object) -> None:
    arguments: dict[str, object] = {
        **RUN,
        "started_at": STARTED_AT,
        "ended_at": ENDED_AT,
        "status": "done",
        "input_tokens": 1200,
        "output_tokens": 340,
        "tracer_provider": tracer_provider,
    }
    telemetry.record_run_span(**(arguments | overrides))


# --- Spans ------------------------------------------------------------------------------------


def test_steps_and_calls_hang_under_the_run_span_recorded_at_the_end(tracing: Tracing) -> None:
    provider = tracing.provider
    with telemetry.run_step_span(**RUN, step=1, tracer_provider=provider):
        with telemetry.model_call_span(model="gpt-4.1", tracer_provider=provider) as call:
            call.record("gpt-4.1-2025-04-14", 800, 40)
        with telemetry.tool_call_span(name="lookup_offer", call_id="call_1", tracer_provider=provider):
            pass
    with telemetry.run_step_span(**RUN, step=2, tracer_provider=provider):
        pass
    _record_run(provider)

    finished = tracing.exporter.get_finished_spans()
    assert [span.name for span in finished] == [
        "chat gpt-4.1",
        "execute_tool lookup_offer",
        "run_step Buyer",
        "run_step Buyer",
        "invoke_agent Buyer",
    ]
    chat, tool, step_1, step_2, run = finished
    assert {span.context.trace_id for span in finished} == {RUN_ID.int}
    assert run.parent is None
    assert run.context.span_id == telemetry.run_span_context(RUN_ID).span_id
    assert [step_1.parent.span_id, step_2.parent.span_id] == [run.context.span_id] * 2
    assert [chat.parent.span_id, tool.parent.span_id] == [step_1.context.span_id] * 2
    assert [span.kind for span in finished] == [
        SpanKind.CLIENT,
        SpanKind.INTERNAL,
        SpanKind.INTERNAL,
        SpanKind.INTERNAL,
        SpanKind.INTERNAL,
    ]
    assert {span.status.status_code for span in finished} == {StatusCode.UNSET}


def test_run_spans_ids_line_up_across_processes() -> None:
    """The steps and the run span are recorded by different workers: here, different providers."""
    worker_a, worker_b = _tracing(), _tracing()
    with telemetry.run_step_span(**RUN, step=1, tracer_provider=worker_a.provider):
        pass
    _record_run(worker_b.provider)

    (step,) = worker_a.exporter.get_finished_spans()
    (run,) = worker_b.exporter.get_finished_spans()
    assert step.context.trace_id == run.context.trace_id == RUN_ID.int
    assert step.parent == telemetry.run_span_context(RUN_ID)
    assert step.parent.span_id == run.context.span_id
    worker_a.provider.shutdown()
    worker_b.provider.shutdown()


def test_step_span_attributes(tracing: Tracing) -> None:
    with telemetry.run_step_span(**RUN, step=3, tracer_provider=tracing.provider):
        pass

    assert tracing.spans()["run_step Buyer"].attributes == {**RUN_ATTRIBUTES, "parley.run.step": 3}


def test_run_span_attributes_and_times(tracing: Tracing) -> None:
    _record_run(tracing.provider, run_id=str(RUN_ID), provider="parley.offline")

    run = tracing.spans()["invoke_agent Buyer"]
    assert run.attributes == {
        **RUN_ATTRIBUTES,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "parley.offline",
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 340,
        "parley.run.status": "done",
    }
    assert run.start_time == 1_772_355_600_123_456_000
    assert run.end_time == 1_772_355_750_000_005_000
    assert run.status.status_code is StatusCode.UNSET


def test_failed_run_span_has_error_status(tracing: Tracing) -> None:
    _record_run(tracing.provider, status="failed", error="model 'gpt-9' is not available")

    run = tracing.spans()["invoke_agent Buyer"]
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "model 'gpt-9' is not available"
    assert run.attributes is not None
    assert run.attributes["error.type"] == "failed"
    assert run.attributes["parley.run.status"] == "failed"


def test_run_span_is_a_root_even_inside_a_step(tracing: Tracing) -> None:
    with telemetry.run_step_span(**RUN, step=4, tracer_provider=tracing.provider):
        _record_run(tracing.provider)

    spans = tracing.spans()
    assert spans["invoke_agent Buyer"].parent is None
    assert spans["run_step Buyer"].parent.span_id == spans["invoke_agent Buyer"].context.span_id


def test_model_call_span_attributes(tracing: Tracing) -> None:
    with telemetry.model_call_span(model="gpt-4.1", tracer_provider=tracing.provider) as call:
        call.record("gpt-4.1-2025-04-14", 800, 40)

    assert tracing.spans()["chat gpt-4.1"].attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1",
        "gen_ai.response.model": "gpt-4.1-2025-04-14",
        "gen_ai.usage.input_tokens": 800,
        "gen_ai.usage.output_tokens": 40,
    }


def test_an_exception_marks_the_model_call_and_the_step_and_propagates(tracing: Tracing) -> None:
    provider = tracing.provider
    with (
        pytest.raises(UpstreamDown),
        telemetry.run_step_span(**RUN, step=1, tracer_provider=provider),
        telemetry.model_call_span(model="gpt-4.1", provider="azure.ai.openai", tracer_provider=provider),
    ):
        raise UpstreamDown("503 from upstream")

    spans = tracing.spans()
    for name in ("chat gpt-4.1", "run_step Buyer"):
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "UpstreamDown: 503 from upstream"
        assert span.attributes is not None
        assert span.attributes["error.type"] == "UpstreamDown"
        assert [event.name for event in span.events] == ["exception"]
    assert spans["chat gpt-4.1"].attributes["gen_ai.provider.name"] == "azure.ai.openai"


def test_tool_call_span_attributes(tracing: Tracing) -> None:
    with telemetry.tool_call_span(name="lookup_offer", call_id="call_1", tracer_provider=tracing.provider):
        pass

    tool = tracing.spans()["execute_tool lookup_offer"]
    assert tool.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_offer",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
    }
    assert tool.status.status_code is StatusCode.UNSET


def test_a_tool_failure_turned_into_a_result_marks_the_span(tracing: Tracing) -> None:
    with telemetry.tool_call_span(
        name="lookup_offer", call_id="call_2", tracer_provider=tracing.provider
    ) as tool:
        tool.fail("invalid_arguments", "the arguments of lookup_offer are not valid JSON")

    span = tracing.spans()["execute_tool lookup_offer"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "the arguments of lookup_offer are not valid JSON"
    assert span.attributes is not None
    assert span.attributes["error.type"] == "invalid_arguments"
    assert span.events == ()


def test_helpers_are_harmless_under_the_no_op_provider() -> None:
    no_op = trace.NoOpTracerProvider()
    with telemetry.run_step_span(**RUN, step=1, tracer_provider=no_op) as step:
        with telemetry.model_call_span(model="gpt-4.1", tracer_provider=no_op) as call:
            call.record("gpt-4.1", 1, 1)
        with telemetry.tool_call_span(name="lookup_offer", call_id="call_1", tracer_provider=no_op) as tool:
            tool.fail("unknown_tool", "no such tool")
        _record_run(no_op)
    assert not step.is_recording()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"started_at": datetime(2026, 3, 1, 9, 0)}, "naive"),
        ({"run_id": "run-1"}, "badly formed hexadecimal UUID string"),
        ({"run_id": uuid.UUID(int=0)}, "nil UUID"),
    ],
)
def test_record_run_span_refuses(tracing: Tracing, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _record_run(tracing.provider, **overrides)
    assert tracing.exporter.get_finished_spans() == ()


# --- setup() and the OTLP/HTTP export -----------------------------------------------------------


@dataclass(frozen=True)
class Export:
    path: str
    content_type: str
    body: bytes


class Collector(LoopbackServer):
    """An OTLP/HTTP trace receiver: it keeps every POST it gets and answers success."""

    what = "the OTLP collector"

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[Export] = []
        self.listen(Starlette(routes=[Route("/v1/traces", self.receive, methods=["POST"])]))

    async def receive(self, request: Request) -> Response:
        self.exports.append(Export(request.url.path, request.headers["content-type"], await request.body()))
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")


def _python(script: str, **env: str) -> str:
    """Run ``script`` in a fresh interpreter with no ``OTEL_*`` variables but ``env``; its stdout+stderr."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=REPO,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


# Ends as a forked Celery pool child may, without atexit handlers: only shutdown() flushes.
EMIT_ONE_SPAN = """
    import os
    from parley import telemetry

    telemetry.setup()
    telemetry.setup()
    with telemetry.tool_call_span(name="lookup_offer", call_id="call_1"):
        pass
    telemetry.shutdown()
    os._exit(0)
"""


@pytest.mark.parametrize(
    ("variable", "path"),
    [("OTEL_EXPORTER_OTLP_ENDPOINT", ""), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/v1/traces")],
)
def test_setup_exports_over_otlp_http_once(variable: str, path: str) -> None:
    with Collector() as collector:
        output = _python(EMIT_ONE_SPAN, **{variable: collector.origin + path})

    assert output == ""  # not even a warning about a second provider

    assert [(export.path, export.content_type) for export in collector.exports] == [
        ("/v1/traces", "application/x-protobuf")
    ]
    body = collector.exports[0].body
    assert b"execute_tool lookup_offer" in body
    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert resource["service.name"] == "parley"
    # Called twice, setup() installed one provider, the one shutdown() flushed: the span went out once.
    (span,) = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert span.name == "execute_tool lookup_offer"
    assert {kv.key: kv.value.string_value for kv in span.attributes}["gen_ai.tool.call.id"] == "call_1"


def test_setup_takes_the_service_name_from_the_environment() -> None:
    with Collector() as collector:
        _python(
            EMIT_ONE_SPAN, OTEL_EXPORTER_OTLP_ENDPOINT=collector.origin, OTEL_SERVICE_NAME="parley-worker"
        )

    request = ExportTraceServiceRequest.FromString(collector.exports[0].body)
    resource = {kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "parley-worker"


def test_setup_without_an_endpoint_installs_nothing() -> None:
    output = _python(
        """
        import sys
        from opentelemetry import trace
        from parley import telemetry

        telemetry.setup()
        print(type(trace.get_tracer_provider()).__name__)
        print("opentelemetry.exporter.otlp.proto.http.trace_exporter" in sys.modules)
        """
    )
    assert output.split() == ["ProxyTracerProvider", "False"]


# --- Logs -------------------------------------------------------------------------------------


@pytest.fixture
def log_records() -> Iterator[list[logging.LogRecord]]:
    """Records of the ``tests.telemetry`` logger, after a handler with the filter saw them."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("tests.telemetry")
    handler = Keep()
    handler.addFilter(telemetry.LogContextFilter())
    logger.addHandler(handler)
    logger.propagate = False
    yield records
    logger.removeHandler(handler)
    logger.propagate = True


def test_records_carry_the_log_context_ids(log_records: list[logging.LogRecord]) -> None:
    logger = logging.getLogger("tests.telemetry")
    with telemetry.log_context(run_id=RUN_ID, tenant_id=7):
        logger.warning("outer")
        with telemetry.log_context(tenant_id=8, step=2):
            logger.warning("inner")
        logger.warning("outer again")
    logger.warning("outside")

    seen = [
        (record.getMessage(), getattr(record, "run_id", None), getattr(record, "tenant_id", None))
        for record in log_records
    ]
    assert seen == [
        ("outer", RUN_ID, 7),
        ("inner", RUN_ID, 8),
        ("outer again", RUN_ID, 7),
        ("outside", None, None),
    ]
    assert getattr(log_records[1], "step") == 2  # noqa: B009
    assert [getattr(record, "_log_ids") for record in log_records] == [  # noqa: B009
        f" run_id={RUN_ID} tenant_id=7",
        f" run_id={RUN_ID} tenant_id=8 step=2",
        f" run_id={RUN_ID} tenant_id=7",
        "",
    ]


def test_records_carry_the_current_span(tracing: Tracing, log_records: list[logging.LogRecord]) -> None:
    with telemetry.run_step_span(**RUN, step=1, tracer_provider=tracing.provider) as step:
        logging.getLogger("tests.telemetry").warning("in a step")

    (record,) = log_records
    assert getattr(record, "trace_id") == RUN_ID.hex  # noqa: B009
    assert getattr(record, "span_id") == f"{step.get_span_context().span_id:016x}"  # noqa: B009


def test_an_explicit_extra_wins_over_the_context(log_records: list[logging.LogRecord]) -> None:
    with telemetry.log_context(run_id="from-context"):
        logging.getLogger("tests.telemetry").warning("x", extra={"run_id": "from-extra"})

    assert getattr(log_records[0], "run_id") == "from-extra"  # noqa: B009
    assert getattr(log_records[0], "_log_ids") == " run_id=from-extra"  # noqa: B009


@pytest.mark.parametrize("name", ["msg", "name", "message", "trace_id"])
def test_log_context_refuses_a_record_attribute_name(name: str) -> None:
    with pytest.raises(ValueError, match=name), telemetry.log_context(**{name: "x"}):
        pass


LOG_THROUGH_SETTINGS = f"""
    import logging.config
    from parley.settings import base
    from parley import telemetry

    logging.config.dictConfig(base.LOGGING)
    with telemetry.log_context(run_id="{RUN_ID}", tenant_id=7):
        logging.getLogger("agents.services").warning("tool %s failed", "lookup_offer")
    logging.getLogger("agents.services").warning("no run")
"""


def test_json_log_format_puts_the_ids_in_fields() -> None:
    lines = _python(LOG_THROUGH_SETTINGS, DJANGO_SETTINGS_MODULE="parley.settings.base", LOG_FORMAT="json")

    inside, outside = (json.loads(line) for line in lines.splitlines())
    assert {key: inside[key] for key in ("levelname", "name", "message", "run_id", "tenant_id")} == {
        "levelname": "WARNING",
        "name": "agents.services",
        "message": "tool lookup_offer failed",
        "run_id": str(RUN_ID),
        "tenant_id": 7,
    }
    assert "timestamp" in inside
    assert "_log_ids" not in inside
    assert "run_id" not in outside


def test_plain_log_format_appends_the_ids() -> None:
    lines = _python(LOG_THROUGH_SETTINGS, DJANGO_SETTINGS_MODULE="parley.settings.base", LOG_FORMAT="plain")

    inside, outside = lines.splitlines()
    assert inside.endswith(f" WARNING agents.services tool lookup_offer failed run_id={RUN_ID} tenant_id=7")
    assert outside.endswith(" WARNING agents.services no run")
