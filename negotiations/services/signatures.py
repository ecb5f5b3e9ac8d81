"""Settlements both sides sign: which move carries which signature, and what a settlement records.

The rule (docs/settlement-signatures.md): an A2A Task ends with the answering
side's terminal reply, after which it takes no message, so each side signs
in the last message it sends before the Task can close.

* The side that sends the requests (A2A role ``user``, our outbound side)
  signs every move it sends with terms and an offer id once the Task has an
  id, when the counterparty's card declares :data:`receipts.SETTLEMENT_EXTENSION`:
  an offer is signed as the settlement that stands if they accept it, an
  accept as the one that stands when they confirm it
  (:func:`outbound_signed`). Such a message lists the extension and the
  request activates it (the ``A2A-Extensions`` header).
* The answering side (``agent``, our inbound side) signs its reply when that
  reply closes the Task agreed and the request activated the extension
  (:func:`inbound_sealed`).

So each side's signature of the settlement is on its last message of the
Task, and both sides hold both. Once the settlement is written,
:func:`settlement_countersign` checks their signature against the key set
their card names and records ``countersigned`` or why not.

The key is the tenant's card-signing key, which the A2A edge owns: it registers
how to reach it (:func:`register_signing_keys`, docs/layers.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings

from agents import addresses
from agents.models import Agent
from negotiations import client, receipts
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.selectors import turns_record
from negotiations.verdict import verify_agreement
from negotiations.wire import Move, TaskRecord
from parley import outbound


@dataclass(frozen=True)
class SigningMaterial:
    """The key a tenant signs with: its ``kid``, its private half as PEM, and the URL of the key
    set that publishes its public half (the one the agent's card names)."""

    kid: str
    private_pem: str
    jwks: str


_signing_keys: list[Callable[[Agent], SigningMaterial | None]] = []


def register_signing_keys(source: Callable[[Agent], SigningMaterial | None]) -> None:
    """Sign settlements of an agent with ``source(agent)`` (None: its tenant has no key); a later
    registration replaces an earlier one. The A2A edge registers its card-signing key."""
    _signing_keys[:] = [source]


def signing_material(agent: Agent) -> SigningMaterial | None:
    """The key ``agent``'s settlements are signed with; None when its tenant has none or no app
    registered a source."""
    return _signing_keys[0](agent) if _signing_keys else None


def own_identity(agent: Agent) -> dict[str, str] | None:
    """``agent`` as its own card (served under ``PUBLIC_BASE_URL``) states it, or None when the card
    declares no settlement signatures (its tenant has no key)."""
    try:
        return receipts.identity_of_card(addresses.card_document(agent))
    except LookupError:
        return None


def signature_in(message: dict[str, Any]) -> dict[str, Any]:
    """The settlement signature an A2A JSON message carries in its metadata under the extension:
    ``{"signature": compact JWS, "card": the signer's A2A URL}``, or {} when it carries none."""
    found = (message.get("metadata") or {}).get(receipts.SETTLEMENT_EXTENSION)
    return found if isinstance(found, dict) else {}


def _with_signature(message: dict[str, Any], agent: Agent, jws: str) -> dict[str, Any]:
    """``message`` listing the extension and carrying ``jws`` in its metadata, with where our card is."""
    extensions = [*message.get("extensions", []), receipts.SETTLEMENT_EXTENSION]
    metadata = {
        **(message.get("metadata") or {}),
        receipts.SETTLEMENT_EXTENSION: {"signature": jws, "card": addresses.agent_url(agent)},
    }
    return {**message, "extensions": extensions, "metadata": metadata}


def _sign(agent: Agent, settlement: dict[str, Any]) -> str | None:
    material = signing_material(agent)
    if material is None:
        return None
    return receipts.sign(settlement, private_pem=material.private_pem, kid=material.kid, jku=material.jwks)


def outbound_signed(negotiation: Negotiation, move: Move, message: dict[str, Any]) -> dict[str, Any]:
    """``message`` (our outbound A2A JSON message carrying ``move``) signed as the settlement it
    would close on, or unchanged.

    Signed when the counterparty's card declares the extension
    (``negotiation.counterparty_identity``), the Task has an id (an opening move
    cannot name it), ``move`` carries terms and names an offer — the one it
    accepts, else its own — and our tenant has a key: the settlement
    ``agreed`` (``reference``) on those terms and that offer.
    """
    theirs = negotiation.counterparty_identity
    offer_id = move.accepts_offer_id or move.offer_id
    if theirs is None or not negotiation.task_id or move.terms is None or not offer_id:
        return message
    ours = own_identity(negotiation.agent)
    if ours is None:
        return message
    settlement = receipts.canonical_settlement(
        task_id=negotiation.task_id,
        context_id=negotiation.context_id,
        parties={"user": ours, "agent": theirs},
        terms=move.terms,
        offer_id=offer_id,
        verdict="agreed",
        basis="reference",
    )
    jws = _sign(negotiation.agent, settlement)
    return message if jws is None else _with_signature(message, negotiation.agent, jws)


def activated_in(message: dict[str, Any]) -> bool:
    """Whether the A2A JSON ``message`` lists the extension (with the request's ``A2A-Extensions``
    header, which the edge checks, that activates it)."""
    return receipts.SETTLEMENT_EXTENSION in message.get("extensions", [])


@dataclass(frozen=True)
class Sealed:
    """Our inbound reply as it goes out (signed or not) and the counterparty's identity as its card
    states it (None when they did not activate the extension or their card declares none)."""

    reply: dict[str, Any]
    identity: dict[str, str] | None


def inbound_sealed(
    agent: Agent,
    *,
    final: TaskRecord,
    ids: tuple[str, str],
    reply: dict[str, Any],
    incoming: dict[str, Any],
    activated: bool,
) -> Sealed:
    """Our ``reply`` (an A2A JSON message, the last entry of ``final``, the Task as it stands with
    it; ``ids`` are its task and context ids) signed when it closes the Task agreed and the
    counterparty activated the extension on ``incoming``, their message.

    Their identity is read from the card at the URL their signature names (a network call, made
    outside any transaction); the settlement signed is over it and ours. Nothing is signed when
    their card cannot be read or declares no settlement signatures, or our tenant has no key.
    """
    if not activated:
        return Sealed(reply, None)
    verdict = verify_agreement(final)
    card_url = signature_in(incoming).get("card")
    if verdict.status != "agreed" or not isinstance(card_url, str) or not card_url:
        return Sealed(reply, None)
    theirs = client.card_identity(card_url, timeout=settings.A2A_CARD_TIMEOUT)
    ours = own_identity(agent)
    if theirs is None or ours is None:
        return Sealed(reply, theirs)
    settlement = receipts.canonical_settlement(
        task_id=ids[0],
        context_id=ids[1],
        parties={"user": theirs, "agent": ours},
        terms=verdict.terms,
        offer_id=_accepted_offer(final),
        verdict=verdict.status,
        basis=verdict.basis,
    )
    jws = _sign(agent, settlement)
    return Sealed(reply if jws is None else _with_signature(reply, agent, jws), theirs)


def _accepted_offer(record: TaskRecord) -> str:
    """The offer the closing move of ``record`` accepts ("" when it names none)."""
    moves = [entry.move for entry in record.history if entry.move is not None]
    return moves[-1].accepts_offer_id if moves else ""


def settlement_countersign(negotiation: Negotiation) -> Settlement | None:
    """Check and record, on the negotiation's agreed settlement, whether both sides signed it.

    Call it once the settlement is committed, outside any transaction: it
    fetches the key set their card names. Our signature is on our last
    message of the Task, theirs on their last; the settlement both must sign is
    the canonical one (:func:`receipts.canonical_settlement`) of the Task as we
    recorded it. ``signature`` becomes ``countersigned``, or says why not:
    ``not_offered`` (their card declares no settlement signatures, or they did
    not activate the extension), ``unsigned`` (we signed nothing: our tenant has
    no key, or our last message went before the Task had an id), ``missing``
    (they signed nothing), ``differs`` (a signature covers other terms, another
    offer or other parties) or ``invalid`` (theirs does not
    hold with the key set their card names, or that cannot be fetched).
    Does nothing for a settlement that is not agreed; returns the settlement.
    """
    settlement = Settlement.objects.for_tenant(negotiation.tenant_id).filter(negotiation=negotiation).first()
    if settlement is None or settlement.outcome != Settlement.Outcome.AGREED:
        return settlement
    turns = list(
        Turn.objects.for_tenant(negotiation.tenant_id).filter(negotiation=negotiation).order_by("seq")
    )
    ours = next((signature_in(t.raw) for t in reversed(turns) if t.side == Turn.Side.OURS), {})
    theirs = next((signature_in(t.raw) for t in reversed(turns) if t.side == Turn.Side.THEIRS), {})
    our_jws, their_jws = str(ours.get("signature") or ""), str(theirs.get("signature") or "")
    status, reason, canonical = _check(negotiation, settlement, our_jws, their_jws)
    settlement.signature, settlement.signature_reason = status, reason
    settlement.signed_settlement = canonical
    settlement.our_signature, settlement.their_signature = our_jws, their_jws
    settlement.save(
        update_fields=[
            "signature",
            "signature_reason",
            "signed_settlement",
            "our_signature",
            "their_signature",
            "updated_at",
        ]
    )
    return settlement


def _check(
    negotiation: Negotiation, settlement: Settlement, our_jws: str, their_jws: str
) -> tuple[str, str, dict[str, Any] | None]:
    """(signature status, reason, canonical settlement) for :func:`settlement_countersign`."""
    S = Settlement.Signature
    theirs = negotiation.counterparty_identity
    if theirs is None:
        if negotiation.direction == Negotiation.Direction.OUTBOUND:
            why = "Their card declares no settlement signatures, so they sign none."
        else:
            why = "They did not activate the settlement-signature extension, so they sign none."
        return S.NOT_OFFERED, why, None
    ours = own_identity(negotiation.agent)
    material = signing_material(negotiation.agent)
    if ours is None or material is None:
        return S.UNSIGNED, "Our organisation has no signing key, so we signed nothing.", None
    if not our_jws:
        # Our last message went before the Task had an id (an opening offer they accepted at once).
        return (
            S.UNSIGNED,
            "Our last message was sent before the Task had an id, so it carries no signature.",
            None,
        )
    outbound_side = negotiation.direction == Negotiation.Direction.OUTBOUND
    record = turns_record(negotiation)
    canonical = receipts.canonical_settlement(
        task_id=negotiation.task_id,
        context_id=negotiation.context_id,
        parties={"user": ours, "agent": theirs} if outbound_side else {"user": theirs, "agent": ours},
        terms=settlement.terms,
        offer_id=_accepted_offer(record) if settlement.basis == Settlement.Basis.REFERENCE else "",
        verdict=settlement.outcome,
        basis=settlement.basis,
    )
    signed = receipts.payload_of(our_jws)
    if receipts.canonical_or_none(signed) != receipts.canonical_bytes(canonical):
        why = f"Our signature covers another settlement: {receipts.differences(signed, canonical)}."
        return S.DIFFERS, why, canonical
    if not their_jws:
        return S.MISSING, "They sent no signature of this settlement.", canonical
    try:
        their_key = receipts.verify(their_jws, canonical, jwks=theirs["jwks"], keys_for=key_set)
    except receipts.SettlementDiffers as exc:
        return S.DIFFERS, str(exc), canonical
    except receipts.ReceiptError as exc:
        return S.INVALID, str(exc), canonical
    if receipts.same_key(their_key, receipts.public_jwk(material.private_pem)):
        # A card naming our key set can hand back a signature of ours as theirs.
        return S.INVALID, "Their signature is made with our own key: they signed nothing.", canonical
    return S.COUNTERSIGNED, "", canonical


def key_set(url: str) -> list[Any]:
    """The ``keys`` of the JSON Web Key Set at ``url``, fetched as our client fetches a signed card's
    (:func:`client.key_set`: under the outbound address policy, :mod:`parley.outbound`) within
    ``A2A_CARD_TIMEOUT``; ReceiptError when it cannot be read."""

    async def fetch() -> list[Any]:
        async with outbound.async_client(timeout=settings.A2A_CARD_TIMEOUT) as http:
            return await client.key_set(http, url)

    try:
        return asyncio.run(asyncio.wait_for(fetch(), settings.A2A_CARD_TIMEOUT))
    except (client.CounterpartyError, TimeoutError) as exc:
        raise receipts.ReceiptError(f"The key set {url} could not be read: {exc}") from exc


def receipt_of(settlement: Settlement) -> dict[str, Any] | None:
    """Our receipt of ``settlement`` (:func:`receipts.receipt`): the canonical settlement and each
    side's signature by role; None when it was never signed."""
    if settlement.signed_settlement is None:
        return None
    outbound_side = settlement.negotiation.direction == Negotiation.Direction.OUTBOUND
    ours: Literal["user", "agent"] = "user" if outbound_side else "agent"
    theirs: Literal["user", "agent"] = "agent" if outbound_side else "user"
    return receipts.receipt(
        settlement.signed_settlement, {ours: settlement.our_signature, theirs: settlement.their_signature}
    )


def receipt_for(negotiation: Negotiation) -> dict[str, Any] | None:
    """Our receipt of ``negotiation``'s settlement (:func:`receipt_of`), read within its tenant; None
    when it has no settlement or that was never signed."""
    settlement = Settlement.objects.for_tenant(negotiation.tenant_id).filter(negotiation=negotiation).first()
    return receipt_of(settlement) if settlement is not None else None


def receipt_check(document: Any) -> receipts.ReceiptCheck:
    """Check the receipt ``document`` against the key sets its parties name, fetched now
    (:func:`key_set`). Raises :class:`receipts.ReceiptError` for a document that is no receipt."""
    fetched: dict[str, list[Any]] = {}

    def keys_for(url: str) -> list[Any]:
        if url not in fetched:
            fetched[url] = key_set(url)
        return fetched[url]

    return receipts.verify_receipt(document, keys_for)
