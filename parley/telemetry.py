"""OpenTelemetry traces of the agent loop, and logs that carry the run and tenant they belong to.

**Traces** follow the OpenTelemetry GenAI semantic conventions (semconv v1.41, GenAI spans and
agent spans, status Development; the names are pinned in one place below, and the current ones are
emitted: ``gen_ai.provider.name``, not the retired ``gen_ai.system``). One run gives one trace::

    invoke_agent {agent name}      record_run_span, once, when the run ends
    ├── run_step {agent name}      run_step_span, one per Celery task
    │   ├── chat {model}           model_call_span
    │   └── execute_tool {tool}    tool_call_span, one per tool call
    └── run_step {agent name}  …

A run is carried out by one Celery task per step, in whichever worker, so no live span can cover
it. Its ids are derived instead: the trace id is the run's UUID and the run span's id a hash of it.
Each step span is started under a parent built from those two ids, and the run span is recorded
at the end, with its real start and end times and exactly that span id (see
:class:`RunIdGenerator` for how).

**Export.** :func:`setup` installs an SDK tracer provider with an OTLP/HTTP exporter when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set. Otherwise it
installs nothing and the API's default no-op provider stays: the helpers cost a few attribute
look-ups and export nothing. Every helper takes ``tracer_provider`` (default: the global one), so
tests and tools can hand in their own provider without touching process-wide state.

**Logs.** Inside :func:`log_context`, :class:`LogContextFilter` puts the ids it was given, and
the current span's ``trace_id`` and ``span_id``, on every record; ``LOGGING`` attaches the filter
to the console handler in both formats (``LOG_FORMAT=plain|json``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

# Attribute names, GenAI semconv v1.41 (gen-ai-spans.md, gen-ai-agent-spans.md) and error.type
# (stable, recording-errors.md). Ours are under ``parley.``.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
PARLEY_RUN_ID = "parley.run.id"
PARLEY_RUN_STEP = "parley.run.step"
PARLEY_RUN_STATUS = "parley.run.status"
PARLEY_TENANT_ID = "parley.tenant.id"

_SCOPE = "parley"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_setup_lock = threading.Lock()
_setup_done = False
_installed: TracerProvider | None = None


# --- Set-up -----------------------------------------------------------------------------------


def build_tracer_provider() -> TracerProvider:
    """An SDK tracer provider with no span processor, ready for the run spans' derived ids.

    Its resource's ``service.name`` is ``OTEL_SERVICE_NAME``, or ``"parley"`` when that is unset
    (a ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES`` does not count; its other attributes do).
    It uses :class:`RunIdGenerator`, which :func:`record_run_span` needs; add span processors to it
    to export anywhere.
    """
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "parley"})
    return TracerProvider(resource=resource, id_generator=RunIdGenerator())


def setup() -> None:
    """Install the process's tracer provider, once; later calls do nothing.

    Only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` is appended) or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is) is set: then spans go through a
    ``BatchSpanProcessor`` to the OTLP/HTTP (protobuf) exporter, which reads the other standard
    ``OTEL_EXPORTER_OTLP_*`` variables (headers, timeout, compression) itself. Otherwise the
    API's no-op provider stays. The provider flushes at interpreter exit; call :func:`shutdown`
    where a process ends without it (a forked Celery pool child).
    """
    global _setup_done, _installed
    with _setup_lock:
        if _setup_done:
            return
        _setup_done = True
        if not (
            os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        ):
            return
        # Imported here: processes that export nothing need not load the exporter and protobuf.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = build_tracer_provider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _installed = provider


def shutdown() -> None:
    """Export what is queued and stop the provider :func:`setup` installed, if any.

    Blocks until the queue is exported, at most 30 s (the SDK's shutdown timeout); spans started
    afterwards are dropped.
    """
    if _installed is not None:
        _installed.shutdown()


# --- Run trace ids ----------------------------------------------------------------------------

# The ids the next span started in this context must get; set only around one start_span call.
_pinned_ids: ContextVar[SpanContext | None] = ContextVar("parley_telemetry_pinned_ids", default=None)


class RunIdGenerator(IdGenerator):
    """Random ids, except for the run span, which gets the ids its steps already name as parent.

    The SDK lets only its ``IdGenerator`` choose a span's ids, and the run span is recorded after
    its steps, often in another process, so its ids must be the ones derived from the run.
    :func:`record_run_span` pins them in a context variable for the one ``start_span`` call.
    """

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        pinned = _pinned_ids.get()
        return pinned.span_id if pinned is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        pinned = _pinned_ids.get()
        return pinned.trace_id if pinned is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        # Run ids are UUID4s, whose 56 least significant bits are random, as ratio samplers need.
        return True


def run_span_context(run_id: uuid.UUID | str) -> SpanContext:
    """The ids of ``run_id``'s ``invoke_agent`` span: trace id = the UUID's 128 bits, span id = the
    first 64 bits of BLAKE2b over it. Marked remote and sampled, as a parent in another process.

    Raises ``ValueError`` for a string that is not a UUID, or for the nil UUID (an all-zero trace
    id is invalid, W3C Trace Context §3.2.2.3).
    """
    run_uuid = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(run_id)
    if run_uuid.int == 0:
        raise ValueError("the nil UUID cannot identify a run's trace")
    digest = hashlib.blake2b(run_uuid.bytes, digest_size=8, person=b"parley.run").digest()
    return SpanContext(
        trace_id=run_uuid.int,
        # An all-zero span id is invalid (W3C Trace Context §3.2.2.4), however unlikely the hash.
        span_id=int.from_bytes(digest, "big") or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID),
    )


# --- Spans ------------------------------------------------------------------------------------


def _tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    return trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)


@contextmanager
def _span(
    tracer_provider: trace.TracerProvider | None,
    name: str,
    *,
    kind: SpanKind,
    attributes: Mapping[str, AttributeValue],
    context: Context | None = None,
) -> Iterator[trace.Span]:
    """A current span that, on an exception, also gets ``error.type`` (the exception's class name,
    recording-errors.md) beside the ERROR status and exception event the API records."""
    with _tracer(tracer_provider).start_as_current_span(
        name, context=context, kind=kind, attributes=attributes
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            raise


def _run_attributes(
    *,
    run_id: uuid.UUID | str,
    tenant_id: int,
    agent_id: int | str | uuid.UUID,
    agent_name: str,
    intent_id: int | str | uuid.UUID,
) -> dict[str, AttributeValue]:
    return {
        GEN_AI_AGENT_ID: str(agent_id),
        GEN_AI_AGENT_NAME: agent_name,
        GEN_AI_CONVERSATION_ID: str(intent_id),
        PARLEY_RUN_ID: str(run_id),
        PARLEY_TENANT_ID: tenant_id,
    }


@contextmanager
def run_step_span(
    *,
    run_id: uuid.UUID | str,
    tenant_id: int,
    agent_id: int | str | uuid.UUID,
    agent_name: str,
    intent_id: int | str | uuid.UUID,
    step: int,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[trace.Span]:
    """Span ``run_step {agent_name}`` (INTERNAL) for one step of a run, current while it is open.

    Its parent is the run's ``invoke_agent`` span (:func:`run_span_context`), whether or not that
    has been recorded yet, so every step of a run lands in the run's trace. Attributes:
    ``gen_ai.agent.id``, ``gen_ai.agent.name``, ``gen_ai.conversation.id`` (the intent: the
    thread a run belongs to), ``parley.run.id``, ``parley.tenant.id``, ``parley.run.step``
    (1-based). The step is Parley's, not a GenAI operation, so it has no ``gen_ai.operation.name``.

    An exception leaving the block sets ERROR status and ``error.type`` and propagates. Raises
    ``ValueError`` for a ``run_id`` :func:`run_span_context` refuses.
    """
    parent = trace.set_span_in_context(trace.NonRecordingSpan(run_span_context(run_id)))
    attributes = _run_attributes(
        run_id=run_id, tenant_id=tenant_id, agent_id=agent_id, agent_name=agent_name, intent_id=intent_id
    )
    attributes[PARLEY_RUN_STEP] = step
    with _span(
        tracer_provider,
        f"run_step {agent_name}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        context=parent,
    ) as span:
        yield span


def record_run_span(
    *,
    run_id: uuid.UUID | str,
    tenant_id: int,
    agent_id: int | str | uuid.UUID,
    agent_name: str,
    intent_id: int | str | uuid.UUID,
    started_at: datetime,
    ended_at: datetime,
    status: str,
    input_tokens: int,
    output_tokens: int,
    error: str | None = None,
    provider: str = "openai",
    tracer_provider: trace.TracerProvider | None = None,
) -> None:
    """Record the run's span ``invoke_agent {agent_name}`` (INTERNAL, the trace's root), once,
    when the run has ended.

    It spans ``started_at``..``ended_at`` (timezone-aware datetimes, to the microsecond) and has
    the ids of :func:`run_span_context`, which its step spans already name as parent; that needs
    the provider's :class:`RunIdGenerator` (:func:`build_tracer_provider`), and under any other
    SDK provider the run span gets random ids and stands apart from its steps. Attributes: those
    of :func:`run_step_span` without the step, ``gen_ai.operation.name=invoke_agent``,
    ``gen_ai.provider.name``, ``gen_ai.usage.input_tokens``/``output_tokens`` (the run's totals),
    and ``parley.run.status`` (``status``, a ``Run.Status`` value).

    With ``error`` (why the run failed, for people) the status is ERROR with that description and
    ``error.type`` is ``status``; without it the status stays UNSET, as recording-errors.md asks of
    a success. Recording the same run twice gives two spans with the same id: call it once, on the
    transition to a final status. Raises ``ValueError`` for a naive datetime or a bad ``run_id``.
    """
    attributes = _run_attributes(
        run_id=run_id, tenant_id=tenant_id, agent_id=agent_id, agent_name=agent_name, intent_id=intent_id
    )
    attributes |= {
        GEN_AI_OPERATION_NAME: "invoke_agent",
        GEN_AI_PROVIDER_NAME: provider,
        GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
        GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        PARLEY_RUN_STATUS: status,
    }
    if error is not None:
        attributes[ERROR_TYPE] = status
    start_time, end_time = _unix_nanos(started_at), _unix_nanos(ended_at)
    token = _pinned_ids.set(run_span_context(run_id))
    try:
        # An empty context: the run span is the root even when recorded inside a step's span.
        span = _tracer(tracer_provider).start_span(
            f"invoke_agent {agent_name}",
            context=Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_time,
        )
    finally:
        _pinned_ids.reset(token)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=end_time)


@dataclass
class ModelCall:
    """What :func:`model_call_span` yields: report the answer on it."""

    span: trace.Span

    def record(self, response_model: str, input_tokens: int, output_tokens: int) -> None:
        """Set ``gen_ai.response.model`` (the model that answered, e.g. after a fallback) and
        ``gen_ai.usage.input_tokens``/``output_tokens`` (this call's, in tokens)."""
        self.span.set_attributes(
            {
                GEN_AI_RESPONSE_MODEL: response_model,
                GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
                GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
            }
        )


@contextmanager
def model_call_span(
    *, model: str, provider: str = "openai", tracer_provider: trace.TracerProvider | None = None
) -> Iterator[ModelCall]:
    """Span ``chat {model}`` (CLIENT) around one chat-completions call, a child of the current span.

    Attributes at start: ``gen_ai.operation.name=chat``, ``gen_ai.provider.name`` (a semconv
    well-known value such as ``openai``, which also names OpenAI-compatible endpoints),
    ``gen_ai.request.model``; :meth:`ModelCall.record` adds the response's. An exception leaving
    the block (the model error) sets ERROR status and ``error.type`` and propagates.
    """
    attributes: dict[str, AttributeValue] = {
        GEN_AI_OPERATION_NAME: "chat",
        GEN_AI_PROVIDER_NAME: provider,
        GEN_AI_REQUEST_MODEL: model,
    }
    with _span(tracer_provider, f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield ModelCall(span)


@dataclass
class ToolExecution:
    """What :func:`tool_call_span` yields: mark a call that failed without raising."""

    span: trace.Span

    def fail(self, error_type: str, description: str) -> None:
        """Set ERROR status with ``description`` and ``error.type`` to ``error_type``, a
        low-cardinality name (``unknown_tool``, ``invalid_arguments``, an exception class)."""
        self.span.set_attribute(ERROR_TYPE, error_type)
        self.span.set_status(Status(StatusCode.ERROR, description))


@contextmanager
def tool_call_span(
    *, name: str, call_id: str, tracer_provider: trace.TracerProvider | None = None
) -> Iterator[ToolExecution]:
    """Span ``execute_tool {name}`` (INTERNAL) around one tool call, a child of the current span.

    Attributes: ``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``,
    ``gen_ai.tool.call.id`` (the model's id for the call), ``gen_ai.tool.type=function``. A tool
    failure that becomes the call's result is marked with :meth:`ToolExecution.fail`; an
    exception leaving the block sets ERROR status and ``error.type`` and propagates.
    """
    attributes: dict[str, AttributeValue] = {
        GEN_AI_OPERATION_NAME: "execute_tool",
        GEN_AI_TOOL_NAME: name,
        GEN_AI_TOOL_CALL_ID: call_id,
        GEN_AI_TOOL_TYPE: "function",
    }
    with _span(
        tracer_provider, f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield ToolExecution(span)


def _unix_nanos(moment: datetime) -> int:
    if moment.utcoffset() is None:
        raise ValueError(f"{moment!r} is naive; span times must be timezone-aware")
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


# --- Logs -------------------------------------------------------------------------------------

_log_ids: ContextVar[Mapping[str, object]] = ContextVar("parley_log_ids", default=MappingProxyType({}))

# Names a log_context id may not take: the LogRecord's own attributes, what formatters add, and
# what the filter sets itself.
_RESERVED_LOG_NAMES = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "trace_id",
    "span_id",
    "_log_ids",
}


@contextmanager
def log_context(**ids: object) -> Iterator[None]:
    """Put ``ids`` (``run_id=…, tenant_id=…``) on every log record emitted inside the block.

    Nested blocks add to the outer ids, an inner value winning; the outer ones come back on exit.
    The context is a ``contextvars`` one, so each thread and asyncio task has its own. Raises
    ``ValueError`` for a name a LogRecord already uses (``name``, ``msg``, ``trace_id``…).
    """
    clashes = sorted(_RESERVED_LOG_NAMES.intersection(ids))
    if clashes:
        raise ValueError(f"log context names clash with LogRecord attributes: {', '.join(clashes)}")
    token = _log_ids.set(MappingProxyType({**_log_ids.get(), **ids}))
    try:
        yield
    finally:
        _log_ids.reset(token)


class LogContextFilter(logging.Filter):
    """Adds the :func:`log_context` ids, and ``trace_id``/``span_id`` (lower-case hex, 32 and 16
    digits) when a span is current, to each record as attributes; never drops a record.

    A value the record already has (from ``extra=``) is kept. ``_log_ids`` is the same set
    rendered `` key=value…`` (or empty) for a plain format string, ``%(_log_ids)s``; the leading
    underscore keeps it out of python-json-logger's output, where each id is its own field.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ids = dict(_log_ids.get())
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            ids["trace_id"] = trace.format_trace_id(span_context.trace_id)
            ids["span_id"] = trace.format_span_id(span_context.span_id)
        for key, value in ids.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        record.__dict__["_log_ids"] = "".join(f" {key}={getattr(record, key)}" for key in ids)
        return True
