"""Writes of the agent loop: start a run, take a step, complete a tool call, answer a question.

Every step is written in one transaction before the next is enqueued, so a
worker that dies mid-run loses at most the step in flight, and a step taken
twice is applied once (the run's ``step_count`` is checked under its row lock).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agents import selectors, tools
from agents.instructions import system_message
from agents.llm import ChatMessage, ModelError, ModelReply, model_for
from agents.models import Agent, Intent, Message, Question, Run
from parley.live import publish_on_commit
from parley.models import Membership

logger = logging.getLogger(__name__)


class RunError(Exception):
    """A request about a run that cannot be carried out; the message says why."""


class QuestionAlreadyAnswered(RunError):
    pass


class NotAllowed(RunError):
    """The user may not do this for this agent."""


def run_start(*, agent: Agent, intent: Intent, task: str) -> Run:
    """Start a run of ``agent`` on ``intent`` with the party's ``task`` as the user message.

    Raises :class:`RunError` when the task is empty, the intent belongs to
    another agent, or a run of this thread is still active (two runs never
    interleave one history).
    """
    if not task.strip():
        raise RunError("The task is empty.")
    if intent.agent_id != agent.pk or intent.tenant_id != agent.tenant_id:
        raise RunError("That intent belongs to another agent.")
    with transaction.atomic():
        Intent.objects.for_tenant(agent.tenant_id).select_for_update().get(pk=intent.pk)
        active = Run.objects.for_tenant(agent.tenant_id).filter(intent=intent, status__in=Run.ACTIVE).first()
        if active is not None:
            raise RunError(
                f"Run {active.pk} of this intent is still {active.status}; wait for it or cancel it."
            )
        run = Run.objects.create(tenant_id=agent.tenant_id, agent=agent, intent=intent)
        _append(run, role=Message.Role.USER, content=task.strip(), step=0)
        _enqueue_step(run)
        _publish_run(run)
    return run


def run_step(*, run_id: Any, tenant_id: int) -> None:
    """Take one step of the run: ask the model, run the tools it called, record it all.

    Quietly does nothing when the run is gone, no longer runnable, or waiting
    on a tool call. The model is called outside any transaction.
    """
    run = Run.objects.for_tenant(tenant_id).select_related("agent", "intent").filter(pk=run_id).first()
    # A run is queued or running only once no tool call waits; a duplicate delivery of a step
    # is caught under the run's lock in _apply_step.
    if run is None or run.status not in (Run.Status.QUEUED, Run.Status.RUNNING):
        return
    agent = run.agent
    if run.step_count >= agent.max_steps:
        _finish(run, Run.Status.MAX_STEPS, reason=f"Stopped after {agent.max_steps} steps.")
        return
    offered = tools.tools_for(agent)
    try:
        reply = model_for(agent).complete(
            messages=_chat_messages(run), tools=[t.spec for t in offered.values()]
        )
    except ModelError as exc:
        _finish(run, Run.Status.FAILED, reason=str(exc))
        return
    _apply_step(run_id=run.pk, tenant_id=tenant_id, seen_steps=run.step_count, reply=reply, offered=offered)


def _apply_step(
    *,
    run_id: Any,
    tenant_id: int,
    seen_steps: int,
    reply: ModelReply,
    offered: dict[str, tools.Tool],
) -> None:
    with transaction.atomic():
        run = Run.objects.for_tenant(tenant_id).select_for_update().select_related("agent").get(pk=run_id)
        if run.step_count != seen_steps or run.status not in (
            Run.Status.QUEUED,
            Run.Status.RUNNING,
        ):
            return  # another worker applied this step, or the run was stopped meanwhile
        run.step_count += 1
        run.input_tokens += reply.input_tokens
        run.output_tokens += reply.output_tokens
        _append(
            run,
            role=Message.Role.ASSISTANT,
            content=reply.content,
            tool_calls=[c.as_dict() for c in reply.tool_calls],
            step=run.step_count,
        )
        if not reply.tool_calls:
            run.status, run.output = Run.Status.DONE, reply.content
        else:
            run.status = _run_tools(run, reply, offered)
            if run.status == Run.Status.RUNNING:
                _enqueue_step(run)
        run.save(
            update_fields=[
                "step_count",
                "input_tokens",
                "output_tokens",
                "status",
                "output",
                "updated_at",
            ]
        )
        _publish_run(run)


def _run_tools(run: Run, reply: ModelReply, offered: dict[str, tools.Tool]) -> str:
    """Run every tool call of one model message, in order; return the run's next status."""
    suspended = deferred = False
    for call in reply.tool_calls:
        outcome = _call_tool(run, call.id, call.name, call.arguments, offered, suspended)
        if isinstance(outcome, tools.Suspend):
            suspended = True
            question = Question.objects.create(
                tenant_id=run.tenant_id,
                run=run,
                tool_call_id=call.id,
                question=outcome.question,
                options=outcome.options,
            )
            publish_on_commit(
                event="question.opened",
                tenant_id=run.tenant_id,
                payload={"question": str(question.pk), "run": str(run.pk)},
            )
        elif isinstance(outcome, tools.Defer):
            deferred = True
        else:
            _append(
                run,
                role=Message.Role.TOOL,
                content=outcome.text,
                tool_call_id=call.id,
                name=call.name,
                step=run.step_count,
            )
    if suspended:
        return Run.Status.NEEDS_INPUT
    return Run.Status.WAITING if deferred else Run.Status.RUNNING


def _call_tool(
    run: Run,
    call_id: str,
    name: str,
    raw_arguments: str,
    offered: dict[str, tools.Tool],
    suspended: bool,
) -> tools.Outcome:
    """One tool call; every failure becomes the call's result for the model, never the run's end."""
    tool = offered.get(name)
    if tool is None:
        return tools.Result(f"Error: unknown tool {name!r}; the tools offered are {', '.join(offered)}.")
    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        return tools.Result(f"Error: the arguments of {name} are not valid JSON ({exc.msg}).")
    if not isinstance(arguments, dict):
        return tools.Result(f"Error: the arguments of {name} must be a JSON object.")
    try:
        with transaction.atomic():
            outcome = tool.handler(tools.ToolContext(run=run, tool_call_id=call_id), arguments)
    except tools.ToolError as exc:
        return tools.Result(f"Error: {exc}")
    except Exception:
        # DESIGN.md §5: a tool that raises becomes its call's result, never the end of the run.
        # The savepoint above has undone whatever it wrote.
        logger.exception("tool %s failed in run %s", name, run.pk)
        return tools.Result(f"Error: {name} failed unexpectedly; try again or do without it.")
    if isinstance(outcome, tools.Suspend) and suspended:
        return tools.Result("Error: only one question at a time; ask again after this one is answered.")
    return outcome


def tool_call_complete(*, run: Run, tool_call_id: str, result: str) -> None:
    """Record the result of a deferred or suspended tool call and resume the run when none is left.

    Safe to call inside an open transaction; the next step is enqueued after
    it commits. A result already recorded for the call is left as it is.
    """
    with transaction.atomic():
        run = Run.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.pk)
        if run.status not in (Run.Status.WAITING, Run.Status.NEEDS_INPUT):
            return
        pending = _pending_calls(run)
        call = pending.get(tool_call_id)
        if call is None:
            return
        _append(
            run,
            role=Message.Role.TOOL,
            content=result,
            tool_call_id=tool_call_id,
            name=call["name"],
            step=run.step_count,
        )
        del pending[tool_call_id]
        asking = (
            Question.objects.for_tenant(run.tenant_id)
            .filter(run=run, tool_call_id__in=pending, answered_at=None)
            .exists()
        )
        status = (
            Run.Status.RUNNING if not pending else Run.Status.NEEDS_INPUT if asking else Run.Status.WAITING
        )
        if status == Run.Status.RUNNING:
            _enqueue_step(run)
        if status != run.status:
            run.status = status
            run.save(update_fields=["status", "updated_at"])
            _publish_run(run)


def question_answer(*, question: Question, answer: str, user: User) -> Question:
    """Record the party's answer as the suspended tool call's result and resume the run.

    Raises :class:`NotAllowed` unless ``user`` may answer for the agent (see
    :func:`agents.selectors.can_answer_for`), :class:`QuestionAlreadyAnswered`
    when it was answered before (nothing changes) and :class:`RunError` for an
    empty answer or a run that stopped.
    """
    membership = Membership.objects.filter(user=user, tenant_id=question.tenant_id).first()
    agent = Agent.objects.for_tenant(question.tenant_id).get(runs__questions=question)
    if membership is None or not selectors.can_answer_for(membership=membership, agent=agent):
        raise NotAllowed("Only the agent's party, an owner or an operator can answer its questions.")
    if not answer.strip():
        raise RunError("The answer is empty.")
    with transaction.atomic():
        question = (
            Question.objects.for_tenant(question.tenant_id)
            .select_for_update()
            .select_related("run")
            .get(pk=question.pk)
        )
        if not question.is_open:
            raise QuestionAlreadyAnswered("This question was already answered.")
        if question.run.status not in (Run.Status.NEEDS_INPUT, Run.Status.WAITING):
            raise RunError(f"The run is {question.run.status}; it no longer takes answers.")
        question.answer, question.answered_by, question.answered_at = (
            answer.strip(),
            user,
            timezone.now(),
        )
        question.save(update_fields=["answer", "answered_by", "answered_at", "updated_at"])
        tool_call_complete(run=question.run, tool_call_id=question.tool_call_id, result=question.answer)
        publish_on_commit(
            event="question.answered",
            tenant_id=question.tenant_id,
            payload={"question": str(question.pk), "run": str(question.run_id)},
        )
    return question


def _finish(run: Run, status: str, *, reason: str) -> None:
    with transaction.atomic():
        locked = Run.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.pk)
        if locked.status not in (Run.Status.QUEUED, Run.Status.RUNNING):
            return
        locked.status, locked.end_reason = status, reason
        locked.save(update_fields=["status", "end_reason", "updated_at"])
        _publish_run(locked)


def _pending_calls(run: Run) -> dict[str, dict[str, str]]:
    """Tool calls of the run's last assistant message that have no result yet, by id."""
    last = run.messages.filter(role=Message.Role.ASSISTANT).order_by("-seq").first()
    if last is None or not last.tool_calls:
        return {}
    answered = set(
        run.messages.filter(role=Message.Role.TOOL, seq__gt=last.seq).values_list("tool_call_id", flat=True)
    )
    return {c["id"]: c for c in last.tool_calls if c["id"] not in answered}


def _chat_messages(run: Run) -> list[ChatMessage]:
    """The system message and the thread's history in chat-completions form."""
    chat: list[ChatMessage] = [
        {"role": "system", "content": system_message(agent=run.agent, intent=run.intent)}
    ]
    for m in Message.objects.for_tenant(run.tenant_id).filter(intent_id=run.intent_id).order_by("seq"):
        entry: ChatMessage = {"role": m.role, "content": m.content}
        if m.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in m.tool_calls
            ]
        if m.role == Message.Role.TOOL:
            entry["tool_call_id"] = m.tool_call_id
        chat.append(entry)
    return chat


def _append(
    run: Run,
    *,
    role: str,
    content: str,
    step: int,
    tool_calls: list[dict[str, str]] | None = None,
    tool_call_id: str = "",
    name: str = "",
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
    )


def _enqueue_step(run: Run) -> None:
    from agents.tasks import run_step as run_step_task

    run_id, tenant_id = str(run.pk), run.tenant_id
    transaction.on_commit(lambda: run_step_task.delay(run_id, tenant_id))


def _publish_run(run: Run) -> None:
    publish_on_commit(
        event="run.updated",
        tenant_id=run.tenant_id,
        payload={"run": str(run.pk), "status": run.status},
    )
