"""Our agent negotiates, through the running platform, with an Index-style peer (``IndexPeer``).

The peer speaks only what an ``@indexnetwork/a2a`` server speaks: a lenient
card at its origin root, 0.3 ``message/send`` at any path, its reply last in
history, 409/-32002 on a finished task. Both sides' verdicts come from the same
function over each side's own record of the Task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agents.models import Agent, Intent, Run, default_actions
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.rules import NEGOTIATION_EXTENSION, extension_params, rules_for
from negotiations.verdict import settle
from negotiations.wire import task_record_from_json
from tests.conftest import LiveStack
from tests.interop.conftest import negotiate
from tests.interop.index_peer import TERMINAL_ACTIONS, IndexPeer, ScriptedSeller, Seen

pytestmark = pytest.mark.django_db(transaction=True)

FLOOR = 1000


def assert_index_wire(peer: IndexPeer, negotiation: Negotiation) -> None:
    """Every send was 0.3 ``message/send`` to the URL as given: one data part, role user; the
    taskId only after the first, the contextId from the first on (ours, minted for the opening
    so that sending it again sends the same message; an Index server keeps a given one)."""
    assert peer.received
    for n, request in enumerate(peer.received):
        assert request.path == "/idris"
        assert request.body["method"] == "message/send"
        message = request.body["params"]["message"]
        assert message["role"] == "user"
        [part] = message["parts"]
        assert part["kind"] == "data"
        assert {"action", "message"} <= set(part["data"])
        ids = (message.get("taskId"), message.get("contextId"))
        assert ids == (None if n == 0 else negotiation.task_id, negotiation.context_id)


def assert_same_verdict(peer: IndexPeer, negotiation: Negotiation) -> Settlement:
    """Our settlement is agreed by reference, and the peer's own Task gives it the same verdict."""
    ours = Settlement.across_tenants.get(negotiation=negotiation)
    assert (ours.outcome, ours.basis) == ("agreed", "reference")
    theirs_task = peer.task(negotiation.task_id)
    assert theirs_task["status"]["state"] == "completed"
    theirs = settle(task_record_from_json(theirs_task), our_role="agent", terminal_actions=TERMINAL_ACTIONS)
    assert theirs is not None
    assert (theirs.outcome, theirs.basis, theirs.terms) == (ours.outcome, ours.basis, ours.terms)
    [artifact] = theirs_task["artifacts"]
    assert artifact["artifactId"] == "negotiator:negotiation-outcome"
    assert artifact["parts"][0]["data"]["status"] == "agreed"
    assert len(theirs_task["history"]) == negotiation.turns.count()
    return ours


def lenient_card(peer: IndexPeer, variant: str) -> None:
    """Make the peer's card one of the lenient variants an Index host may publish."""
    if variant == "url without protocolVersion":
        peer.card["url"] = peer.url
    elif variant == "protocolVersion 0.2.5":  # a2a-sdk alone would speak 1.0 to it
        peer.card |= {"url": peer.url, "protocolVersion": "0.2.5"}
    elif variant == "unparsable by the SDK":  # Index clients never validate a card
        peer.card["skills"][0]["tags"] = "negotiation"


@pytest.mark.parametrize(
    "card",
    ["url empty", "url without protocolVersion", "protocolVersion 0.2.5", "unparsable by the SDK"],
)
def test_our_agent_settles_with_an_index_peer(
    live_stack: LiveStack, buyer: Agent, intent: Intent, card: str
) -> None:
    peer = IndexPeer(ScriptedSeller(floor=FLOOR))
    lenient_card(peer, card)
    with peer:
        run, negotiation = negotiate(buyer, intent, peer.url)

    assert run.status == Run.Status.DONE
    assert negotiation.status == Negotiation.Status.SETTLED
    assert negotiation.counterparty_name == "Idris Haddad"
    assert negotiation.task_state == "completed"
    assert_index_wire(peer, negotiation)
    turns = list(negotiation.turns.order_by("seq"))
    assert [t.side for t in turns] == [Turn.Side.OURS, Turn.Side.THEIRS] * len(peer.received)
    offer, closing = turns[-2], turns[-1]
    assert (offer.action, closing.action) == ("counter", "accept")
    assert closing.accepts_offer_id == offer.offer_id
    assert offer.terms is not None
    assert FLOOR <= offer.terms["amount"] <= 1100
    settlement = assert_same_verdict(peer, negotiation)
    assert settlement.terms == offer.terms
    assert "Settled (1):" in run.output


def test_an_ask_from_the_index_peer_is_answered_and_the_negotiation_goes_on(
    live_stack: LiveStack, buyer: Agent, intent: Intent
) -> None:
    """An Index handler's ``ask`` comes over the wire as an open reply with a question for its own
    party; we restate an offer on the same task and it carries on to a deal."""
    with IndexPeer(ScriptedSeller(floor=FLOOR, ask_once=True)) as peer:
        run, negotiation = negotiate(buyer, intent, peer.url)

    turns = list(negotiation.turns.order_by("seq"))
    asked = next(t for t in turns if t.action == "ask")
    assert asked.side == Turn.Side.THEIRS
    assert asked.task_state == "input-required"
    assert asked.terms is None
    after = turns[asked.seq]  # seq is 1-based: the turn after the ask
    assert after.side == Turn.Side.OURS
    assert after.action == "counter"
    assert after.terms is not None
    assert negotiation.status == Negotiation.Status.SETTLED
    assert_index_wire(peer, negotiation)
    assert_same_verdict(peer, negotiation)
    assert run.status == Run.Status.DONE


def test_a_task_the_peer_has_finished_fails_the_negotiation_with_its_refusal(
    live_stack: LiveStack, buyer: Agent, intent: Intent
) -> None:
    """The peer's side closes the task after its first reply; our next send gets its 409/-32002."""
    with IndexPeer(ScriptedSeller(floor=FLOOR), walk_away_after=1) as peer:
        run, negotiation = negotiate(buyer, intent, peer.url)

    assert len(peer.received) == 2
    assert negotiation.status == Negotiation.Status.FAILED
    assert negotiation.error == (
        f"{peer.url} refused the move (HTTP 409, JSON-RPC -32002): Task "
        f'"{negotiation.task_id}" is canceled and cannot accept further messages. '
        "Start a new task to negotiate again."
    )
    # The first exchange stands; the refused move left nothing behind.
    assert [(t.side, t.action) for t in negotiation.turns.order_by("seq")] == [
        (Turn.Side.OURS, "propose"),
        (Turn.Side.THEIRS, "counter"),
    ]
    assert negotiation.turn_count == 1
    assert not Settlement.across_tenants.filter(negotiation=negotiation).exists()
    assert run.status == Run.Status.DONE
    assert (
        f"Failed (1):\n- {negotiation.pk} with Idris Haddad ({peer.url}) — {peer.url} refused" in run.output
    )


# --- A peer that publishes move rules (as a Parley agent does) -------------------------------


@dataclass
class Scripted:
    """Replies ``reply`` to every move."""

    reply: dict[str, Any]

    def decide(self, seen: list[Seen]) -> dict[str, Any]:
        return dict(self.reply)


def publishing_rules(peer: IndexPeer) -> IndexPeer:
    """``peer`` with our negotiation extension on its card: the default vocabulary, and the terms
    "amount (number, EUR per day), currency"."""
    rules = rules_for(default_actions(), "amount (number, EUR per day), currency")
    peer.card["capabilities"] = {
        "extensions": [{"uri": NEGOTIATION_EXTENSION, "params": extension_params(rules)}]
    }
    return peer


HAGGLE = {"action": "haggle", "message": "Meet me halfway."}
LOTS = {
    "action": "counter",
    "message": "Lots.",
    "terms": {"amount": "lots", "currency": "EUR"},
    "offerId": "o-1",
}


@pytest.mark.parametrize(
    ("reply", "broken"),
    [
        (HAGGLE, "move.action 'haggle' is not one of propose, counter, accept, reject"),
        (LOTS, "move.terms.amount must be a number (EUR per day), got 'lots'"),
    ],
    ids=["unknown-action", "lots"],
)
def test_a_reply_outside_the_rules_its_card_publishes_fails_the_negotiation(
    live_stack: LiveStack, buyer: Agent, intent: Intent, reply: dict[str, Any], broken: str
) -> None:
    """The rule our gateway holds their moves to, held to their reply: nothing of it is recorded."""
    with publishing_rules(IndexPeer(Scripted(reply))) as peer:
        run, negotiation = negotiate(buyer, intent, peer.url)

    assert len(peer.received) == 1
    assert negotiation.status == Negotiation.Status.FAILED
    assert negotiation.error == f"its reply breaks the move rules its card publishes: {broken}"
    assert not negotiation.turns.exists()
    assert run.status == Run.Status.DONE


def test_a_reply_of_a_peer_that_publishes_no_rules_is_taken_as_it_comes(
    live_stack: LiveStack, buyer: Agent, intent: Intent
) -> None:
    """An Index peer publishes no vocabulary as data (its card lists it in words, ``ask`` left out,
    though its handler sends ``ask``): its reply is read leniently, as the seed reads it."""
    with IndexPeer(Scripted(HAGGLE)) as peer:
        run, negotiation = negotiate(buyer, intent, peer.url)

    theirs = negotiation.turns.filter(side=Turn.Side.THEIRS)
    assert theirs.exists()
    assert set(theirs.values_list("action", flat=True)) == {"haggle"}
    assert run.status == Run.Status.DONE
