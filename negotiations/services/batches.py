"""Batches: the agent loop's ``negotiate`` and ``answer`` tools, and what each negotiation reports.

A tool call opens (:func:`batch_open`) or answers (:func:`batch_answer`) a
batch of negotiations and waits on it. Each negotiation's pump
(:mod:`negotiations.services.outbound`) reports its event to the batch
(:func:`report`); the batch's last report hands the digest to the waiting run.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import tools
from agents.models import Agent, Intent, Run
from agents.services import tool_calls
from negotiations import client, digest, selectors
from negotiations.models import Batch, Negotiation, Settlement, Turn
from negotiations.services import parking, recording
from parley.celery import enqueue_on_commit


def batch_open(*, run: Run, tool_call_id: str, targets: list[dict[str, str]]) -> tools.Outcome:
    """Open a negotiation per target ``{url, objective}`` and pump them all at once.

    The one-live rule (docs/design.md#one-live-negotiation): a target is skipped, with the
    reason, while the agent has a binding negotiation under the run's intent —
    an outbound one to the same URL, or any inbound one (see :func:`_binding`).
    Returns the digest at once when nothing was opened, else
    :class:`agents.tools.Defer`.
    """
    with transaction.atomic():
        # Every batch under this intent waits here for the one before to commit, so each
        # check below and its claim (the create) have nothing in between.
        Intent.objects.for_tenant(run.tenant_id).select_for_update().get(pk=run.intent_id)
        batch = Batch.objects.create(tenant_id=run.tenant_id, run=run, tool_call_id=tool_call_id)
        agent = run.agent
        for target in targets:
            url = client.canonical_url(target["url"])
            binding = selectors.binding(agent, run.intent_id)
            existing = (
                binding.filter(counterparty_url=url).first()
                or binding.filter(direction=Negotiation.Direction.INBOUND).first()
            )
            if existing is not None:
                batch.events.append(
                    {
                        "kind": "skipped",
                        "id": str(existing.pk),
                        "peer": existing.counterparty_name,
                        "url": url,
                        "reason": _still_binding(existing),
                    }
                )
                continue
            negotiation = Negotiation.objects.create(
                tenant_id=run.tenant_id,
                agent=agent,
                intent_id=run.intent_id,
                direction=Negotiation.Direction.OUTBOUND,
                counterparty_url=url,
                objective=target.get("objective", ""),
                max_turns=agent.max_turns,
                batch=batch,
            )
            _enqueue_pump(negotiation)
        batch.save(update_fields=["events", "updated_at"])
        return _deferred_or_digest(batch)


def _still_binding(existing: Negotiation) -> str:
    """Why ``existing`` keeps a new negotiation from opening, and what to do instead."""
    inbound = existing.direction == Negotiation.Direction.INBOUND
    which = "that another agent opened with you under this intent" if inbound else "with this counterparty"
    outcome = recording.outcome_of(existing)
    if outcome in Settlement.DEALS:
        return f"negotiation {existing.pk} {which} closed as {outcome}, and that deal stands; report it"
    state = outcome or existing.status
    return (
        f"negotiation {existing.pk} {which} is still binding ({state}); answer it instead of opening another"
    )


def batch_answer(*, run: Run, tool_call_id: str, ids: list[str], guidance: str) -> tools.Outcome:
    """Add ``guidance`` to each negotiation in ``ids`` as standing guidance and move them on.

    Outbound negotiations continue at once — an ``unanswered`` one too, whose
    settlement then follows the exchange; inbound ones keep the guidance for
    the counterparty's next message (event ``recorded``), one parked on the
    party answered as :func:`parking.negotiation_guidance_give` answers it. Unknown
    and finally settled ids are skipped with the reason, as are failed ones that
    reached nobody (no Task, no move stored) and an outbound one whose pump is
    still taking turns.
    """
    with transaction.atomic():
        batch = Batch.objects.create(tenant_id=run.tenant_id, run=run, tool_call_id=tool_call_id)
        for raw_id in dict.fromkeys(ids):
            event = _answer_one(run, batch, raw_id, guidance)
            if event is not None:
                batch.events.append(event)
        batch.save(update_fields=["events", "updated_at"])
        return _deferred_or_digest(batch)


def _answer_one(run: Run, batch: Batch, raw_id: str, guidance: str) -> dict[str, Any] | None:
    """Answer one negotiation of ``batch``: the event known now, or None when its pump will report."""
    found = _by_public_id(run.agent, raw_id)
    if found is None:
        return {"kind": "skipped", "id": raw_id, "reason": "no such negotiation of this agent"}
    negotiation = Negotiation.objects.for_tenant(run.tenant_id).select_for_update().get(pk=found.pk)
    reached_nobody = (
        negotiation.status == Negotiation.Status.FAILED
        and not negotiation.task_id
        and negotiation.outbound_move is None
    )
    if reached_nobody or recording.final_outcome(negotiation):
        return {
            **_who(negotiation),
            "kind": "skipped",
            "reason": f"already ended ({negotiation.task_state or negotiation.status}) — open a new "
            "negotiation if the terms need to change.",
        }
    outbound = negotiation.direction == Negotiation.Direction.OUTBOUND
    if outbound and negotiation.status == Negotiation.Status.OPEN:
        # Its pump is still taking turns; a second pump would send moves twice.
        return {
            **_who(negotiation),
            "kind": "skipped",
            "reason": "still in progress — its result comes with the call that started it",
        }
    if not outbound:
        parking.guidance_add(negotiation, guidance)
        return {**_who(negotiation), "kind": "recorded", "reason": "guidance kept for their next message"}
    parking.guidance_append(negotiation, guidance)
    # Waiting, out of turns, unanswered, or failed once a move may have reached them: it goes on (a
    # retry, which sends a stored move again or finds it on their Task).
    negotiation.status, negotiation.batch, negotiation.event = Negotiation.Status.OPEN, batch, None
    negotiation.error = ""
    negotiation.save(
        update_fields=[
            "guidance",
            "answers",
            "parked_question",
            "status",
            "batch",
            "event",
            "error",
            "updated_at",
        ]
    )
    _enqueue_pump(negotiation)
    return None


def _deferred_or_digest(batch: Batch) -> tools.Outcome:
    if batch.negotiations.exists():
        return tools.Defer()
    batch.reported_at = timezone.now()
    batch.save(update_fields=["reported_at", "updated_at"])
    return tools.Result(digest.render(batch.events))


def run_cancelled(run: Run) -> None:
    """Stop the negotiations ``run`` opened or answered that are still open or waiting on the party.

    The agent loop's cancel hook, called in the transaction that cancels the
    run. A pump in the middle of a turn records that turn (the counterparty
    has it) and stops there.
    """
    Negotiation.objects.for_tenant(run.tenant_id).filter(
        batch__run=run, status__in=(Negotiation.Status.OPEN, Negotiation.Status.WAITING)
    ).update(
        status=Negotiation.Status.FAILED, error="the run it served was cancelled", updated_at=timezone.now()
    )


def report(negotiation: Negotiation, event: dict[str, Any]) -> None:
    """Store ``event`` on the negotiation; the batch's last report completes its tool call."""
    if negotiation.batch_id is None:
        return
    with transaction.atomic():
        batch = (
            Batch.objects.for_tenant(negotiation.tenant_id)
            .select_for_update()
            .select_related("run")
            .get(pk=negotiation.batch_id)
        )
        Negotiation.objects.for_tenant(negotiation.tenant_id).filter(pk=negotiation.pk).update(event=event)
        if batch.reported_at is not None or batch.negotiations.filter(event__isnull=True).exists():
            return
        events = [*batch.events, *(n.event for n in batch.negotiations.order_by("created_at"))]
        batch.reported_at = timezone.now()
        batch.save(update_fields=["reported_at", "updated_at"])
        tool_calls.tool_call_complete(
            run=batch.run, tool_call_id=batch.tool_call_id, result=digest.render(events)
        )


def event_of(negotiation: Negotiation) -> dict[str, Any]:
    """The event the outbound ``negotiation``'s pump reports for the status its turns stopped in:
    ``settled`` (with the settlement), ``asking`` (waiting on the party: the question and their
    last move), ``budget`` (out of turns) or ``failed`` — once a move may have reached them (their
    Task exists, or our opening is stored unanswered), the error says how to retry
    (docs/design.md#one-live-negotiation)."""
    status = negotiation.status
    if status == Negotiation.Status.SETTLED:
        settlement = Settlement.objects.for_tenant(negotiation.tenant_id).get(negotiation=negotiation)
        return {
            **_who(negotiation),
            "kind": "settled",
            "state": negotiation.task_state,
            "settlement": _settlement_view(settlement),
        }
    if status == Negotiation.Status.WAITING:
        return {
            **_who(negotiation),
            "kind": "asking",
            "question": negotiation.parked_question,
            "last": _their_last(negotiation),
        }
    if status == Negotiation.Status.OUT_OF_TURNS:
        return {
            **_who(negotiation),
            "kind": "budget",
            "turns": negotiation.turn_count,
            "last": _their_last(negotiation),
        }
    # Once a move may have reached them: their Task, or our opening sent without an answer.
    reached = negotiation.task_id or negotiation.outbound_move is not None
    retry = " — the exchange stays with them; answer this id to try again" if reached else ""
    return {**_who(negotiation), "kind": "failed", "error": negotiation.error + retry}


def _by_public_id(agent: Agent, raw_id: str) -> Negotiation | None:
    try:
        pk = uuid.UUID(raw_id)
    except ValueError:
        return None
    return Negotiation.objects.for_tenant(agent.tenant_id).filter(agent=agent, pk=pk).first()


def _who(negotiation: Negotiation) -> dict[str, Any]:
    return {
        "id": str(negotiation.pk),
        "peer": negotiation.counterparty_name,
        "url": negotiation.counterparty_url,
    }


def _their_last(negotiation: Negotiation) -> dict[str, Any] | None:
    turn = negotiation.turns.filter(side=Turn.Side.THEIRS).order_by("-seq").first()
    return {"message": turn.message, "terms": turn.terms} if turn else None


def _settlement_view(settlement: Settlement) -> dict[str, Any]:
    return {
        "outcome": settlement.outcome,
        "basis": settlement.basis,
        "terms": settlement.terms,
        "reason": settlement.reason,
    }


def _enqueue_pump(negotiation: Negotiation) -> None:
    from negotiations.tasks import pump

    enqueue_on_commit(pump, str(negotiation.pk), negotiation.tenant_id)
