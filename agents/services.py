"""Writes of the agent loop: start, step, cancel and end runs; complete, answer and approve tool calls.

Every step is written in one transaction before the next is enqueued, so a
worker that dies mid-run loses at most the step in flight, and a step taken
twice is applied once (the run's ``step_count`` is checked under its row lock,
and one model reply per run step is a database constraint). Each message names
the step it is for, so a message that comes twice takes no second step.

Work is handed to workers after the commit (:func:`parley.celery.enqueue_on_commit`);
a message the broker lost is sent again by :func:`stalled_work_resend`, the
periodic sweep that reads from Postgres what should be moving and has not.

Lock order, everywhere: the run's row, then its intent's row.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, F, Max, OuterRef
from django.utils import timezone

from agents import guardrails, history, host_operations, selectors, tools
from agents.instructions import system_message
from agents.llm import (
    BadArguments,
    CallOptions,
    ChatMessage,
    ModelCancelled,
    ModelError,
    ModelReply,
    Retry,
    ToolCall,
    model_for,
)
from agents.models import MAX_DELEGATION_DEPTH, Agent, Intent, Message, Question, Run
from agents.models import Tool as ToolRow
from parley import strict_json, telemetry
from parley.celery import SWEEP_BATCH, enqueue_each, enqueue_on_commit
from parley.live import publish_on_commit, push_transient
from parley.models import Membership

logger = logging.getLogger(__name__)

# Seconds between two looks at the run's status while its model call is in flight.
CANCEL_POLL_SECONDS = 0.5
# Limits a run may set: what its columns hold, and a deadline a person may mean.
MAX_TOKEN_BUDGET = 2**31 - 1
MAX_DEADLINE = timedelta(days=10 * 365)
# Tool call ids are the model's; longer ones, repeats and blanks are replaced by ids of ours.
MAX_CALL_ID = 64
# The result of a call that would ask the party of an agent without a principal: nobody would answer.
NOBODY_TO_ASK = (
    "Error: {tool} cannot ask: this agent has no principal to ask, so nobody would answer. Go on "
    "without asking, or finish and say what you would need to know."
)


class RunError(Exception):
    """A request about a run that cannot be carried out; the message says why.

    ``field`` names the input the refusal is about (``task``, ``max_tokens``, …) when it is about
    one, so the API can answer 400 at that field; "" when it is the run's state that refuses.
    """

    def __init__(self, message: str = "", *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class RunBusy(RunError):
    """Another run of the same thread is active and the agent refuses to queue behind it."""


class QuestionAlreadyAnswered(RunError):
    """The question was answered, or the approval decided, before; nothing changed.

    ``question`` is it as answered. The message says only that ("This approval was already
    decided."); :meth:`said` says by whom and when, as the dashboard and the API tell it.
    """

    def __init__(self, question: Question) -> None:
        super().__init__(f"This {question.kind} was already {_decided(question.kind)}.")
        self.question = question

    def said(self, *, when: str) -> str:
        """Who answered or decided it, and ``when`` (its ``answered_at`` as the caller writes times):
        "This question was already answered by tomas at …", "This approval was already rejected by
        the host at …" (no member: the host through its API)."""
        question = self.question
        who = question.answered_by.get_username() if question.answered_by else "the host"
        if question.kind == Question.Kind.APPROVAL:
            verdict = "approved" if question.approved else "rejected"
            return f"This approval was already {verdict} by {who} at {when}."
        return f"This question was already answered by {who} at {when}."


class NotAllowed(RunError):
    """The user may not do this for this agent."""


# Starting runs.


def intent_create(*, agent: Agent, statement: str) -> Intent:
    """A new intent (conversation thread) of ``agent``. Raises :class:`RunError` for an empty statement."""
    if not statement.strip():
        raise RunError("The intent is empty.", field="statement")
    return Intent.objects.create(tenant_id=agent.tenant_id, agent=agent, statement=statement.strip())


def run_start(
    *,
    agent: Agent,
    intent: Intent | None = None,
    statement: str = "",
    task: str,
    output_schema: dict[str, Any] | None = None,
    max_tokens: int | None = None,
    max_cost: Decimal | None = None,
    deadline: datetime | None = None,
    user: User | None = None,
) -> Run:
    """Start a run of ``agent`` on ``intent`` with the party's ``task`` as the user message.

    ``user`` is the member starting it, None for the host (its API) or the platform itself (an
    Agent Exchange request, the demo); a member who may not act for the agent
    (:func:`require_may_start`) is refused with :class:`NotAllowed` before anything else is read.

    Without ``intent``, on a new intent of ``statement`` (:func:`intent_create`),
    written only if the run starts.

    Optional limits: ``output_schema`` (a JSON Schema the final answer must
    meet; it is then parsed into ``Run.output_data``), ``max_tokens`` (input +
    output tokens), ``max_cost`` (in the model endpoint's currency) and a
    ``deadline``. A run past a limit ends ``failed``, saying which.

    While another run of the thread is active, the new run is refused
    (:class:`RunBusy`) or, when ``agent.on_busy`` is ``queue``, created
    ``pending`` and started when the active one ends: two runs never
    interleave one history. Raises :class:`RunError` when the task (or the new
    intent) is empty, the intent belongs to another agent, or a limit is not usable.
    """
    if user is not None:
        require_may_start(agent=agent, user=user)
    if not task.strip():
        raise RunError("The task is empty.", field="task")
    if intent is not None and (intent.agent_id != agent.pk or intent.tenant_id != agent.tenant_id):
        raise RunError("That intent belongs to another agent.", field="intent")
    _check_limits(output_schema=output_schema, max_tokens=max_tokens, max_cost=max_cost, deadline=deadline)
    with transaction.atomic():
        if intent is None:
            intent = intent_create(agent=agent, statement=statement)
        Intent.objects.for_tenant(agent.tenant_id).select_for_update().get(pk=intent.pk)
        active = Run.objects.for_tenant(agent.tenant_id).filter(intent=intent, status__in=Run.ACTIVE).first()
        if active is not None and agent.on_busy != Agent.OnBusy.QUEUE:
            raise RunBusy(
                f"Run {active.pk} of this intent is still {active.status}; wait for it or cancel it."
            )
        return _create_run(
            agent=agent,
            intent=intent,
            task=task,
            status=Run.Status.PENDING if active is not None else Run.Status.QUEUED,
            output_schema=output_schema,
            max_tokens=max_tokens,
            max_cost=max_cost,
            deadline=deadline,
        )


def _check_limits(
    *,
    output_schema: dict[str, Any] | None,
    max_tokens: int | None,
    max_cost: Decimal | None,
    deadline: datetime | None,
) -> None:
    if output_schema is not None:
        if not isinstance(output_schema, dict):
            raise RunError("The output schema must be a JSON object.", field="output_schema")
        try:
            host_operations.check_schema(output_schema)
        except ValidationError as exc:
            raise RunError(
                f"The output schema is not usable: {'; '.join(exc.messages)}", field="output_schema"
            ) from exc
        if output_schema.get("type") != "object":
            # Chat-completions structured outputs take an object at the root.
            raise RunError(
                'The output schema must describe a JSON object ("type": "object").', field="output_schema"
            )
    if max_tokens is not None and not 1 <= max_tokens <= MAX_TOKEN_BUDGET:
        raise RunError(f"The token budget must be from 1 to {MAX_TOKEN_BUDGET:,}.", field="max_tokens")
    if max_cost is not None and max_cost <= 0:
        raise RunError("The cost budget must be more than 0.", field="max_cost")
    if deadline is not None and deadline <= timezone.now():
        raise RunError("The deadline has already passed.", field="deadline")
    if deadline is not None and deadline > timezone.now() + MAX_DEADLINE:
        raise RunError(f"The deadline must be within {MAX_DEADLINE.days // 365} years.", field="deadline")


def _create_run(*, agent: Agent, intent: Intent, task: str, status: str, **fields: Any) -> Run:
    """Create the run; a ``queued`` one starts at once, a ``pending`` one when its thread is free."""
    run = Run.objects.create(
        tenant_id=agent.tenant_id, agent=agent, intent=intent, status=status, task=task.strip(), **fields
    )
    if status == Run.Status.QUEUED:
        _begin(run)
    _publish_run(run)
    return run


def _begin(run: Run) -> None:
    """Put the run's task in its thread as the next user message, and enqueue its first step.

    Only here: a pending run's task must not enter the history of the run it waits behind.
    """
    _append(run, role=Message.Role.USER, content=run.task, step=0)
    _enqueue_step(run)


def run_delegate(
    *, parent: Run, tool_call_id: str, tool: ToolRow, arguments: dict[str, Any]
) -> tools.Outcome:
    """Run ``tool.target_agent``'s loop on ``arguments`` as a child of ``parent``: the agent-as-tool.

    The task is ``arguments["task"]`` when it is a string, else the arguments
    as JSON; the child gets an intent of its own. The child's final text
    becomes the tool call's result when it ends (see :func:`_ended`), and
    cancelling the parent cancels the child. Returns :class:`tools.Defer`.
    Raises :class:`tools.ToolError` for a target of another tenant, an agent
    already in the chain of callers, or a chain deeper than
    :data:`MAX_DELEGATION_DEPTH`.
    """
    target = tool.target_agent
    if target is None or target.tenant_id != parent.tenant_id:
        raise tools.ToolError(f"{tool.name} has no agent of this tenant to run.")
    chain = [parent]
    while chain[-1].parent_id is not None:
        chain.append(Run.objects.for_tenant(parent.tenant_id).get(pk=chain[-1].parent_id))
    if any(run.agent_id == target.pk for run in chain):
        raise tools.ToolError(f"{tool.name} would run {target.name}, which is already working on this call.")
    if len(chain) > MAX_DELEGATION_DEPTH:
        raise tools.ToolError(
            f"{tool.name} refused: agents may call agents at most {MAX_DELEGATION_DEPTH} deep."
        )
    task = arguments["task"] if isinstance(arguments.get("task"), str) else json.dumps(arguments)
    if not task.strip():
        raise tools.ToolError(f"{tool.name} needs a non-empty 'task'.")
    intent = intent_create(agent=target, statement=f"Asked by {parent.agent.name}: {task}")
    _create_run(
        agent=target,
        intent=intent,
        task=task,
        status=Run.Status.QUEUED,
        parent=parent,
        parent_tool_call_id=tool_call_id,
    )
    return tools.Defer()


# Taking steps.


def delegate_handler(row: ToolRow) -> tools.Handler:
    """How a run calls the agent of the tool ``row``: :func:`run_delegate` (registered for the
    ``agent`` kind, :func:`agents.tools.register_kind`)."""

    def call(context: tools.ToolContext, arguments: dict[str, Any]) -> tools.Outcome:
        return run_delegate(
            parent=context.run, tool_call_id=context.tool_call_id, tool=row, arguments=arguments
        )

    return call


def run_step(*, run_id: Any, tenant_id: int, step: int | None = None) -> None:
    """Take step ``step`` of the run: ask the model, run the tools it called, record it all.

    ``step`` is the step the message is for (the run's ``step_count`` + 1 when
    it was sent): a message for a step already taken — a duplicate, or one the
    sweep sent again — does nothing, so each step is taken once however often
    it is asked for. None takes the next step, whichever it is (a message sent
    before messages named their step).

    Quietly does nothing when the run is gone or not stepping (waiting on the
    party or a tool, or ended). A run past a limit ends instead. The model and
    host operations are called outside any transaction; everything is then
    written in one. The step is a span of the run's trace, and its logs carry
    the run's and tenant's ids.
    """
    run = Run.objects.for_tenant(tenant_id).select_related("agent", "intent").filter(pk=run_id).first()
    if run is None or run.status not in Run.STEPPING:
        return
    if step is not None and step != run.step_count + 1:
        return
    with (
        telemetry.log_context(run_id=str(run.pk), tenant_id=tenant_id),
        telemetry.run_step_span(
            run_id=run.pk,
            tenant_id=tenant_id,
            agent_id=run.agent_id,
            agent_name=run.agent.name,
            intent_id=run.intent_id,
            step=run.step_count + 1,
        ),
    ):
        try:
            _take_step(run)
        except Exception as exc:
            # A step that cannot be written would fail the same way on every delivery, and a
            # run left stepping blocks its thread: end it, saying so.
            logger.exception("step %s of run %s failed", run.step_count + 1, run.pk)
            _finish(
                run,
                Run.Status.FAILED,
                f"Step {run.step_count + 1} failed unexpectedly ({type(exc).__name__}).",
            )


def _take_step(run: Run) -> None:
    agent = run.agent
    limit = _limit_reached(run)
    if limit is not None:
        _finish(run, *limit)
        return
    offered = tools.tools_for(agent)
    try:
        messages = _chat_messages(run)
    except guardrails.GuardrailTripped as exc:
        _finish(run, Run.Status.FAILED, str(exc))
        return
    live = _LiveText(run)
    kept = False
    try:
        kept = _ask_model(run, messages, offered, live)
    finally:
        if not kept:
            live.withdraw()  # streamed text of a reply that was not stored must not stay on the page


def _ask_model(
    run: Run, messages: list[ChatMessage], offered: dict[str, tools.Tool], live: _LiveText
) -> bool:
    """Call the model, run the tools it called and write the step; whether the reply was stored."""
    agent = run.agent
    provider = "parley.offline" if agent.model == "offline" else "openai"
    try:
        with telemetry.model_call_span(model=agent.model, provider=provider) as call:
            reply = model_for(agent).complete(
                messages=messages, tools=[t.spec for t in offered.values()], options=_call_options(run, live)
            )
            call.record(reply.model, reply.input_tokens, reply.output_tokens)
    except ModelCancelled:
        return False  # the run was stopped meanwhile; whoever stopped it wrote its end
    except ModelError as exc:
        _finish(run, Run.Status.FAILED, str(exc))
        return False
    try:
        content = guardrails.check(agent.guardrails, stage="output", text=reply.content)
    except guardrails.GuardrailTripped as exc:
        _finish(run, Run.Status.FAILED, str(exc), spent=reply)
        return False
    reply = _with_unique_call_ids(run, reply)
    early = _run_outside_transaction(run, reply, offered)
    return _apply_step(
        run_id=run.pk,
        tenant_id=run.tenant_id,
        seen_steps=run.step_count,
        reply=reply,
        content=content,
        offered=offered,
        early=early,
    )


class _LiveText:
    """A step's model text on the open pages: each delta as it streams (``run.delta``), and the
    withdrawal (``run.withdrawn``) of what went out once it will not be stored.

    Both are transient events (:func:`parley.live.push_transient`), ``{"run", "step"}`` plus
    ``"delta"`` for a delta.
    """

    def __init__(self, run: Run) -> None:
        self.tenant_id = run.tenant_id
        self.party_id = run.agent.principal_id
        self.head = {"run": str(run.pk), "step": run.step_count + 1}
        self.shown = False

    def delta(self, text: str) -> None:
        self.shown = True
        push_transient(
            event="run.delta",
            tenant_id=self.tenant_id,
            party_id=self.party_id,
            payload={**self.head, "delta": text},
        )

    def withdraw(self) -> None:
        """Take back the text sent since the last withdrawal, if any: its try failed, or its reply
        was refused or not stored."""
        if self.shown:
            self.shown = False
            push_transient(
                event="run.withdrawn", tenant_id=self.tenant_id, party_id=self.party_id, payload=self.head
            )


def _with_unique_call_ids(run: Run, reply: ModelReply) -> ModelReply:
    """``reply`` with every tool call id unique in the run, non-empty and at most :data:`MAX_CALL_ID` long.

    Some servers number calls afresh in every message (``call_0``…) or repeat an
    id within one; results are matched to calls by id, so ids that are not
    unique are replaced by ids of ours (``call_<step>_<n>``), in the stored
    message and its results alike.
    """
    used = {
        call["id"]
        for calls in Message.objects.for_tenant(run.tenant_id)
        .filter(run=run, role=Message.Role.ASSISTANT)
        .values_list("tool_calls", flat=True)
        for call in calls
    }
    step, renamed = run.step_count + 1, []
    for n, call in enumerate(reply.tool_calls, start=1):
        call_id = call.id
        if not call_id or len(call_id) > MAX_CALL_ID or call_id in used:
            call_id = f"call_{step}_{n}"
        used.add(call_id)
        renamed.append(replace(call, id=call_id))
    return replace(reply, tool_calls=tuple(renamed))


def _limit_reached(run: Run) -> tuple[str, str] | None:
    """The (status, reason) a run ends with before its next step, or None to go on."""
    if run.step_count >= run.agent.max_steps:
        return Run.Status.MAX_STEPS, f"Stopped after {run.agent.max_steps} steps."
    spent = run_budget_spent(run)
    return (Run.Status.FAILED, spent) if spent else None


def run_budget_spent(run: Run) -> str | None:
    """Why ``run`` may spend no more model work — its deadline passed, its token or cost budget is
    spent — or None. Steps and the negotiation turns under the run both stop on it."""
    if run.deadline is not None and timezone.now() >= run.deadline:
        return f"The deadline ({run.deadline:%Y-%m-%d %H:%M %Z}) passed."
    if run.max_tokens is not None and run.input_tokens + run.output_tokens >= run.max_tokens:
        return f"The token budget of {run.max_tokens} is spent ({run.input_tokens + run.output_tokens} used)."
    if run.max_cost is not None and run.cost >= run.max_cost:
        return f"The cost budget of {run.max_cost} is spent ({run.cost} used)."
    return None


def run_usage_add(*, run: Run, input_tokens: int, output_tokens: int, cost: Decimal) -> None:
    """Add model work done for ``run`` outside its steps (a negotiation turn's decision) to its usage.

    ``cost`` is in the run's model endpoint's currency. An atomic ``F()`` update: the run's
    own steps take its row lock to add theirs.
    """
    Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(
        input_tokens=F("input_tokens") + input_tokens,
        output_tokens=F("output_tokens") + output_tokens,
        cost=F("cost") + cost,
        updated_at=timezone.now(),
    )


def _call_options(run: Run, live: _LiveText) -> CallOptions:
    """Hooks of one model call: stream deltas live (withdrawn before a retry or a fallback starts
    over), record retries and fallbacks, stop when cancelled, and answer by the run's deadline."""
    head = {"run": str(run.pk), "step": run.step_count + 1}
    party = run.agent.principal_id

    def on_retry(retry: Retry) -> None:
        live.withdraw()
        publish_on_commit(
            event="run.retry",
            tenant_id=run.tenant_id,
            party_id=party,
            payload={
                **head,
                "model": retry.model,
                "attempt": retry.attempt,
                "wait": retry.wait,
                "reason": retry.reason,
            },
        )

    def on_fallback(from_model: str, to_model: str, reason: str) -> None:
        live.withdraw()
        publish_on_commit(
            event="run.fallback",
            tenant_id=run.tenant_id,
            party_id=party,
            payload={**head, "from": from_model, "to": to_model, "reason": reason},
        )

    # Streamed text reaches the dashboard before the output guardrails can see the whole of it.
    streams = not any(g.get("stage") == "output" for g in run.agent.guardrails)
    return CallOptions(
        on_delta=live.delta if streams else None,
        on_retry=on_retry,
        on_fallback=on_fallback,
        cancelled=_stopped_check(run),
        response_format=run.output_schema,
        deadline=run.deadline,
    )


def _stopped_check(run: Run) -> Callable[[], bool]:
    """A check, cheap to call often, of whether the run stopped stepping (cancelled, expired)."""
    looked_at, stopped = 0.0, False

    def stopped_now() -> bool:
        nonlocal looked_at, stopped
        if not stopped and time.monotonic() - looked_at >= CANCEL_POLL_SECONDS:
            looked_at = time.monotonic()
            status = Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).values_list("status", flat=True)
            stopped = status.first() not in Run.STEPPING
        return stopped

    return stopped_now


def _run_outside_transaction(
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
    with ThreadPoolExecutor(max_workers=min(len(ready), 8)) as pool:
        # Each call runs in a copy of this context, so its span is a child of the step's.
        futures = {
            call_id: pool.submit(contextvars.copy_context().run, _execute, run, call_id, name, tool, args)
            for call_id, name, tool, args in ready
        }
    return {call_id: future.result() for call_id, future in futures.items()}


def _apply_step(
    *,
    run_id: Any,
    tenant_id: int,
    seen_steps: int,
    reply: ModelReply,
    content: str,
    offered: dict[str, tools.Tool],
    early: dict[str, tools.Outcome],
) -> bool:
    """Write the step: the reply, its tool calls' outcomes and the run's next status; whether it
    was written here (not when another worker applied it, or the run stopped meanwhile)."""
    with transaction.atomic():
        run = (
            Run.objects.for_tenant(tenant_id)
            .select_for_update()
            .select_related("agent", "intent")
            .get(pk=run_id)
        )
        if run.step_count != seen_steps or run.status not in Run.STEPPING:
            return False  # another worker applied this step, or the run was stopped meanwhile
        run.step_count += 1
        run.input_tokens += reply.input_tokens
        run.output_tokens += reply.output_tokens
        run.cost += reply.cost
        _append(
            run,
            role=Message.Role.ASSISTANT,
            content=content,
            tool_calls=[c.as_dict() for c in reply.tool_calls],
            step=run.step_count,
            model=reply.model,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            cost=reply.cost,
        )
        if reply.tool_calls:
            run.status = _run_tools(run, reply, offered, early)
        else:
            _final_answer(run, content)
        if run.status == Run.Status.RUNNING:
            _enqueue_step(run)
        run.save(
            update_fields=[
                "step_count",
                "input_tokens",
                "output_tokens",
                "cost",
                "status",
                "output",
                "output_data",
                "updated_at",
            ]
        )
        _publish_run(run)
        if run.status in Run.ENDED:
            _ended(run)
    return True


def _final_answer(run: Run, content: str) -> None:
    """End the run ``done`` with ``content``, or, when it misses the output schema, ask again."""
    if run.output_schema is None:
        run.status, run.output = Run.Status.DONE, content
        return
    try:
        data = _parse_json(content)
        host_operations.validate_arguments(schema=run.output_schema, arguments=data)
    except (ValueError, tools.ToolError) as exc:
        problem = _problem(exc)
        _append(
            run,
            role=Message.Role.USER,
            content=(
                f"Your final answer must be JSON that meets the output schema, and it does not: {problem}. "
                "Answer again with the JSON alone."
            ),
            step=run.step_count,
        )
        run.status = Run.Status.RUNNING
        return
    run.status, run.output, run.output_data = Run.Status.DONE, content, data


def _run_tools(
    run: Run, reply: ModelReply, offered: dict[str, tools.Tool], early: dict[str, tools.Outcome]
) -> str:
    """Record every tool call of one model message, in order; return the run's next status."""
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
                outcome = _execute(run, call.id, call.name, *prepared)
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
            _append_result(run, call.id, call.name, outcome.text)
    if suspended:
        return Run.Status.NEEDS_INPUT
    return Run.Status.WAITING if deferred else Run.Status.RUNNING


def _parse_json(text: str) -> Any:
    """JSON as the model wrote it, refusing what JSON or Postgres cannot hold (``NaN``, numbers
    too large, deep nesting, NUL): :func:`parley.strict_json.loads`. Raises ``ValueError``."""
    return strict_json.loads(text)


def _problem(exc: Exception) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


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


def _execute(run: Run, call_id: str, name: str, tool: tools.Tool, arguments: dict[str, Any]) -> tools.Outcome:
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


# Tool results that arrive later: deferred calls, answers and approvals.


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
        call = _pending_calls(run).get(tool_call_id)
        if call is None:
            return
        _append_result(run, tool_call_id, call["name"], result)
        _resume_if_ready(run)


def _resume_if_ready(run: Run) -> None:
    """Set a locked, waiting run's status from its pending calls: running when none is left."""
    pending = _pending_calls(run)
    asking = (
        Question.objects.for_tenant(run.tenant_id)
        .filter(run=run, tool_call_id__in=pending, answered_at=None)
        .exists()
    )
    status = Run.Status.RUNNING if not pending else Run.Status.NEEDS_INPUT if asking else Run.Status.WAITING
    if status == Run.Status.RUNNING:
        _enqueue_step(run)
    if status != run.status:
        run.status = status
        run.save(update_fields=["status", "updated_at"])
        _publish_run(run)


@dataclass(frozen=True)
class Answered:
    """A question as answered, and what was understood of the answer as it was given (None where
    nothing reads it before the agent's model: :func:`agents.selectors.answer_understood`)."""

    question: Question
    understood: selectors.Understood | None


def question_answer(*, question: Question, answer: str, user: User | None) -> Answered:
    """Record the party's answer as the suspended tool call's result and resume the run.

    ``user`` None is the host answering through its API. Returns the question
    and what was understood of the answer, read under the question's lock
    before the run goes on (:func:`agents.selectors.answer_understood`). Raises
    :class:`NotAllowed` unless ``user`` may answer for the agent (see
    :func:`agents.selectors.can_answer_for`), :class:`QuestionAlreadyAnswered`
    when it was answered before (nothing changes) and :class:`RunError` for an
    empty answer, an approval (see :func:`approval_decide`) or a run that
    stopped (cancelled runs take no answers).
    """
    if user is not None:
        _check_may_answer(question, user)
    if not answer.strip():
        raise RunError("The answer is empty.", field="answer")
    with transaction.atomic():
        question = _lock_open(question, Question.Kind.QUESTION)
        question.answer, question.answered_by, question.answered_at = answer.strip(), user, timezone.now()
        understood = selectors.answer_understood(question=question, answer=question.answer)
        question.save(update_fields=["answer", "answered_by", "answered_at", "updated_at"])
        tool_call_complete(run=question.run, tool_call_id=question.tool_call_id, result=question.answer)
        _publish_answered(question)
    return Answered(question, understood)


def approval_decide(*, question: Question, approve: bool, reason: str = "", user: User | None) -> Question:
    """Approve or reject a ``requires_approval`` tool call, once.

    Approving runs the tool with the arguments the model gave (in a worker);
    rejecting gives the model ``rejected: <reason>`` as the call's result.
    ``user`` None is the host acting through its API. Raises
    :class:`NotAllowed`, :class:`QuestionAlreadyAnswered` (decided before;
    nothing changes) and :class:`RunError` (not an approval, or the run
    stopped).
    """
    if user is not None:
        _check_may_answer(question, user)
    reason = reason.strip()
    with transaction.atomic():
        question = _lock_open(question, Question.Kind.APPROVAL)
        question.approved, question.answer = approve, reason
        question.answered_by, question.answered_at = user, timezone.now()
        question.save(update_fields=["approved", "answer", "answered_by", "answered_at", "updated_at"])
        run = Run.objects.for_tenant(question.tenant_id).select_for_update().get(pk=question.run_id)
        if approve:
            _resume_if_ready(run)
            _enqueue_approved(question)
        else:
            tool_call_complete(
                run=run, tool_call_id=question.tool_call_id, result=f"rejected: {reason or 'no reason given'}"
            )
        _publish_answered(question)
    return question


def approved_tool_run(*, question_id: Any, tenant_id: int) -> None:
    """Run an approved tool call with its original arguments and record the result.

    Does nothing when the run stopped, the call already has its result, or a
    tool that runs in a transaction already ran (``Question.tool_run_at``): a
    task delivered twice, or sent again by the sweep. A tool the agent no
    longer offers, or one that asks the party (asking needs no approval), gets
    an error result. Host operations run outside any transaction; the others
    under the run's lock, so a cancel cannot slip in between the check and the
    call.
    """
    question = (
        Question.objects.for_tenant(tenant_id)
        .select_related("run__agent", "run__intent")
        .filter(pk=question_id, kind=Question.Kind.APPROVAL, approved=True)
        .first()
    )
    if question is None:
        return
    run, name, call_id = question.run, question.tool_name, question.tool_call_id
    tool = tools.tools_for(run.agent).get(name)
    if tool is not None and tool.outside_transaction:
        if _waits_on(run, call_id):
            _record_approved(run, call_id, name, _execute(run, call_id, name, tool, question.arguments))
        return
    with transaction.atomic():
        run = (
            Run.objects.for_tenant(tenant_id)
            .select_for_update()
            .select_related("agent", "intent")
            .get(pk=run.pk)
        )
        if not _waits_on(run, call_id):
            return
        # Claimed in the transaction that runs it: a tool that defers its result (a delegate, a
        # negotiation) leaves its call waiting, and must not start twice.
        unclaimed = Question.objects.for_tenant(tenant_id).filter(pk=question.pk, tool_run_at=None)
        if not unclaimed.update(tool_run_at=timezone.now()):
            return
        if tool is None:
            outcome: tools.Outcome = tools.Result(f"Error: {name} is no longer offered; do without it.")
        else:
            outcome = _execute(run, call_id, name, tool, question.arguments)
        _record_approved(run, call_id, name, outcome)


def _waits_on(run: Run, call_id: str) -> bool:
    """Whether the run still waits for the result of call ``call_id``."""
    return run.status in Run.AWAITING and call_id in _pending_calls(run)


def _record_approved(run: Run, call_id: str, name: str, outcome: tools.Outcome) -> None:
    """Record what an approved tool call came to; a deferred one reports later by itself."""
    if isinstance(outcome, tools.Suspend):
        outcome = tools.Result(f"Error: {name} asks the party itself; it cannot also wait for an approval.")
    if isinstance(outcome, tools.Result):
        tool_call_complete(run=run, tool_call_id=call_id, result=outcome.text)


def require_may_act(user: User, agent_id: Any, tenant_id: int, *, doing: str) -> None:
    """Raise :class:`NotAllowed` unless ``user`` may act for the agent (see
    :func:`agents.selectors.can_answer_for`); ``doing`` ends the message ("answer its questions")."""
    membership = Membership.objects.filter(user=user, tenant_id=tenant_id).first()
    agent = Agent.objects.for_tenant(tenant_id).get(pk=agent_id)
    if membership is None or not selectors.can_answer_for(membership=membership, agent=agent):
        raise NotAllowed(f"Only the agent's party, an owner or an operator can {doing}.")


def require_may_start(*, agent: Agent, user: User) -> None:
    """Raise :class:`NotAllowed` unless ``user`` may start ``agent``'s runs: as for answering its
    questions, the agent's party, or an owner or operator of its tenant."""
    require_may_act(user, agent.pk, agent.tenant_id, doing="start its runs")


def _check_may_answer(question: Question, user: User) -> None:
    run = Run.objects.for_tenant(question.tenant_id).only("agent_id").get(pk=question.run_id)
    require_may_act(user, run.agent_id, question.tenant_id, doing="answer its questions")


def _lock_open(question: Question, kind: str) -> Question:
    """The question, locked, checked open, of ``kind``, on a run that still takes answers."""
    question = (
        Question.objects.for_tenant(question.tenant_id)
        .select_for_update()
        .select_related("run")
        .get(pk=question.pk)
    )
    if question.kind != kind:
        if question.kind == Question.Kind.APPROVAL:
            raise RunError("This is an approval; approve or reject it.")
        raise RunError("This is a question; answer it.")
    if not question.is_open:
        raise QuestionAlreadyAnswered(question)
    if question.run.status not in Run.AWAITING:
        raise RunError(f"The run is {question.run.status}; it no longer takes answers.")
    return question


def _decided(kind: str) -> str:
    return "decided" if kind == Question.Kind.APPROVAL else "answered"


def _publish_answered(question: Question) -> None:
    publish_on_commit(
        event="question.answered",
        tenant_id=question.tenant_id,
        party_id=question.run.agent.principal_id,
        payload={"question": str(question.pk), "run": str(question.run_id), "kind": question.kind},
    )


# Ending runs.


def run_cancel(*, run: Run, user: User | None) -> Run:
    """Cancel an active run: it takes no step, answer or tool result again.

    An in-flight model call stops at its next look at the run (within
    :data:`CANCEL_POLL_SECONDS`), the runs it delegated to are cancelled, and
    its negotiations stop (the cancel hooks). ``user`` None is the host acting
    through its API. Raises :class:`NotAllowed` for a member who may not act
    for the agent and :class:`RunError` for a run that already ended.
    """
    if user is not None:
        require_may_act(user, run.agent_id, run.tenant_id, doing="cancel its runs")
    who = f"by {user.get_username()}" if user is not None else "by the host"
    with transaction.atomic():
        locked = Run.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.pk)
        if locked.status in Run.ENDED:
            raise RunError(f"The run already ended ({locked.status}).")
        _end(locked, Run.Status.CANCELLED, f"Cancelled {who}.")
    return locked


def runs_expire_due() -> int:
    """End every run whose deadline has passed and that has not ended; how many were due.

    The periodic sweep (Celery beat, ``CELERY_BEAT_SCHEDULE``) that ends runs
    waiting on the party, a tool or their queue: a stepping run meets its
    deadline at its next step anyway. It reads across tenants, as the one
    system task that must; each run is ended within its own tenant.
    """
    due = list(
        Run.across_tenants.filter(deadline__lte=timezone.now())
        .exclude(status__in=Run.ENDED)
        .values_list("pk", "tenant_id")
    )
    for run_id, tenant_id in due:
        run_expire(run_id=run_id, tenant_id=tenant_id)
    return len(due)


def run_expire(*, run_id: Any, tenant_id: int) -> None:
    """End a run whose deadline passed while it waited (on the party, a tool, or its queue)."""
    with transaction.atomic():
        run = Run.objects.for_tenant(tenant_id).select_for_update().filter(pk=run_id).first()
        if run is None or run.status in Run.ENDED or run.deadline is None or timezone.now() < run.deadline:
            return
        _end(run, Run.Status.FAILED, f"The deadline ({run.deadline:%Y-%m-%d %H:%M %Z}) passed.")


def _finish(run: Run, status: str, reason: str, *, spent: ModelReply | None = None) -> None:
    """End a stepping run with ``status`` and ``reason``; a run stopped meanwhile keeps its end.

    ``spent`` is a model reply the run paid for but will not use: its usage still counts.
    """
    with transaction.atomic():
        locked = Run.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.pk)
        if spent is not None:
            locked.input_tokens += spent.input_tokens
            locked.output_tokens += spent.output_tokens
            locked.cost += spent.cost
            locked.save(update_fields=["input_tokens", "output_tokens", "cost", "updated_at"])
        if locked.status in Run.STEPPING:
            _end(locked, status, reason)


def _end(run: Run, status: str, reason: str) -> None:
    """Write the end of a locked run and everything that follows from it."""
    run.status, run.end_reason = status, reason
    run.save(update_fields=["status", "end_reason", "updated_at"])
    _publish_run(run)
    _ended(run)


def _ended(run: Run) -> None:
    """What follows a run's end, in its transaction: ``run.finished`` is published, its delegates
    are cancelled, its negotiations stop, its caller will get its result, and the next run pending
    on its thread starts."""
    publish_on_commit(
        event="run.finished",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={
            "run": str(run.pk),
            "agent": str(run.agent_id),
            "intent": str(run.intent_id),
            "status": run.status,
            "endReason": run.end_reason,
            "output": run.output,
            "outputData": run.output_data,
            "usage": {
                "inputTokens": run.input_tokens,
                "outputTokens": run.output_tokens,
                "cost": str(run.cost),
            },
        },
    )
    for child in (
        Run.objects.for_tenant(run.tenant_id)
        .select_for_update()
        .filter(parent=run, status__in=(*Run.ACTIVE, Run.Status.PENDING))
    ):
        _end(child, Run.Status.CANCELLED, "Cancelled with the run that called it.")
    if run.status == Run.Status.CANCELLED:
        for hook in tools.cancel_hooks():
            hook(run)
    if run.parent_id is not None:
        _enqueue_delegate_return(run)
    _start_next(tenant_id=run.tenant_id, intent_id=run.intent_id)
    transaction.on_commit(
        partial(
            telemetry.record_run_span,
            run_id=run.pk,
            tenant_id=run.tenant_id,
            agent_id=run.agent_id,
            agent_name=run.agent.name,
            intent_id=run.intent_id,
            started_at=run.created_at,
            ended_at=timezone.now(),
            status=run.status,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            error=run.end_reason if run.status == Run.Status.FAILED else None,
        )
    )


def delegate_return(*, run_id: Any, tenant_id: int) -> None:
    """Give an ended delegate run's result to the run that called it as a tool.

    Its own transaction, after the delegate's end commits: locks are taken
    caller first everywhere else, so the delegate's end must not take its
    caller's. The result is the delegate's output when it ended ``done``, else
    what ended it. A caller that stopped, or has the result, drops it.
    """
    run = Run.objects.for_tenant(tenant_id).select_related("agent").filter(pk=run_id).first()
    if run is None or run.parent_id is None or run.status not in Run.ENDED:
        return
    if run.status == Run.Status.DONE:
        result = run.output
    else:
        result = f"{run.agent.name} ended {run.status}: {run.end_reason}"
    parent = Run.objects.for_tenant(tenant_id).get(pk=run.parent_id)
    tool_call_complete(run=parent, tool_call_id=run.parent_tool_call_id, result=result)


def _start_next(*, tenant_id: int, intent_id: Any) -> None:
    """Start the oldest pending run of the thread ``intent_id`` once none is active."""
    Intent.objects.for_tenant(tenant_id).select_for_update().get(pk=intent_id)
    runs = Run.objects.for_tenant(tenant_id).filter(intent_id=intent_id)
    if runs.filter(status__in=Run.ACTIVE).exists():
        return
    pending = runs.filter(status=Run.Status.PENDING).order_by("created_at").first()
    if pending is not None:
        pending.status = Run.Status.QUEUED
        pending.save(update_fields=["status", "updated_at"])
        _begin(pending)
        _publish_run(pending)


# Work whose broker message was lost.


@dataclass(frozen=True)
class Stalled:
    """What the agent loop's sweep found waiting on a broker message that never came.

    Each list holds at most :data:`parley.celery.SWEEP_BATCH` entries, those
    stalled longest first; ids are strings, as the tasks take them:

    * ``steps`` — ``(run id, tenant id, step)``: a run ``queued`` or
      ``running`` that has not taken step ``step`` (its ``step_count`` + 1);
    * ``approvals`` — ``(question id, tenant id)``: an approved tool call that
      has neither run nor a result, on a run that waits on it;
    * ``returns`` — ``(delegate run id, tenant id)``: a delegate that ended while
      the run that called it still waits on its call;
    * ``pending`` — ``(intent id, tenant id)``: a thread with a run ``pending``
      behind none that is active.
    """

    steps: list[tuple[str, int, int]]
    approvals: list[tuple[str, int]]
    returns: list[tuple[str, int]]
    pending: list[tuple[str, int]]

    def __len__(self) -> int:
        return len(self.steps) + len(self.approvals) + len(self.returns) + len(self.pending)


def stalled_work(*, before: datetime) -> Stalled:
    """The agent loop's work that should be moving and has not moved since ``before``, across tenants.

    "Moved" is the row's ``updated_at``: a run writes its row at every step and
    status change, a question when it is decided, a delegate when it ends. A
    step or an approved tool in flight writes nothing until it ends, so
    ``before`` must be further back than a task's time limit (``run_step``:
    330 s) for work in flight never to be taken for lost. A run waiting on its
    party (``needs_input``), on a negotiation or on a delegate still working is
    not stalled; neither is an ended run, save a delegate whose caller still
    waits on it.

    The runs and questions returned are locked (``FOR UPDATE SKIP LOCKED``): call
    it in a transaction, and a sweep running at the same time skips them.
    """
    runs = Run.across_tenants.filter(updated_at__lt=before).select_for_update(skip_locked=True, of=("self",))
    steps = runs.filter(status__in=Run.STEPPING).order_by("updated_at")
    result_of = Message.across_tenants.filter(role=Message.Role.TOOL)
    approvals = (
        Question.across_tenants.filter(
            kind=Question.Kind.APPROVAL,
            approved=True,
            tool_run_at=None,
            updated_at__lt=before,
            run__status__in=Run.AWAITING,
        )
        .exclude(Exists(result_of.filter(run=OuterRef("run"), tool_call_id=OuterRef("tool_call_id"))))
        .select_for_update(skip_locked=True, of=("self",))
        .order_by("updated_at")
    )
    returns = (
        runs.filter(parent__isnull=False, status__in=Run.ENDED, parent__status__in=Run.AWAITING)
        .exclude(
            Exists(result_of.filter(run=OuterRef("parent"), tool_call_id=OuterRef("parent_tool_call_id")))
        )
        .order_by("updated_at")
    )
    # Not locked: starting one locks its intent first (see _start_next), which re-reads it.
    pending = (
        Run.across_tenants.filter(status=Run.Status.PENDING, updated_at__lt=before)
        .exclude(Exists(Run.across_tenants.filter(intent=OuterRef("intent"), status__in=Run.ACTIVE)))
        .order_by("intent_id")
        .values_list("intent_id", "tenant_id")
        .distinct()
    )
    return Stalled(
        steps=[
            (str(pk), tenant, count + 1)
            for pk, tenant, count in steps.values_list("pk", "tenant_id", "step_count")[:SWEEP_BATCH]
        ],
        approvals=[
            (str(pk), tenant) for pk, tenant in approvals.values_list("pk", "tenant_id")[:SWEEP_BATCH]
        ],
        returns=[(str(pk), tenant) for pk, tenant in returns.values_list("pk", "tenant_id")[:SWEEP_BATCH]],
        pending=[(str(pk), tenant) for pk, tenant in pending[:SWEEP_BATCH]],
    )


def stalled_work_resend() -> Stalled:
    """Send again the agent loop's work whose message was lost (a Redis restart or flush): the
    periodic sweep (Celery beat, every ``SWEEP_INTERVAL`` seconds).

    Finds :func:`stalled_work` not moved for ``SWEEP_STALLED_AFTER`` seconds,
    sends each its task again — a step, an approved tool, a delegate's return —
    and stamps its ``updated_at``, so the next sweep waits another bound before
    sending it again; a thread's pending run is started here. Every task it sends
    does nothing when the work turns out to be done (:func:`run_step` is for
    one step, :func:`approved_tool_run` and :func:`delegate_return` check the
    call still waits). A broker still down refuses the first of each kind and the
    rest are not tried; nothing unsent is stamped, so the next sweep tries them
    again. Returns what it found.
    """
    from agents.tasks import approved_tool_run as approved_tool_run_task
    from agents.tasks import delegate_return as delegate_return_task
    from agents.tasks import run_step as run_step_task

    now = timezone.now()
    with transaction.atomic():
        found = stalled_work(before=now - timedelta(seconds=settings.SWEEP_STALLED_AFTER))
        runs = enqueue_each(run_step_task, found.steps) + enqueue_each(delegate_return_task, found.returns)
        questions = enqueue_each(approved_tool_run_task, found.approvals)
        Run.across_tenants.filter(pk__in=runs).update(updated_at=now)
        Question.across_tenants.filter(pk__in=questions).update(updated_at=now)
    for intent_id, tenant_id in found.pending:
        with transaction.atomic():
            _start_next(tenant_id=tenant_id, intent_id=intent_id)
    if found:
        logger.warning(
            "the sweep found %d steps, %d approved tools and %d delegates' results whose message was "
            "lost, and sent %d of them again; it started %d threads' pending runs",
            len(found.steps),
            len(found.approvals),
            len(found.returns),
            len(runs) + len(questions),
            len(found.pending),
        )
    return found


# The thread.


def _pending_calls(run: Run) -> dict[str, dict[str, str]]:
    """Tool calls of the run's last assistant message that have no result yet, by id."""
    last = run.messages.filter(role=Message.Role.ASSISTANT).order_by("-seq").first()
    if last is None or not last.tool_calls:
        return {}
    answered = set(
        run.messages.filter(role=Message.Role.TOOL, seq__gt=last.seq).values_list("tool_call_id", flat=True)
    )
    return {c["id"]: c for c in last.tool_calls if c["id"] not in answered}


def chat_history(run: Run) -> list[ChatMessage]:
    """The thread's messages in chat-completions form, tool results in the order of their calls.

    Results of one model message arrive in any order (a deferred call ends
    after a quick one); the model sees them in the order it made the calls.
    """
    chat: list[ChatMessage] = []
    order: dict[str, int] = {}
    results: list[ChatMessage] = []
    for m in Message.objects.for_tenant(run.tenant_id).filter(intent_id=run.intent_id).order_by("seq"):
        if m.role == Message.Role.TOOL:
            results.append({"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id})
            continue
        chat.extend(sorted(results, key=lambda r: order.get(r["tool_call_id"], len(order))))
        results = []
        entry: ChatMessage = {"role": m.role, "content": m.content}
        if m.tool_calls:
            order = {c["id"]: i for i, c in enumerate(m.tool_calls)}
            entry["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in m.tool_calls
            ]
        chat.append(entry)
    chat.extend(sorted(results, key=lambda r: order.get(r["tool_call_id"], len(order))))
    return chat


def _chat_messages(run: Run) -> list[ChatMessage]:
    """What the model gets: the system message and the thread's history, under the agent's history
    policy, with its input guardrails applied to the system message and to what the party and
    tools wrote.

    Raises :class:`guardrails.GuardrailTripped` when an input guardrail blocks.
    """
    agent = run.agent
    thread = chat_history(run)
    if agent.history == Agent.History.WINDOW:
        thread = history.window(thread, agent.history_window)
    for entry in thread:
        if entry["role"] in ("user", "tool") and entry["content"]:
            entry["content"] = guardrails.check(agent.guardrails, stage="input", text=entry["content"])
    # The system message carries the party's intent and what counterparties said in negotiations.
    system = guardrails.check(
        agent.guardrails, stage="input", text=system_message(agent=agent, intent=run.intent)
    )
    return [{"role": "system", "content": system}, *thread]


def _append(
    run: Run,
    *,
    role: str,
    content: str,
    step: int,
    tool_calls: list[dict[str, str]] | None = None,
    tool_call_id: str = "",
    name: str = "",
    **usage: Any,
) -> Message:
    """Append to the thread; callers hold the run's row lock, so ``seq`` cannot collide."""
    last = (
        Message.objects.for_tenant(run.tenant_id).filter(intent_id=run.intent_id).aggregate(m=Max("seq"))["m"]
        or 0
    )
    return Message.objects.create(
        tenant_id=run.tenant_id,
        intent_id=run.intent_id,
        run=run,
        seq=last + 1,
        step=step,
        role=role,
        content=content,
        tool_calls=tool_calls or [],
        tool_call_id=tool_call_id,
        name=name,
        **usage,
    )


def _append_result(run: Run, call_id: str, name: str, text: str) -> None:
    _append(run, role=Message.Role.TOOL, content=text, tool_call_id=call_id, name=name, step=run.step_count)


def _enqueue_step(run: Run) -> None:
    """Take the run's next step in a worker once this commits; the message names that step."""
    from agents.tasks import run_step as run_step_task

    enqueue_on_commit(run_step_task, str(run.pk), run.tenant_id, run.step_count + 1)


def _enqueue_delegate_return(run: Run) -> None:
    from agents.tasks import delegate_return as delegate_return_task

    enqueue_on_commit(delegate_return_task, str(run.pk), run.tenant_id)


def _enqueue_approved(question: Question) -> None:
    from agents.tasks import approved_tool_run as approved_tool_run_task

    enqueue_on_commit(approved_tool_run_task, str(question.pk), question.tenant_id)


def _publish_run(run: Run) -> None:
    publish_on_commit(
        event="run.updated",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={"run": str(run.pk), "status": run.status},
    )
