"""A negotiation parked on its party, and the party's answer.

A negotiator's ``ask`` is for the party the agent acts for, never the wire: the
negotiation waits on the party with the question (:func:`park`). The party's
answer becomes standing guidance — an inbound negotiation's through
:func:`negotiation_guidance_give`, an outbound one's through its run's
``answer`` tool (:mod:`negotiations.services.batches`) — and the hooks
registered with :func:`register_answered_hook` hear of each answered inbound
negotiation.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from agents.services import runs
from negotiations.models import Negotiation, Turn
from negotiations.services import recording
from parley.live import publish_on_commit


def park(negotiation: Negotiation, question: str) -> None:
    """Park ``negotiation`` (locked) on its party with ``question``; the caller saves it."""
    negotiation.status, negotiation.parked_question = Negotiation.Status.WAITING, question
    publish_on_commit(
        event="negotiation.waiting",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload=recording.event_head(negotiation),
    )


class GuidanceRefused(Exception):
    """An answer the negotiation does not take, nothing changed; ``code`` names why: ``outbound``
    (its run asks the party and answers it), ``not_waiting``, ``already_answered``."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


AnsweredHook = Callable[[Negotiation], None]
# Told of each inbound negotiation whose party has just answered, inside the transaction that records
# it: the A2A gateway sends the decided reply at once where the counterparty asked for push
# notifications, and nothing here imports the gateway (docs/design.md#layers).
_answered_hooks: list[AnsweredHook] = []


def register_answered_hook(hook: AnsweredHook) -> None:
    """Call ``hook(negotiation)`` whenever an inbound negotiation's party answers it. Idempotent."""
    if hook not in _answered_hooks:
        _answered_hooks.append(hook)


def negotiation_guidance_give(*, negotiation: Negotiation, answer: str, user: User | None) -> Negotiation:
    """Answer the question the inbound ``negotiation`` parked on: ``answer`` becomes standing guidance.

    The question is cleared and the negotiation open again: the counterparty's
    next message is answered with the guidance, and where they registered a
    push notification config on the Task, the reply is decided and sent at
    once (the registered hooks, after commit). ``user`` None is the host
    through its API. Returns the negotiation as saved.

    Raises :class:`agents.services.runs.NotAllowed` unless ``user`` may act for the
    agent (:func:`agents.services.runs.require_may_act`), ``ValidationError`` at
    ``answer`` for an empty one, and :class:`GuidanceRefused` for an outbound
    negotiation, one not waiting on its party, or one answered before whose
    reply has not gone out.
    """
    if user is not None:
        runs.require_may_act(
            user, negotiation.agent_id, negotiation.tenant_id, doing="answer its negotiations"
        )
    answer = answer.strip()
    if not answer:
        raise ValidationError({"answer": "The answer is empty."})
    with transaction.atomic():
        negotiation = (
            Negotiation.objects.for_tenant(negotiation.tenant_id)
            .select_for_update()
            .select_related("agent")
            .get(pk=negotiation.pk)
        )
        _refuse_unless_parked(negotiation)
        guidance_add(negotiation, answer)
    return negotiation


def _refuse_unless_parked(negotiation: Negotiation) -> None:
    """Raise :class:`GuidanceRefused` unless ``negotiation`` is inbound and waiting on its party."""
    if negotiation.direction == Negotiation.Direction.OUTBOUND:
        raise GuidanceRefused(
            "This negotiation is outbound: the run that opened it asks its party and answers it.",
            code="outbound",
        )
    if negotiation.status == Negotiation.Status.WAITING:
        return
    if holding_turn(negotiation) is not None:
        raise GuidanceRefused(
            "This negotiation's question was already answered; the answer goes out with the reply to "
            "their next message.",
            code="already_answered",
        )
    raise GuidanceRefused(
        f"This negotiation is not waiting on its party: it is {negotiation.get_status_display().lower()}.",
        code="not_waiting",
    )


def guidance_add(negotiation: Negotiation, guidance: str) -> None:
    """Add ``guidance`` to the inbound ``negotiation`` (locked) and save it; one parked on its party is
    open again, and the answered hooks and event hear of it."""
    answered = negotiation.status == Negotiation.Status.WAITING
    guidance_append(negotiation, guidance)
    if answered:
        negotiation.status = Negotiation.Status.OPEN
    negotiation.save(update_fields=["guidance", "answers", "parked_question", "status", "updated_at"])
    if not answered:
        return
    publish_on_commit(
        event="negotiation.answered",
        tenant_id=negotiation.tenant_id,
        party_id=negotiation.agent.principal_id,
        payload=recording.event_head(negotiation),
    )
    for hook in _answered_hooks:
        hook(negotiation)


def guidance_append(negotiation: Negotiation, guidance: str) -> None:
    """Add ``guidance`` to the locked ``negotiation``'s standing guidance; when it was parked on a
    question, the guidance is the party's answer to it (kept in ``answers``), and the question is
    cleared. The caller saves the negotiation."""
    negotiation.guidance = [*negotiation.guidance, guidance]
    if negotiation.parked_question:
        answer = {"question": negotiation.parked_question, "answer": guidance}
        negotiation.answers = [*negotiation.answers, answer]
    negotiation.parked_question = ""


def holding_turn(negotiation: Negotiation) -> Turn | None:
    """The holding reply that ends the open inbound ``negotiation``: its party answered and its reply
    is still to be decided. None otherwise."""
    if negotiation.status != Negotiation.Status.OPEN:
        return None
    last = negotiation.turns.order_by("-seq").first()
    return last if last is not None and last.side == Turn.Side.OURS and not last.action else None
