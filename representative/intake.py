"""The intake tool's writes: a visitor's request stored for the agent's fixed recipient, then the
recipient told.

The fixed-recipient contract: a request's arguments are ``{summary, details}``
only — no recipient; the request goes to ``agent.intake_owner``, chosen by the
operator (:func:`intake_recipient`, :func:`intake_capture`). The row is written
first and committed; notifying the owner comes after, is best-effort and never
raises (:func:`intake_notify`). Logs carry ids only.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import get_connection, send_mail
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from parley import live
from parley.models import Membership
from representative.models import IntakeRequest

logger = logging.getLogger(__name__)

SUMMARY_CHARS = 200
DETAILS_CHARS = 8_000
# Seconds an e-mail to the intake owner may take to connect and send.
EMAIL_TIMEOUT = 5.0


class IntakeUnconfigured(Exception):
    """The agent has no intake owner who belongs to its tenant: requests cannot be taken in."""


def intake_recipient(agent: Agent) -> User | None:
    """``agent.intake_owner`` if set and a member of the agent's tenant; else None (unconfigured)."""
    if agent.intake_owner_id is None:
        return None
    member = Membership.objects.filter(user_id=agent.intake_owner_id, tenant_id=agent.tenant_id).exists()
    return agent.intake_owner if member else None


def intake_capture(*, agent: Agent, caller: str, summary: str, details: str) -> IntakeRequest:
    """Store a visitor's request for ``agent``'s fixed recipient, committed before anything else happens.

    ``summary`` is cut to :data:`SUMMARY_CHARS` characters, ``details`` to
    :data:`DETAILS_CHARS`; NUL characters (which Postgres cannot store) are
    dropped. The recipient is always :func:`intake_recipient` — there is no
    way to name another. The audit log line carries ids only.

    Raises:
        IntakeUnconfigured: the agent has no intake owner in its tenant; nothing is written, and an
            error naming the agent is logged for the operator.
    """
    recipient = intake_recipient(agent)
    if recipient is None:
        logger.error(
            "Intake refused: agent %s of tenant %s has no intake owner who is a member of the tenant; "
            "a visitor's request was turned away. Set the agent's intake owner.",
            agent.pk,
            agent.tenant_id,
        )
        raise IntakeUnconfigured(str(agent.pk))
    request = IntakeRequest.objects.create(
        tenant_id=agent.tenant_id,
        agent=agent,
        caller=caller[:500],
        summary=_clean(summary)[:SUMMARY_CHARS] or "(no summary)",
        details=_clean(details)[:DETAILS_CHARS],
        recipient=recipient,
    )
    logger.info(
        "Intake request %s taken in for agent %s of tenant %s, recipient user %s",
        request.pk,
        agent.pk,
        agent.tenant_id,
        recipient.pk,
    )
    return request


def intake_notify(*, request: IntakeRequest) -> None:
    """Tell the request's recipient, best-effort; never raises.

    Two channels: the live event ``intake.received`` (payload: ids only; it is
    stored for the tenant's webhooks and pushed to the dashboard, where the
    request is listed), and an e-mail to the recipient's address if they have
    one (Django's mail API, at most :data:`EMAIL_TIMEOUT` s). ``notified_at`` is
    set once a channel delivered; ``notify_error`` names each that failed by
    channel and exception class.
    """
    delivered, errors = False, []
    try:
        live.publish_on_commit(
            event="intake.received",
            tenant_id=request.tenant_id,
            party_id=request.agent.intake_owner_id,
            payload={"intake_request": request.pk, "agent": str(request.agent_id)},
        )
        delivered = True
    except Exception as exc:  # best-effort: the request is stored and listed whatever happens here
        errors.append(f"live event: {type(exc).__name__}")
    recipient = request.recipient
    email = getattr(recipient, "email", "") if recipient is not None else ""
    if email:
        try:
            _send_email(request, email)
            delivered = True
        except Exception as exc:  # best-effort, as above; the dashboard lists the request anyway
            errors.append(f"e-mail: {type(exc).__name__}")
    request.notified_at = timezone.now() if delivered else None
    request.notify_error = "; ".join(errors)[:500]
    try:
        request.save(update_fields=["notified_at", "notify_error", "updated_at"])
    except Exception:  # the request itself is committed; only the note of its notification is lost
        logger.warning("Intake request %s: could not record its notification", request.pk, exc_info=True)
    if errors:
        logger.warning(
            "Intake request %s: notifying its recipient failed (%s)", request.pk, request.notify_error
        )


def _send_email(request: IntakeRequest, address: str) -> None:
    agent = request.agent
    link = settings.PUBLIC_BASE_URL + reverse("representative:intake", kwargs={"tenant": agent.tenant.slug})
    body = (
        f"A visitor left a request with {agent.name}.\n\n"
        f"Summary: {request.summary}\n\n{request.details}\n\n"
        f"All requests: {link}\n"
    )
    send_mail(
        subject=f"New request for {agent.name}",
        message=body,
        from_email=None,
        recipient_list=[address],
        connection=get_connection(fail_silently=False, timeout=EMAIL_TIMEOUT),
    )


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()
