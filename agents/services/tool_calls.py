"""The tool calls of a step: prepared (tool found, arguments parsed and checked), run (host
operations before the step's transaction, concurrently; the others inside it), recorded as
results or as questions for the party; and the results that arrive later
(:func:`tool_call_complete`), which resume the run when none is left.
"""

from __future__ import annotations

import contextvars
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import transaction

from agents import host_operations, selectors, tools
from agents.llm import BadArguments, ModelReply, ToolCall
from agents.models import Question, Run
from agents.services import runs, threads
from parley import telemetry
from parley.live import publish_on_commit

logger = logging.getLogger(__name__)

# The result of a call that would ask the party of an agent without a principal: nobody would answer.
NOBODY_TO_ASK = (
    "Error: {tool} cannot ask: this agent has no principal to ask, so nobody would answer. Go on "
    "without asking, or finish and say what you would need to know."
)


def run_outside_transaction(
    run: Run, reply: ModelReply, offered: dict[str, tools.Tool]
) -> dict[str, tools.Outcome]:
    """Run the reply's host operations concurrently, before the step's transaction, by call id.

    Only calls that are ready to run go here: a known tool that needs no
    approval, with valid arguments; every other call is handled in order
    inside the transaction.
    """
    ready = []
    for call in reply.tool_calls:
        prepared = _prepare(call, offered)
        if isinstance(prepared, tuple):
            tool, arguments = prepared
            if tool.outside_transaction and not tool.requires_approval:
                ready.append((call.id, call.name, tool, arguments))
    if not ready:
        return {}
    if len(ready) == 1:  # no thread to start for one
        call_id, name, tool, arguments = ready[0]
        return {call_id: execute(run, call_id, name, tool, arguments)}
    with ThreadPoolExecutor(max_workers=min(len(ready), 8)) as pool:
        # Each call runs in a copy of this context, so its span is a child of the step's.
        futures = {
            call_id: pool.submit(contextvars.copy_context().run, execute, run, call_id, name, tool, args)
            for call_id, name, tool, args in ready
        }
    return {call_id: future.result() for call_id, future in futures.items()}


def run_tools(
    run: Run,
    reply: ModelReply,
    offered: dict[str, tools.Tool],
    early: dict[str, tools.Outcome],
    thread: threads.Thread,
) -> str:
    """Record every tool call of one model message, in order, in the run's ``thread``; return the run's
    next status."""
    suspended = deferred = False
    for call in reply.tool_calls:
        outcome = early.get(call.id)
        if outcome is None:
            prepared = _prepare(call, offered)
            if isinstance(prepared, tools.Result):
                outcome = prepared
            elif prepared[0].requires_approval:
                _open_question(
                    run,
                    call.id,
                    call.name,
                    kind=Question.Kind.APPROVAL,
                    question=f"May your agent call {call.name}?",
                    arguments=prepared[1],
                )
                suspended = True
                continue
            else:
                outcome = execute(run, call.id, call.name, *prepared)
        if isinstance(outcome, tools.Suspend) and not selectors.can_ask_party(run.agent):
            outcome = tools.Result(NOBODY_TO_ASK.format(tool=call.name))
        if isinstance(outcome, tools.Suspend) and suspended:
            outcome = tools.Result(
                "Error: only one question at a time; ask again after this one is answered."
            )
        if isinstance(outcome, tools.Suspend):
            suspended = True
            _open_question(
                run,
                call.id,
                call.name,
                kind=Question.Kind.QUESTION,
                question=outcome.question,
                options=outcome.options,
                arguments=outcome.arguments,
            )
        elif isinstance(outcome, tools.Defer):
            deferred = True
        else:
            thread.append_result(run, call.id, call.name, outcome.text)
    if suspended:
        return Run.Status.NEEDS_INPUT
    return Run.Status.WAITING if deferred else Run.Status.RUNNING


def _prepare(
    call: ToolCall, offered: dict[str, tools.Tool]
) -> tuple[tools.Tool, dict[str, Any]] | tools.Result:
    """The tool and its parsed (:meth:`ToolCall.parsed_arguments`), schema-checked arguments, or
    the error result the model sees."""
    name = call.name
    tool = offered.get(name)
    if tool is None:
        return tools.Result(f"Error: unknown tool {name!r}; the tools offered are {', '.join(offered)}.")
    try:
        arguments = call.parsed_arguments()
    except BadArguments as exc:
        return tools.Result(f"Error: {exc}.")
    try:
        host_operations.validate_arguments(schema=tool.spec.parameters, arguments=arguments)
    except tools.ToolError as exc:
        return tools.Result(f"Error: the arguments of {name} do not match its schema: {exc}")
    return tool, arguments


def execute(run: Run, call_id: str, name: str, tool: tools.Tool, arguments: dict[str, Any]) -> tools.Outcome:
    """Run one tool; every failure becomes the call's result for the model, never the run's end."""
    context = tools.ToolContext(run=run, tool_call_id=call_id)
    with telemetry.tool_call_span(name=name, call_id=call_id) as span:
        try:
            if tool.outside_transaction:
                return tool.handler(context, arguments)
            with transaction.atomic():
                return tool.handler(context, arguments)
        except tools.ToolError as exc:
            span.fail("ToolError", str(exc))
            return tools.Result(f"Error: {exc}")
        except Exception as exc:
            # A tool that raises becomes its call's result, never the end of the run
            # (docs/design.md#the-agent-loop).
            # The savepoint above has undone whatever it wrote.
            logger.exception("tool %s failed in run %s", name, run.pk)
            span.fail(type(exc).__name__, "the tool raised")
            return tools.Result(f"Error: {name} failed unexpectedly; try again or do without it.")


def _open_question(run: Run, call_id: str, tool_name: str, *, kind: str, **fields: Any) -> None:
    question = Question.objects.create(
        tenant_id=run.tenant_id, run=run, tool_call_id=call_id, tool_name=tool_name, kind=kind, **fields
    )
    publish_on_commit(
        event="question.opened",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={"question": str(question.pk), "run": str(run.pk), "kind": kind},
    )


def tool_call_complete(*, run: Run, tool_call_id: str, result: str) -> None:
    """Record the result of a deferred, suspended or approved tool call; resume the run when none is left.

    Safe to call inside an open transaction; the next step is enqueued after
    it commits. A result already recorded for the call, or one for a run that
    ended, is dropped.
    """
    with transaction.atomic():
        run = Run.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.pk)
        if run.status not in Run.AWAITING:
            return
        call = threads.pending_calls(run).get(tool_call_id)
        if call is None:
            return
        threads.append_result(run, tool_call_id, call["name"], result)
        resume_if_ready(run)


def resume_if_ready(run: Run) -> None:
    """Set a locked, waiting run's status from its pending calls: running when none is left."""
    pending = threads.pending_calls(run)
    asking = (
        Question.objects.for_tenant(run.tenant_id)
        .filter(run=run, tool_call_id__in=pending, answered_at=None)
        .exists()
    )
    status = Run.Status.RUNNING if not pending else Run.Status.NEEDS_INPUT if asking else Run.Status.WAITING
    if status == Run.Status.RUNNING:
        runs.enqueue_step(run)
    if status != run.status:
        run.status = status
        run.save(update_fields=["status", "updated_at"])
        runs.publish_run(run)
