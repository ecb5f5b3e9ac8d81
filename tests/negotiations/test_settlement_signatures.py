"""Settlements both sides sign (docs/settlement-signatures.md), between two Parley agents over real A2A.

Tomas's agent (tenant acme, ceiling 1,100 EUR) negotiates with Idris's (tenant
globex, floor 950 EUR) on the live stack, both on the ``offline`` model, each
tenant with its card-signing key. At A2A 1.0 our client reads Idris's card as
served; at 0.3 it reads it through :class:`DialectProxy`, which offers only the
card's 0.3 interface, so a2a-sdk's client speaks ``message/send`` to the same
gateway behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from a2a_gateway.cards import jwks_url
from a2a_gateway.signing import active_signing_key, signing_key_create
from agents.addresses import agent_url
from agents.models import Agent, Intent, Run
from negotiations import receipts
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import signatures
from tests.conftest import LiveStack
from tests.interop.conftest import CEILING, negotiate
from tests.loopback import LoopbackServer

pytestmark = pytest.mark.django_db(transaction=True)


Tamper = Callable[[dict[str, Any]], None]


class DialectProxy(LoopbackServer):
    """Forwards every request to the live stack as it came, headers included, but serves the
    card with only its ``wire`` interface, on the proxy's origin, unsigned (a card it changed
    cannot keep its signature): a client that reads the card here speaks that version. With
    ``tamper``, each settlement signature in an answer (``metadata`` under the extension) is
    passed to it to change on the way back."""

    what = "the dialect proxy"

    def __init__(self, upstream: str, *, wire: str = "0.3", tamper: Tamper | None = None) -> None:
        super().__init__()
        self.upstream = upstream
        self.wire = wire
        self.tamper = tamper
        self.methods: list[str] = []
        self.listen(Starlette(routes=[Route("/{path:path}", self.forward, methods=["GET", "POST"])]))

    async def forward(self, request: Request) -> Response:
        dropped = ("host", "content-length", "connection")
        headers = {k: v for k, v in request.headers.items() if k not in dropped}
        body = await request.body()
        if request.method == "POST":
            self.methods.append(json.loads(body)["method"])
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.request(
                request.method, f"{self.upstream}{request.url.path}", headers=headers, content=body
            )
        body = answer.content
        if request.url.path.endswith("/.well-known/agent-card.json") and answer.status_code == 200:
            card = json.loads(body)
            card.pop("signatures", None)
            card["supportedInterfaces"] = [
                {**i, "url": i["url"].replace(self.upstream, self.origin)}
                for i in card["supportedInterfaces"]
                if i["protocolVersion"] == self.wire
            ]
            card["url"] = card["supportedInterfaces"][0]["url"]
            body = json.dumps(card).encode()
        elif request.method == "POST" and self.tamper is not None and answer.status_code == 200:
            answered = json.loads(body)
            for found in signatures_in(answered):
                self.tamper(found)
            body = json.dumps(answered).encode()
        return Response(body, status_code=answer.status_code, media_type=answer.headers.get("content-type"))


def signatures_in(value: Any) -> Iterator[dict[str, Any]]:
    """Every settlement signature (``{"signature", "card"}``) in a JSON answer."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == receipts.SETTLEMENT_EXTENSION and isinstance(item, dict):
                yield item
            else:
                yield from signatures_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from signatures_in(item)


@pytest.fixture
def buyer(agent: Agent) -> Agent:
    agent.term_guards = [CEILING]
    agent.save()
    return agent


@pytest.fixture
def keys(buyer: Agent, seller: Agent) -> None:
    signing_key_create(tenant=buyer.tenant)
    signing_key_create(tenant=seller.tenant)


@pytest.fixture
def proxy(live_stack: LiveStack) -> Iterator[DialectProxy]:
    with DialectProxy(live_stack.url) as server:
        yield server


def seller_url(live_stack: LiveStack, seller: Agent) -> str:
    return f"{live_stack.url}/a2a/{seller.tenant.slug}/{seller.slug}"


def both_sides(buyer: Agent, seller: Agent, intent: Intent, url: str) -> tuple[Negotiation, Negotiation]:
    run, ours = negotiate(buyer, intent, url)
    assert run.status == Run.Status.DONE, run.output
    theirs = Negotiation.across_tenants.get(agent=seller, task_id=ours.task_id)
    return ours, theirs


@pytest.mark.parametrize("wire", ["1.0", "0.3"])
def test_two_parley_agents_countersign_their_settlement(
    request: pytest.FixtureRequest,
    live_stack: LiveStack,
    buyer: Agent,
    seller: Agent,
    intent: Intent,
    keys: None,
    wire: str,
) -> None:
    url = seller_url(live_stack, seller)
    if wire == "0.3":
        proxy: DialectProxy = request.getfixturevalue("proxy")
        url = url.replace(live_stack.url, proxy.origin)
    ours, theirs = both_sides(buyer, seller, intent, url)
    if wire == "0.3":
        assert proxy.methods
        assert set(proxy.methods) == {"message/send"}

    mine = Settlement.across_tenants.get(negotiation=ours)
    other = Settlement.across_tenants.get(negotiation=theirs)
    assert (mine.outcome, other.outcome) == ("agreed", "agreed")
    assert (mine.signature, mine.signature_reason) == ("countersigned", "")
    assert (other.signature, other.signature_reason) == ("countersigned", "")
    assert mine.signed_settlement == other.signed_settlement
    canonical = mine.signed_settlement
    assert canonical is not None
    assert (canonical["taskId"], canonical["contextId"]) == (ours.task_id, ours.context_id)
    assert canonical["parties"]["user"]["name"] == buyer.name
    assert canonical["parties"]["user"]["partyId"] == buyer.party_id
    assert canonical["parties"]["agent"]["name"] == seller.name
    assert canonical["parties"]["user"]["jwks"].endswith(f"/a2a/acme/{buyer.slug}/.well-known/jwks.json")
    assert receipts.canonical_bytes(canonical["terms"]) == receipts.canonical_bytes(mine.terms)
    assert (canonical["verdict"], canonical["basis"]) == ("agreed", "reference")
    closing = ours.turns.order_by("-seq").first()
    assert closing is not None
    assert canonical["offerId"] == closing.accepts_offer_id
    # Each side holds both signatures: ours is theirs, theirs is ours.
    assert (mine.our_signature, mine.their_signature) == (other.their_signature, other.our_signature)
    # Each signature is on its side's last message of the Task.
    last = {side: ours.turns.filter(side=side).order_by("-seq").first() for side in Turn.Side.values}
    assert signatures.signature_in(last["ours"].raw)["signature"] == mine.our_signature  # type: ignore[union-attr]
    assert signatures.signature_in(last["theirs"].raw)["signature"] == mine.their_signature  # type: ignore[union-attr]

    # Both receipts verify with nothing but the public key sets.
    for settlement in (mine, other):
        receipt = signatures.receipt_of(settlement)
        check = signatures.receipt_check(receipt)
        assert check.valid, check.reason
    assert signatures.receipt_of(mine) == signatures.receipt_of(other)


def test_a_tenant_without_a_key_settles_and_says_it_signed_nothing(
    live_stack: LiveStack, buyer: Agent, seller: Agent, intent: Intent
) -> None:
    """Only Idris's tenant has a key: Tomas's agent sends no signature, so Idris's side signs
    nothing back; the deal stands on both sides, each saying why it is not countersigned."""
    signing_key_create(tenant=seller.tenant)
    ours, theirs = both_sides(buyer, seller, intent, seller_url(live_stack, seller))

    mine = Settlement.across_tenants.get(negotiation=ours)
    other = Settlement.across_tenants.get(negotiation=theirs)
    assert (mine.outcome, other.outcome) == ("agreed", "agreed")
    assert mine.signature == Settlement.Signature.UNSIGNED
    assert "no signing key" in mine.signature_reason
    assert other.signature == Settlement.Signature.NOT_OFFERED
    assert "did not activate" in other.signature_reason
    assert not mine.their_signature
    assert not other.our_signature
    assert not any(receipts.SETTLEMENT_EXTENSION in t.raw.get("extensions", []) for t in ours.turns.all())


def test_our_accept_of_their_offer_is_signed_and_their_confirmation_countersigns(
    live_stack: LiveStack, buyer: Agent, seller: Agent, intent: Intent, keys: None
) -> None:
    """The other closing: Idris's agent concedes linearly against Tomas's Boulware, which ends with
    Tomas's accepting Idris's offer in a request (signed), and Idris's confirming it in the reply
    that closes the Task (countersigned)."""
    seller.strategy, buyer.strategy = "linear", "boulware"
    seller.save()
    buyer.save()
    ours, theirs = both_sides(buyer, seller, intent, seller_url(live_stack, seller))

    accept, confirmation = list(ours.turns.order_by("seq"))[-2:]
    assert (accept.side, accept.action, confirmation.side, confirmation.action) == (
        "ours",
        "accept",
        "theirs",
        "accept",
    )
    assert confirmation.accepts_offer_id == accept.accepts_offer_id
    mine = Settlement.across_tenants.get(negotiation=ours)
    other = Settlement.across_tenants.get(negotiation=theirs)
    assert (mine.signature, other.signature) == ("countersigned", "countersigned")
    assert mine.signed_settlement == other.signed_settlement
    assert mine.signed_settlement is not None
    assert mine.signed_settlement["offerId"] == accept.accepts_offer_id


def broken_signature(found: dict[str, Any]) -> None:
    """The signature's last characters changed: the JWS no longer holds."""
    jws = found["signature"]
    found["signature"] = jws[:-4] + ("AAAA" if not jws.endswith("AAAA") else "BBBB")


@pytest.mark.parametrize("tampered", ["signature", "terms"])
def test_a_tampered_countersignature_is_recorded_as_such(
    live_stack: LiveStack, buyer: Agent, seller: Agent, intent: Intent, keys: None, tampered: str
) -> None:
    """Idris's signature is changed on its way to us: broken, or replaced by one his key really
    made over other terms (a counterparty signing other terms than it agreed). The deal stands;
    our settlement says what is wrong with its countersignature."""
    key = active_signing_key(seller.tenant_id)
    assert key is not None

    def other_terms(found: dict[str, Any]) -> None:
        settlement = receipts.payload_of(found["signature"])
        settlement["terms"] = {**settlement["terms"], "amount": settlement["terms"]["amount"] + 1}
        jku = receipts.header_of(found["signature"])["jku"]
        found["signature"] = receipts.sign(settlement, private_pem=key.private_pem, kid=key.kid, jku=jku)

    tamper = broken_signature if tampered == "signature" else other_terms
    with DialectProxy(live_stack.url, wire="1.0", tamper=tamper) as proxy:
        url = seller_url(live_stack, seller).replace(live_stack.url, proxy.origin)
        ours, theirs = both_sides(buyer, seller, intent, url)

    mine = Settlement.across_tenants.get(negotiation=ours)
    assert mine.outcome == Settlement.Outcome.AGREED
    if tampered == "signature":
        assert mine.signature == Settlement.Signature.INVALID
        assert "does not hold" in mine.signature_reason
    else:
        assert mine.signature == Settlement.Signature.DIFFERS
        assert mine.signature_reason == "The signature is over another settlement: terms differ."
    # Their side got ours intact and holds both its own and ours.
    assert Settlement.across_tenants.get(negotiation=theirs).signature == "countersigned"
    check = signatures.receipt_check(signatures.receipt_of(mine))
    assert not check.valid
    assert check.signatures["user"] is None
    assert check.signatures["agent"]


class ReflectingProxy(DialectProxy):
    """A counterparty that signs nothing: its card (served here) names Tomas's key set as its own,
    and each signature its answers carry is replaced by Tomas's own latest one, read from his
    requests, which is over the very settlement those requests would close on."""

    def __init__(self, upstream: str, *, their_key_set: str) -> None:
        self.their_key_set = their_key_set
        self.reflected = ""
        super().__init__(upstream, wire="1.0", tamper=self.reflect)

    def reflect(self, found: dict[str, Any]) -> None:
        found["signature"] = self.reflected

    async def forward(self, request: Request) -> Response:
        if request.method == "POST":
            for found in signatures_in(json.loads(await request.body())):
                self.reflected = found["signature"]
        response = await super().forward(request)
        if not request.url.path.endswith("/.well-known/agent-card.json") or response.status_code != 200:
            return response
        card = json.loads(response.body)
        for extension in card["capabilities"]["extensions"]:
            if extension["uri"] == receipts.SETTLEMENT_EXTENSION:
                extension["params"]["jwks"] = self.their_key_set
        return Response(json.dumps(card).encode(), media_type="application/json")


def test_a_counterparty_handing_back_our_own_signature_has_not_countersigned(
    live_stack: LiveStack, buyer: Agent, seller: Agent, intent: Intent, keys: None
) -> None:
    """A card naming our key set as its own, and their closing reply carrying our own signature of
    the settlement: it holds with that key set, but they signed nothing, so the settlement is not
    recorded countersigned."""
    ours_url = jwks_url(agent_url(buyer))
    with ReflectingProxy(live_stack.url, their_key_set=ours_url) as proxy:
        url = seller_url(live_stack, seller).replace(live_stack.url, proxy.origin)
        ours, _theirs = both_sides(buyer, seller, intent, url)
        assert proxy.reflected

    mine = Settlement.across_tenants.get(negotiation=ours)
    assert mine.outcome == Settlement.Outcome.AGREED
    assert mine.their_signature == proxy.reflected
    assert (mine.signature, mine.signature_reason) == (
        Settlement.Signature.INVALID,
        "Their signature is made with our own key: they signed nothing.",
    )
    check = signatures.receipt_check(signatures.receipt_of(mine))
    assert not check.valid
