"""Runs from start to end: intents, starting a run (its limits checked), who may act on it,
cancelling and expiring it, and what follows its end (delegates cancelled, the caller told, the
thread's next pending run started).

Also the errors of the agent loop's services (:class:`RunError` and its kinds) and the hand-off of
a run's work to workers after the commit (:func:`enqueue_step`) with its ``run.updated`` event.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agents import host_operations, selectors, tools
from agents.llm import ModelReply
from agents.models import Agent, Intent, Message, Run
from agents.services import threads
from parley import telemetry
from parley.celery import enqueue_on_commit
from parley.live import publish_on_commit
from parley.models import Membership

# Limits a run may set: what its columns hold, and a deadline a person may mean.
MAX_TOKEN_BUDGET = 2**31 - 1
MAX_DEADLINE = timedelta(days=10 * 365)


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


class NotAllowed(RunError):
    """The user may not do this for this agent."""


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
        return create_run(
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


def create_run(*, agent: Agent, intent: Intent, task: str, status: str, **fields: Any) -> Run:
    """Create the run; a ``queued`` one starts at once, a ``pending`` one when its thread is free."""
    run = Run.objects.create(
        tenant_id=agent.tenant_id, agent=agent, intent=intent, status=status, task=task.strip(), **fields
    )
    if status == Run.Status.QUEUED:
        _begin(run)
    publish_run(run)
    return run


def _begin(run: Run) -> None:
    """Put the run's task in its thread as the next user message, and enqueue its first step.

    Only here: a pending run's task must not enter the history of the run it waits behind.
    """
    threads.append(run, role=Message.Role.USER, content=run.task, step=0)
    enqueue_step(run)


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


def run_cancel(*, run: Run, user: User | None) -> Run:
    """Cancel an active run: it takes no step, answer or tool result again.

    An in-flight model call stops at its next look at the run (within
    :data:`steps.CANCEL_POLL_SECONDS`), the runs it delegated to are cancelled, and
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


def run_expire(*, run_id: Any, tenant_id: int) -> None:
    """End a run whose deadline passed while it waited (on the party, a tool, or its queue)."""
    with transaction.atomic():
        run = Run.objects.for_tenant(tenant_id).select_for_update().filter(pk=run_id).first()
        if run is None or run.status in Run.ENDED or run.deadline is None or timezone.now() < run.deadline:
            return
        _end(run, Run.Status.FAILED, f"The deadline ({run.deadline:%Y-%m-%d %H:%M %Z}) passed.")


def finish(run: Run, status: str, reason: str, *, spent: ModelReply | None = None) -> None:
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
    publish_run(run)
    ended(run)


def ended(run: Run) -> None:
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
    start_next(tenant_id=run.tenant_id, intent_id=run.intent_id)
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


def start_next(*, tenant_id: int, intent_id: Any) -> None:
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
        publish_run(pending)


def enqueue_step(run: Run) -> None:
    """Take the run's next step in a worker once this commits; the message names that step."""
    from agents.tasks import run_step as run_step_task

    enqueue_on_commit(run_step_task, str(run.pk), run.tenant_id, run.step_count + 1)


def _enqueue_delegate_return(run: Run) -> None:
    from agents.tasks import delegate_return as delegate_return_task

    enqueue_on_commit(delegate_return_task, str(run.pk), run.tenant_id)


def publish_run(run: Run) -> None:
    publish_on_commit(
        event="run.updated",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={"run": str(run.pk), "status": run.status},
    )
