"""One step of a run: the model asked (streamed live, stopped when the run is cancelled, within
the run's budget), its reply written with its tool calls' outcomes, and the run's next status.

Every step is written in one transaction before the next begins, so a worker that dies
mid-run loses at most the step in flight, and a step taken twice is applied once (the run's
``step_count`` is checked under its row lock, and one model reply per run step is a database
constraint). Each message names the step it is for, so a message that comes twice takes no
second step. A worker's task goes on to the run's next steps itself while the run keeps running,
for up to :data:`TASK_SECONDS`, reading the agent's tools, its model and the thread once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import guardrails, history, host_operations, tools
from agents.instructions import system_message
from agents.llm import (
    CallOptions,
    ChatMessage,
    ChatModel,
    ModelCancelled,
    ModelError,
    ModelReply,
    Retry,
    model_for,
)
from agents.models import Agent, Message, Run
from agents.services import runs, threads, tool_calls
from parley import strict_json, telemetry
from parley.live import publish_on_commit, push_transient

logger = logging.getLogger(__name__)

# Seconds between two looks at the run's status while its model call is in flight.
CANCEL_POLL_SECONDS = 0.5
# Tool call ids are the model's; longer ones, repeats and blanks are replaced by ids of ours.
MAX_CALL_ID = 64
# Seconds a worker's task goes on taking a run's steps itself (checked as each step is written): the
# next step follows without a trip through the broker while this lasts, then goes back to the queue,
# behind the other runs' steps. A step with a real model takes seconds, so this mostly joins fast ones.
TASK_SECONDS = 5.0


def run_step(*, run_id: Any, tenant_id: int, step: int | None = None, seconds: float = 0.0) -> None:
    """Take step ``step`` of the run: ask the model, run the tools it called, record it all; and
    for ``seconds``, the run's next steps.

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

    While the run is ``running`` after a step written less than ``seconds`` after
    this began, its next step is taken here rather than sent to a worker (the
    task passes :data:`TASK_SECONDS`; 0 takes the one step): each is still
    written in its own transaction, so a worker that dies loses at most the step
    in flight — no message names it, so the sweep sends it again — and nothing
    is applied twice. It stops at anything else: a question, a wait, an end.
    """
    run: Run | None = (
        Run.objects.for_tenant(tenant_id).select_related("agent", "intent").filter(pk=run_id).first()
    )
    if run is None or run.status not in Run.STEPPING:
        return
    if step is not None and step != run.step_count + 1:
        return
    task = _Task(hand_back_at=time.monotonic() + seconds)
    while run is not None:
        run = _one_step(run, task)


class _Task:
    """What the steps one task takes share: the agent's tools and model and the run's thread, read at
    the first step that needs them (an agent changed meanwhile applies from the next task); the system
    message, as the input guardrails passed it (``system``, None until built and once a step ran a
    tool that may change what it records, see :func:`_chat_messages`); and when the run's next step
    goes back to the queue (``hand_back_at``, ``time.monotonic()``)."""

    def __init__(self, *, hand_back_at: float) -> None:
        self.hand_back_at = hand_back_at
        self.system: str | None = None
        self._offered: dict[str, tools.Tool] | None = None
        self._model: ChatModel | None = None
        self._thread: threads.Thread | None = None

    def offered(self, agent: Agent) -> dict[str, tools.Tool]:
        if self._offered is None:
            self._offered = tools.tools_for(agent)
        return self._offered

    def model(self, agent: Agent) -> ChatModel:
        """:func:`agents.llm.model_for`; raises its :class:`ModelError`."""
        if self._model is None:
            self._model = model_for(agent)
        return self._model

    def thread(self, run: Run) -> threads.Thread:
        if self._thread is None:
            self._thread = threads.Thread(run)
        return self._thread


def _one_step(run: Run, task: _Task) -> Run | None:
    """Take the run's next step; the run, locked and written, when this task takes the next one too."""
    with (
        telemetry.log_context(run_id=str(run.pk), tenant_id=run.tenant_id),
        telemetry.run_step_span(
            run_id=run.pk,
            tenant_id=run.tenant_id,
            agent_id=run.agent_id,
            agent_name=run.agent.name,
            intent_id=run.intent_id,
            step=run.step_count + 1,
        ),
    ):
        try:
            return _take_step(run, task)
        except Exception as exc:
            # A step that cannot be written would fail the same way on every delivery, and a
            # run left stepping blocks its thread: end it, saying so.
            logger.exception("step %s of run %s failed", run.step_count + 1, run.pk)
            runs.finish(
                run,
                Run.Status.FAILED,
                f"Step {run.step_count + 1} failed unexpectedly ({type(exc).__name__}).",
            )
            return None


def _take_step(run: Run, task: _Task) -> Run | None:
    agent = run.agent
    limit = _limit_reached(run)
    if limit is not None:
        runs.finish(run, *limit)
        return None
    offered = task.offered(agent)
    thread = task.thread(run)
    try:
        messages = _chat_messages(run, thread, task)
    except guardrails.GuardrailTripped as exc:
        runs.finish(run, Run.Status.FAILED, str(exc))
        return None
    live = _LiveText(run)
    stored = None
    try:
        stored = _ask_model(run, messages, offered, live, task)
    finally:
        if stored is None:
            live.withdraw()  # streamed text of a reply that was not stored must not stay on the page
    return stored.run if stored is not None and stored.takes_next else None


@dataclass(frozen=True)
class _Stored:
    """A step written: the run as written, and whether this task takes its next step (else a worker
    does, or it has none)."""

    run: Run
    takes_next: bool


def _ask_model(
    run: Run, messages: list[ChatMessage], offered: dict[str, tools.Tool], live: _LiveText, task: _Task
) -> _Stored | None:
    """Call the model, run the tools it called and write the step; None when the reply was not stored."""
    agent = run.agent
    provider = "parley.offline" if agent.model == "offline" else "openai"
    try:
        with telemetry.model_call_span(model=agent.model, provider=provider) as call:
            reply = task.model(agent).complete(
                messages=messages, tools=[t.spec for t in offered.values()], options=_call_options(run, live)
            )
            call.record(reply.model, reply.input_tokens, reply.output_tokens)
    except ModelCancelled:
        return None  # the run was stopped meanwhile; whoever stopped it wrote its end
    except ModelError as exc:
        runs.finish(run, Run.Status.FAILED, str(exc))
        return None
    try:
        content = guardrails.check(agent.guardrails, stage="output", text=reply.content)
    except guardrails.GuardrailTripped as exc:
        runs.finish(run, Run.Status.FAILED, str(exc), spent=reply)
        return None
    thread = task.thread(run)
    reply = _with_unique_call_ids(run, reply, thread.call_ids(run))
    early = tool_calls.run_outside_transaction(run, reply, offered)
    if len(early) < len(reply.tool_calls):
        # A call run in the step's transaction (a built-in: negotiate, answer…) may change what the
        # system message records; host operations write nothing of ours.
        task.system = None
    return _apply_step(
        seen=run,
        reply=reply,
        content=content,
        offered=offered,
        early=early,
        thread=thread,
        hand_back_at=task.hand_back_at,
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


def _with_unique_call_ids(run: Run, reply: ModelReply, used: set[str]) -> ModelReply:
    """``reply`` with every tool call id unique in the run, non-empty and at most :data:`MAX_CALL_ID` long.

    Some servers number calls afresh in every message (``call_0``…) or repeat an
    id within one; results are matched to calls by id, so ids that are not
    unique are replaced by ids of ours (``call_<step>_<n>``), in the stored
    message and its results alike. ``used`` holds the ids of the run's earlier calls.
    """
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
    """A check, cheap to call often, of whether the run stopped stepping (cancelled, expired).

    Its first look is :data:`CANCEL_POLL_SECONDS` after the step read ``run``: a step that is
    over sooner asks nothing (its transaction checks the run's status anyway).
    """
    looked_at, stopped = time.monotonic(), False

    def stopped_now() -> bool:
        nonlocal looked_at, stopped
        if not stopped and time.monotonic() - looked_at >= CANCEL_POLL_SECONDS:
            looked_at = time.monotonic()
            status = Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).values_list("status", flat=True)
            stopped = status.first() not in Run.STEPPING
        return stopped

    return stopped_now


def _apply_step(
    *,
    seen: Run,
    reply: ModelReply,
    content: str,
    offered: dict[str, tools.Tool],
    early: dict[str, tools.Outcome],
    thread: threads.Thread,
    hand_back_at: float,
) -> _Stored | None:
    """Write the step in ``thread``: the reply, its tool calls' outcomes and the run's next status.

    ``seen`` is the run as the step read it; the run is read again under its row lock, with the
    same agent and intent. None when the step was not written here (another worker applied it, or
    the run stopped meanwhile).
    A run still ``running`` has its next step sent to a worker once this commits, unless it is
    written before ``hand_back_at`` (``time.monotonic()``): then this task takes that step.
    """
    with transaction.atomic():
        run = Run.objects.for_tenant(seen.tenant_id).select_for_update().get(pk=seen.pk)
        if run.step_count != seen.step_count or run.status not in Run.STEPPING:
            return None  # another worker applied this step, or the run was stopped meanwhile
        run.agent, run.intent = seen.agent, seen.intent
        run.step_count += 1
        run.input_tokens += reply.input_tokens
        run.output_tokens += reply.output_tokens
        run.cost += reply.cost
        thread.append(
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
            run.status = tool_calls.run_tools(run, reply, offered, early, thread)
        else:
            _final_answer(run, content, thread)
        thread.save()
        goes_on = run.status == Run.Status.RUNNING and time.monotonic() < hand_back_at
        if run.status == Run.Status.RUNNING and not goes_on:
            runs.enqueue_step(run)
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
        runs.publish_run(run)
        if run.status in Run.ENDED:
            runs.ended(run)
    return _Stored(run=run, takes_next=goes_on)


def _final_answer(run: Run, content: str, thread: threads.Thread) -> None:
    """End the run ``done`` with ``content``, or, when it misses the output schema, ask again."""
    if run.output_schema is None:
        run.status, run.output = Run.Status.DONE, content
        return
    try:
        data = _parse_json(content)
        host_operations.validate_arguments(schema=run.output_schema, arguments=data)
    except (ValueError, tools.ToolError) as exc:
        problem = _problem(exc)
        thread.append(
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


def _parse_json(text: str) -> Any:
    """JSON as the model wrote it, refusing what JSON or Postgres cannot hold (``NaN``, numbers
    too large, deep nesting, NUL): :func:`parley.strict_json.loads`. Raises ``ValueError``."""
    return strict_json.loads(text)


def _problem(exc: Exception) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


def _chat_messages(run: Run, thread: threads.Thread, task: _Task) -> list[ChatMessage]:
    """What the model gets: the system message and the ``thread``'s history, under the agent's
    history policy, with its input guardrails applied to the system message and to what the party
    and tools wrote.

    The system message is built once a task (``task.system``) and again after a step that ran a
    tool in its transaction; what else it records (negotiations moving on in other workers) is read
    as of the task's first step, as it is as of the step's start while a model call takes its time.

    Raises :class:`guardrails.GuardrailTripped` when an input guardrail blocks.
    """
    agent = run.agent
    chat = thread.chat()
    if agent.history == Agent.History.WINDOW:
        chat = history.window(chat, agent.history_window)
    for entry in chat:
        if entry["role"] in ("user", "tool") and entry["content"]:
            entry["content"] = guardrails.check(agent.guardrails, stage="input", text=entry["content"])
    if task.system is None:
        # The system message carries the party's intent and what counterparties said in negotiations.
        task.system = guardrails.check(
            agent.guardrails, stage="input", text=system_message(agent=agent, intent=run.intent)
        )
    return [{"role": "system", "content": task.system}, *chat]
