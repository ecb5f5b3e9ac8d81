"""Agent Exchange on the recipient's side: its profile, preparing a request, executing it.

The gateway (:mod:`a2a_gateway.app`, :mod:`a2a_gateway.executor`) calls these with the agent
it resolved and the caller it authenticated; the rules are here. docs/agent-exchange.md is the
profile these implement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.configuration import is_unique_violation
from agents.models import Agent
from agents.services import runs
from exchange import delegation, wire
from exchange.models import ExchangeProfile, MandateUse, PreparedExchange

HTTP_BAD_REQUEST = 400
HTTP_UNAUTHORIZED = 401
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
UNAUTHENTICATED = "Agent Exchange needs an authenticated caller: present this agent's key."
EXPIRED = "The request has expired."


class ExchangeRefused(Exception):
    """A request this agent does not take; ``status`` is the HTTP status the preparation endpoint
    answers with and the message says what was wrong, naming no protected value."""

    def __init__(self, message: str, *, status: int = HTTP_BAD_REQUEST) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where a call reached the agent: ``url``, the A2A URL its card there names (which a request's
    ``recipient`` must be), and ``audience``, what a token's ``aud`` must be when the profile
    names none (the agent's A2A URL under ``PUBLIC_BASE_URL``)."""

    url: str
    audience: str


# --- The profile ------------------------------------------------------------------------------------


def profile_of(agent: Agent) -> ExchangeProfile | None:
    """``agent``'s Agent Exchange profile, or None when it takes no Agent Exchange requests."""
    return ExchangeProfile.objects.for_tenant(agent.tenant_id).filter(agent=agent).first()


def profile_save(*, agent: Agent, values: dict[str, Any]) -> ExchangeProfile:
    """Create or change ``agent``'s profile with ``values`` (field names: ``mode``, ``issuer``,
    ``audience``, ``scope``, ``jwks``; the others keep theirs or the defaults).

    Raises ``django.core.exceptions.ValidationError`` keyed by field, nothing written, for a value
    the profile cannot work with (a ``jwks`` that is no key set of public asymmetric keys among them).
    """
    with transaction.atomic():
        profile = ExchangeProfile.objects.for_tenant(agent.tenant_id).select_for_update().filter(
            agent=agent
        ).first() or ExchangeProfile(tenant_id=agent.tenant_id, agent=agent)
        for name, value in values.items():
            setattr(profile, name, value)
        profile.full_clean(validate_unique=False)
        try:
            delegation.check_jwks(profile.jwks)
        except ValidationError as exc:
            raise ValidationError({"jwks": exc.messages}) from None
        profile.save()
        return profile


def profile_delete(*, agent: Agent) -> None:
    """Stop ``agent`` taking Agent Exchange requests (prepared ones stay, but cannot be executed)."""
    ExchangeProfile.objects.for_tenant(agent.tenant_id).filter(agent=agent).delete()


# --- Preparation ------------------------------------------------------------------------------------


def prepare(*, agent: Agent, caller: str, authenticated: bool, body: Any, endpoint: Endpoint) -> str:
    """Store the complete request in ``body`` (``{"request": {...}}``) for ``caller`` and return its
    reference (:func:`exchange.wire.reference_of`).

    Raises :class:`ExchangeRefused`: 404 when the agent takes no Agent Exchange; 401 for an
    anonymous caller; 400 for a body or request the profile does not allow, a request naming
    another recipient, one already expired, or a delegation token that does not verify; 409 for an
    ``exchangeId`` already prepared with this agent (a replay).
    """
    profile = _profile_or_refuse(agent)
    if not authenticated:
        raise ExchangeRefused(
            UNAUTHENTICATED,
            status=HTTP_UNAUTHORIZED,
        )
    if not isinstance(body, dict) or set(body) != {"request"}:
        raise ExchangeRefused('The body must be a JSON object with one member, "request".')
    request = body["request"]
    try:
        reference = wire.reference_of(request)
    except wire.WireError as exc:
        raise ExchangeRefused(str(exc)) from None
    if request["recipient"] != endpoint.url:
        raise ExchangeRefused(
            f"request.recipient: names {request['recipient']!r}, not this agent ({endpoint.url})."
        )
    if request["expiresAt"] <= time.time():
        raise ExchangeRefused("request.expiresAt: the request has already expired.")
    _verify(profile, request, endpoint)
    try:
        with transaction.atomic():
            PreparedExchange.objects.create(
                tenant_id=agent.tenant_id,
                agent=agent,
                caller=caller,
                exchange_id=request["exchangeId"],
                reference=reference,
                request=request,
                expires_at=datetime.fromtimestamp(request["expiresAt"], tz=UTC),
            )
    except IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        raise ExchangeRefused(
            "request.exchangeId: a request with this exchangeId was already prepared (a replay).",
            status=HTTP_CONFLICT,
        ) from None
    return reference


# --- Execution --------------------------------------------------------------------------------------


def execute(*, agent: Agent, caller: str, reference: str, endpoint: Endpoint) -> dict[str, Any]:
    """Run the request ``caller`` prepared under ``reference`` and return its receipt.

    The request is resolved from what was stored, under ``caller`` only; its delegation and
    mandate are verified and the mandate's use counted, then a run of ``agent`` starts on a new
    intent (``purpose``) with ``instruction`` as its task — ``protected`` never reaches the
    model — and the stored request is deleted, all in one transaction. A reference already
    executed gives its receipt again and starts nothing.

    Raises :class:`ExchangeRefused` naming why (no such reference for this caller, expired, a
    delegation or mandate that does not hold, a mandate used up, a run that cannot start). A
    refusal of a stored request is final: the request is deleted, and the same refusal answers
    the reference from then on.
    """
    profile = _profile_or_refuse(agent)
    prepared_id = None
    try:
        with transaction.atomic():
            prepared = (
                PreparedExchange.objects.for_tenant(agent.tenant_id)
                .select_for_update()
                .filter(agent=agent, reference=reference, caller=caller)
                .first()
            )
            if prepared is None:
                raise ExchangeRefused(
                    "No request was prepared under this reference for you.", status=HTTP_NOT_FOUND
                )
            if prepared.executed_at is not None:
                return dict(prepared.receipt or {})
            if prepared.refusal:
                raise ExchangeRefused(prepared.refusal)
            prepared_id = prepared.pk
            return _run(agent, profile, prepared, endpoint)
    except ExchangeRefused as refusal:
        if prepared_id is not None:
            _refuse(agent.tenant_id, prepared_id, refusal.message)
        raise


def prepared_expire() -> int:
    """Delete the requests whose time ran out before they ran (keeping the rows, refused), so that
    no token or protected value outlives its request; returns how many. Run by beat."""
    return (
        PreparedExchange.across_tenants.filter(executed_at=None, refusal="", expires_at__lte=timezone.now())
        .exclude(request=None)
        .update(request=None, refusal=EXPIRED, updated_at=timezone.now())
    )


def _run(
    agent: Agent, profile: ExchangeProfile, prepared: PreparedExchange, endpoint: Endpoint
) -> dict[str, Any]:
    """Verify the stored ``prepared`` request, start its run and record the receipt (in the caller's
    transaction, the row locked)."""
    request = prepared.request or {}
    if prepared.expires_at <= timezone.now():
        raise ExchangeRefused(EXPIRED)
    mandate = _verify(profile, request, endpoint)
    receipt: dict[str, Any] = {
        "exchangeId": prepared.exchange_id,
        "reference": prepared.reference,
        "status": "submitted",
        "completedAt": int(time.time() * 1000),
        "processingMode": wire.PROCESSING_MODE,
        "modelObservedSecret": False,
    }
    if mandate is not None:
        receipt.update(mandateId=mandate.mandate_id, usesRemaining=_use(agent, mandate))
    try:
        run = runs.run_start(agent=agent, statement=request["purpose"], task=request["instruction"])
    except runs.RunError as exc:
        raise ExchangeRefused(f"The request could not be run: {exc}") from None
    wire.check_receipt(receipt)
    prepared.request = None
    prepared.executed_at = timezone.now()
    prepared.run = run
    prepared.receipt = receipt
    prepared.save(update_fields=["request", "executed_at", "run", "receipt", "updated_at"])
    return receipt


def _refuse(tenant_id: int, prepared_id: int, reason: str) -> None:
    """Refuse the stored request ``prepared_id`` of tenant ``tenant_id`` for good: delete the request,
    keep ``reason``."""
    PreparedExchange.objects.for_tenant(tenant_id).filter(pk=prepared_id, executed_at=None).update(
        request=None, refusal=reason, updated_at=timezone.now()
    )


def _profile_or_refuse(agent: Agent) -> ExchangeProfile:
    profile = profile_of(agent)
    if profile is None:
        raise ExchangeRefused("This agent does not take Agent Exchange requests.", status=HTTP_NOT_FOUND)
    return profile


def _verify(
    profile: ExchangeProfile, request: dict[str, Any], endpoint: Endpoint
) -> delegation.Mandate | None:
    """The request's delegation token and mandate (if any), verified; the verified mandate."""
    # Without an audience of its own, a token may name the A2A URL the caller reached or the agent's
    # own: both are this agent (a card on the agent's host name names the first).
    audience = [profile.audience] if profile.audience else sorted({endpoint.url, endpoint.audience})
    keys: dict[str, Any] = {"jwks": profile.jwks, "issuer": profile.issuer, "audience": audience}
    try:
        granted = delegation.verify_token(request["delegation"]["accessToken"], scope=profile.scope, **keys)
        if "mandate" not in request:
            return None
        return delegation.verify_mandate(request["mandate"], subject=granted.subject, **keys)
    except delegation.DelegationError as exc:
        raise ExchangeRefused(str(exc), status=HTTP_UNAUTHORIZED) from None


def _use(agent: Agent, mandate: delegation.Mandate) -> int:
    """Count one use of ``mandate`` with ``agent`` and return the uses left; refuse when none are."""
    MandateUse.objects.get_or_create(tenant_id=agent.tenant_id, agent=agent, mandate_id=mandate.mandate_id)
    use = (
        MandateUse.objects.for_tenant(agent.tenant_id)
        .select_for_update()
        .get(agent=agent, mandate_id=mandate.mandate_id)
    )
    if use.uses >= mandate.max_uses:
        raise ExchangeRefused(f"The mandate's {mandate.max_uses} uses are spent.", status=HTTP_UNAUTHORIZED)
    use.uses += 1
    use.save(update_fields=["uses", "updated_at"])
    return mandate.max_uses - use.uses
