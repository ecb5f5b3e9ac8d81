"""Settlement signatures are optional on both sides: with an Index peer, which has no such
extension, our agents negotiate exactly as before, settle, and say why the deal is not
countersigned (docs/settlement-signatures.md)."""

from __future__ import annotations

import pytest

from a2a_gateway.signing import signing_key_create
from agents.models import Agent, Intent
from negotiations import receipts
from negotiations.models import Negotiation, Settlement
from negotiations.services import signatures
from tests.conftest import LiveStack
from tests.interop.conftest import negotiate
from tests.interop.index_peer import IndexClient, IndexPeer, ScriptedBuyer, ScriptedSeller
from tests.interop.test_we_call_index import assert_index_wire, assert_same_verdict

pytestmark = pytest.mark.django_db(transaction=True)


def test_our_agent_settles_with_an_index_peer_and_says_it_signs_nothing(
    live_stack: LiveStack, buyer: Agent, intent: Intent
) -> None:
    signing_key_create(tenant=buyer.tenant)
    with IndexPeer(ScriptedSeller(floor=1000)) as peer:
        _, negotiation = negotiate(buyer, intent, peer.url)

    assert_index_wire(peer, negotiation)
    settlement = assert_same_verdict(peer, negotiation)
    assert negotiation.counterparty_identity is None
    assert settlement.signature == Settlement.Signature.NOT_OFFERED
    assert settlement.signature_reason == "Their card declares no settlement signatures, so they sign none."
    assert signatures.receipt_of(settlement) is None
    # Nothing of the extension went over the wire.
    for request in peer.received:
        message = request.body["params"]["message"]
        assert "extensions" not in message
        assert "metadata" not in message


def test_an_index_client_settles_with_our_agent_which_says_it_signs_nothing(
    live_stack: LiveStack, seller_url: str, seller: Agent
) -> None:
    signing_key_create(tenant=seller.tenant)
    turn = IndexClient(ScriptedBuyer(opening=800, step=100, ceiling=1100)).negotiate(seller_url)
    assert turn.outcome == "completed"

    negotiation = Negotiation.across_tenants.get(agent=seller, task_id=turn.task["id"])
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    assert settlement.outcome == Settlement.Outcome.AGREED
    assert settlement.signature == Settlement.Signature.NOT_OFFERED
    assert "did not activate" in settlement.signature_reason
    # Our replies carry no signature: the client did not ask for one.
    for message in turn.task["history"]:
        assert receipts.SETTLEMENT_EXTENSION not in (message.get("metadata") or {})
