"""Questions and approvals: the party answers a question a tool asked, or decides on a
``requires_approval`` call, which then runs in a worker (:func:`approved_tool_run`); who may
answer, and answering once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agents import selectors, tools
from agents.models import Question, Run
from agents.services import runs, threads, tool_calls
from parley.celery import enqueue_on_commit
from parley.live import publish_on_commit


class QuestionAlreadyAnswered(runs.RunError):
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
    :class:`runs.NotAllowed` unless ``user`` may answer for the agent (see
    :func:`agents.selectors.can_answer_for`), :class:`QuestionAlreadyAnswered`
    when it was answered before (nothing changes) and :class:`runs.RunError` for an
    empty answer, an approval (see :func:`approval_decide`) or a run that
    stopped (cancelled runs take no answers).
    """
    if user is not None:
        _check_may_answer(question, user)
    if not answer.strip():
        raise runs.RunError("The answer is empty.", field="answer")
    with transaction.atomic():
        question = _lock_open(question, Question.Kind.QUESTION)
        question.answer, question.answered_by, question.answered_at = answer.strip(), user, timezone.now()
        understood = selectors.answer_understood(question=question, answer=question.answer)
        question.save(update_fields=["answer", "answered_by", "answered_at", "updated_at"])
        tool_calls.tool_call_complete(
            run=question.run, tool_call_id=question.tool_call_id, result=question.answer
        )
        _publish_answered(question)
    return Answered(question, understood)


def approval_decide(*, question: Question, approve: bool, reason: str = "", user: User | None) -> Question:
    """Approve or reject a ``requires_approval`` tool call, once.

    Approving runs the tool with the arguments the model gave (in a worker);
    rejecting gives the model ``rejected: <reason>`` as the call's result.
    ``user`` None is the host acting through its API. Raises
    :class:`runs.NotAllowed`, :class:`QuestionAlreadyAnswered` (decided before;
    nothing changes) and :class:`runs.RunError` (not an approval, or the run
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
            tool_calls.resume_if_ready(run)
            _enqueue_approved(question)
        else:
            tool_calls.tool_call_complete(
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
            _record_approved(
                run, call_id, name, tool_calls.execute(run, call_id, name, tool, question.arguments)
            )
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
            outcome = tool_calls.execute(run, call_id, name, tool, question.arguments)
        _record_approved(run, call_id, name, outcome)


def _waits_on(run: Run, call_id: str) -> bool:
    """Whether the run still waits for the result of call ``call_id``."""
    return run.status in Run.AWAITING and call_id in threads.pending_calls(run)


def _record_approved(run: Run, call_id: str, name: str, outcome: tools.Outcome) -> None:
    """Record what an approved tool call came to; a deferred one reports later by itself."""
    if isinstance(outcome, tools.Suspend):
        outcome = tools.Result(f"Error: {name} asks the party itself; it cannot also wait for an approval.")
    if isinstance(outcome, tools.Result):
        tool_calls.tool_call_complete(run=run, tool_call_id=call_id, result=outcome.text)


def _check_may_answer(question: Question, user: User) -> None:
    run = Run.objects.for_tenant(question.tenant_id).only("agent_id").get(pk=question.run_id)
    runs.require_may_act(user, run.agent_id, question.tenant_id, doing="answer its questions")


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
            raise runs.RunError("This is an approval; approve or reject it.")
        raise runs.RunError("This is a question; answer it.")
    if not question.is_open:
        raise QuestionAlreadyAnswered(question)
    if question.run.status not in Run.AWAITING:
        raise runs.RunError(f"The run is {question.run.status}; it no longer takes answers.")
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


def _enqueue_approved(question: Question) -> None:
    from agents.tasks import approved_tool_run as approved_tool_run_task

    enqueue_on_commit(approved_tool_run_task, str(question.pk), question.tenant_id)
