"""What every negotiation turn writes: the turn, the settlement, what deciding it cost, its evaluation.

Every turn and every settlement is published (and stored for webhooks) with the
transaction that writes it; the agent's evaluation hook, if it has one, is
asked about each turn after that transaction commits.

A settlement is final unless it is ``unanswered``: one side closed and the
other has not (yet) closed too. That exchange is still open, so it can be
answered and can take further turns; its settlement follows the record.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from django.db.models import F
from django.utils import timezone

from agents.models import Agent, Run
from agents.services import steps
from negotiations import evaluation, negotiator, selectors
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.verdict import settle
from negotiations.wire import Entry, TaskRecord
from parley.live import publish_on_commit

logger = logging.getLogger(__name__)


EVALUATION_ARTIFACT = "turn-evaluation"


def add_usage(negotiation: Negotiation, usage: negotiator.Usage) -> None:
    """Add ``usage`` to the totals of ``negotiation``, a row locked in the caller's transaction,
    which saves it."""
    negotiation.input_tokens += usage.input_tokens
    negotiation.output_tokens += usage.output_tokens
    negotiation.cost += usage.cost


def spend(negotiation: Negotiation, usage: negotiator.Usage, run: Run | None) -> None:
    """Count what deciding one outbound move cost: on the negotiation, and on the run it serves
    (its token and cost budget; the tenant's monthly budget adds runs' costs)."""
    if not (usage.input_tokens or usage.output_tokens or usage.cost):
        return
    Negotiation.objects.for_tenant(negotiation.tenant_id).filter(pk=negotiation.pk).update(
        input_tokens=F("input_tokens") + usage.input_tokens,
        output_tokens=F("output_tokens") + usage.output_tokens,
        cost=F("cost") + usage.cost,
    )
    if run is not None:
        steps.run_usage_add(
            run=run, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost=usage.cost
        )


def add_turn(
    negotiation: Negotiation,
    seq: int,
    entry: Entry,
    raw: dict[str, Any],
    *,
    our_role: Literal["user", "agent"],
    state: str,
    usage: negotiator.Usage | None = None,
) -> Turn:
    move = entry.move
    usage = usage or negotiator.Usage()
    turn = Turn.objects.create(
        tenant_id=negotiation.tenant_id,
        negotiation=negotiation,
        seq=seq,
        side=Turn.Side.OURS if entry.role == our_role else Turn.Side.THEIRS,
        action=move.action if move else "",
        message=move.message if move else entry.text,
        terms=move.terms if move else None,
        offer_id=move.offer_id if move else "",
        accepts_offer_id=move.accepts_offer_id if move else "",
        raw=raw,
        task_state=state,
        model=usage.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost=usage.cost,
    )
    # F() + 1, not the loaded count: a turn recorded concurrently is not lost. Read back, so a caller
    # saving the whole negotiation afterwards writes the count as it now stands.
    counted = Negotiation.objects.for_tenant(negotiation.tenant_id).filter(pk=negotiation.pk)
    counted.update(turns_recorded=F("turns_recorded") + 1)
    negotiation.turns_recorded = counted.values_list("turns_recorded", flat=True).get()
    publish_on_commit(
        event="negotiation.turn",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload={
            **event_head(negotiation),
            "seq": seq,
            "side": turn.side,
            "action": turn.action,
            "terms": turn.terms,
            "offerId": turn.offer_id,
            "acceptsOfferId": turn.accepts_offer_id,
            "taskState": state,
        },
    )
    return turn


def settlement_save(
    negotiation: Negotiation, record: TaskRecord, *, our_role: Literal["user", "agent"]
) -> Settlement | None:
    """Make the negotiation's settlement the verdict on ``record``; the caller saves the negotiation.

    Returns the settlement, or None while no side has closed. A settlement is
    one-to-one with its negotiation: a provisional (``unanswered``) one is
    updated to the next verdict, or deleted once the exchange goes on without
    one, as the seed reads the settlement off the Task each time. A settlement
    for good is never passed here: inbound moves meet :func:`inbound._refuse_if_closed`
    first, and only open negotiations are pumped. A verdict settles the
    negotiation, except that an ``unanswered`` one leaves it waiting when our
    reply was a question for the party.
    """
    verdict = settle(
        record, our_role=our_role, terminal_actions=negotiator.terminal_actions(negotiation.agent)
    )
    if verdict is None:
        Settlement.objects.for_tenant(negotiation.tenant_id).filter(negotiation=negotiation).delete()
        negotiation.settlement = None
        score_save(negotiation)
        return None
    settlement, _ = Settlement.objects.for_tenant(negotiation.tenant_id).update_or_create(
        negotiation=negotiation,
        defaults={
            "tenant_id": negotiation.tenant_id,
            "outcome": verdict.outcome,
            "basis": verdict.basis,
            "terms": verdict.terms,
            "reason": verdict.reason,
            "ended_by": verdict.ended_by,
            "disputed": verdict.disputed,
        },
    )
    negotiation.settlement = settlement
    score_save(negotiation)
    if (
        verdict.outcome != Settlement.Outcome.UNANSWERED.value
        or negotiation.status != Negotiation.Status.WAITING
    ):
        negotiation.status, negotiation.parked_question = Negotiation.Status.SETTLED, ""
    publish_on_commit(
        event="negotiation.settled",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload={
            **event_head(negotiation),
            "outcome": settlement.outcome,
            "basis": settlement.basis,
            "terms": settlement.terms,
            "reason": settlement.reason,
            "endedBy": settlement.ended_by,
        },
    )
    return settlement


def score_save(negotiation: Negotiation) -> None:
    """Store the surplus and share of ``negotiation``'s deal as its settlement now stands
    (:func:`negotiations.selectors.negotiation_score`, the one place a negotiation is scored): both
    None without a deal on a value. Written at once, whatever fields the caller saves afterwards,
    and set on ``negotiation`` so a whole save writes the same.

    The board orders by these (:func:`negotiations.selectors.board_sorted`); pages and the API show
    the score computed now by the same function, equal unless the agent's guards change after the deal.
    """
    score = selectors.negotiation_score(negotiation)
    negotiation.surplus, negotiation.share = score.surplus, score.share
    Negotiation.objects.for_tenant(negotiation.tenant_id).filter(pk=negotiation.pk).update(
        surplus=score.surplus, share=score.share
    )


def event_head(negotiation: Negotiation) -> dict[str, Any]:
    """What every negotiation event names: the negotiation, its agent and its direction."""
    return {
        "negotiation": str(negotiation.pk),
        "agent": str(negotiation.agent_id),
        "direction": negotiation.direction,
    }


def outcome_of(negotiation: Negotiation) -> str | None:
    """The outcome of the negotiation's settlement, None if it has none."""
    outcome: str | None = (
        Settlement.objects.for_tenant(negotiation.tenant_id)
        .filter(negotiation=negotiation)
        .values_list("outcome", flat=True)
        .first()
    )
    return outcome


def final_outcome(negotiation: Negotiation) -> str | None:
    """The outcome that settled the negotiation for good; None while it can go on (``unanswered``)."""
    outcome = outcome_of(negotiation)
    return None if outcome == Settlement.Outcome.UNANSWERED else outcome


def evaluate(agent: Agent, negotiation: Negotiation, turns: list[Turn]) -> list[dict[str, Any]]:
    """Ask ``agent``'s evaluation hook about each of ``turns``, in order, and store what it attaches.

    Call it outside any transaction, once the turns are committed: the hook is
    a remote call of up to :data:`evaluation.TIMEOUT` seconds and reads what we
    recorded. A failing hook is logged and leaves the turn's artifact null.
    Returns the artifacts as A2A artifacts ``{"artifactId", "name", "data"}``.
    """
    if not agent.evaluation_url:
        return []
    artifacts = []
    for turn in turns:
        request: evaluation.Request = {
            "negotiation": str(negotiation.pk),
            "agent": str(agent.pk),
            "direction": negotiation.direction,
            "turn": {
                "seq": turn.seq,
                "side": turn.side,
                "action": turn.action,
                "message": turn.message,
                "terms": turn.terms,
                "offerId": turn.offer_id,
                "acceptsOfferId": turn.accepts_offer_id,
            },
            "taskState": turn.task_state,
        }
        try:
            result = evaluation.evaluate(agent.evaluation_url, request)
        except evaluation.EvaluationError as exc:
            logger.warning("evaluating turn %s of negotiation %s: %s", turn.seq, negotiation.pk, exc)
            continue
        Turn.objects.for_tenant(turn.tenant_id).filter(pk=turn.pk).update(
            artifact=result.artifact, updated_at=timezone.now()
        )
        artifacts.append(
            {
                "artifactId": f"{EVALUATION_ARTIFACT}:{turn.seq}",
                "name": EVALUATION_ARTIFACT,
                "data": result.artifact,
            }
        )
    return artifacts
