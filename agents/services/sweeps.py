"""The agent loop's periodic sweeps (Celery beat): runs past their deadline ended
(:func:`runs_expire_due`), and work whose broker message was lost sent again
(:func:`stalled_work_resend`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agents.models import Message, Question, Run
from agents.services import runs
from parley.celery import SWEEP_BATCH, enqueue_each

logger = logging.getLogger(__name__)


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
        runs.run_expire(run_id=run_id, tenant_id=tenant_id)
    return len(due)


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
    # Not locked: starting one locks its intent first (see runs.start_next), which re-reads it.
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
    does nothing when the work turns out to be done (:func:`steps.run_step` is for
    one step, :func:`questions.approved_tool_run` and :func:`delegation.delegate_return` check the
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
        run_ids = enqueue_each(run_step_task, found.steps) + enqueue_each(delegate_return_task, found.returns)
        questions = enqueue_each(approved_tool_run_task, found.approvals)
        Run.across_tenants.filter(pk__in=run_ids).update(updated_at=now)
        Question.across_tenants.filter(pk__in=questions).update(updated_at=now)
    for intent_id, tenant_id in found.pending:
        with transaction.atomic():
            runs.start_next(tenant_id=tenant_id, intent_id=intent_id)
    if found:
        logger.warning(
            "the sweep found %d steps, %d approved tools and %d delegates' results whose message was "
            "lost, and sent %d of them again; it started %d threads' pending runs",
            len(found.steps),
            len(found.approvals),
            len(found.returns),
            len(run_ids) + len(questions),
            len(found.pending),
        )
    return found
