"""Signed cards: a tenant's ES256 key signs its agents' cards, a2a-sdk's verifier accepts them with the key
from the card's key set, and our client refuses a card whose signature does not hold."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.client.card_resolver import parse_agent_card
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCard
from a2a.utils.signing import create_signature_verifier
from jwt import PyJWK
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a_gateway.models import SigningKey
from a2a_gateway.signing import sign_card, signing_key_create
from agents.models import Agent
from negotiations.client import CounterpartyError, read_card, send_move
from negotiations.wire import Move
from parley.http import async_client
from parley.models import Tenant
from tests.a2a_gateway.conftest import Endpoint, run
from tests.loopback import LoopbackServer, agent_card


def sdk_verifier() -> Callable[[AgentCard], None]:
    """a2a-sdk's verifier, its keys fetched from the ``jku`` each signature names."""

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None
        [key] = [k for k in httpx.get(jku, timeout=10).json()["keys"] if k["kid"] == kid]
        return PyJWK(key)

    return create_signature_verifier(key_provider, ["ES256"])


def read(url: str) -> AgentCard:
    """The card as our client reads it (an HTTP client of its own, in an event loop of its own)."""

    async def main() -> AgentCard:
        async with async_client(timeout=10) as http:
            return await read_card(http, url)

    return asyncio.run(main())


@pytest.mark.django_db
def test_a_new_key_retires_the_tenants_earlier_keys(tenant: Tenant, other_tenant: Tenant) -> None:
    theirs = signing_key_create(tenant=other_tenant)
    first = signing_key_create(tenant=tenant)

    second = signing_key_create(tenant=tenant)

    assert list(SigningKey.across_tenants.filter(active=True).order_by("kid")) == sorted(
        [theirs, second], key=lambda k: k.kid
    )
    assert first.kid != second.kid
    assert second.public_jwk == {
        "kty": "EC",
        "crv": "P-256",
        "x": second.public_jwk["x"],
        "y": second.public_jwk["y"],
        "kid": second.kid,
        "use": "sig",
        "alg": "ES256",
    }
    assert second.private_pem.startswith("-----BEGIN PRIVATE KEY-----")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("card_path", ["/.well-known/agent-card.json", "/.well-known/agent.json"])
def test_our_signed_cards_verify_with_the_sdk_verifier(
    seller_endpoint: Endpoint, seller: Agent, card_path: str
) -> None:
    key = signing_key_create(tenant=seller.tenant)

    card = run(
        lambda http: A2ACardResolver(http, seller_endpoint.url, agent_card_path=card_path).get_agent_card(
            signature_verifier=sdk_verifier()
        )
    )

    [signature] = card.signatures
    assert card.name == "Idris Haddad"
    header = read_protected(signature.protected)
    assert header == {
        "alg": "ES256",
        "kid": key.kid,
        "jku": f"{seller_endpoint.url}/.well-known/jwks.json",
        "typ": "JOSE",
    }


def read_protected(protected: str) -> dict[str, Any]:
    return json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))


@pytest.mark.django_db(transaction=True)
def test_the_key_set_lists_the_tenants_active_public_keys(seller_endpoint: Endpoint, seller: Agent) -> None:
    jwks_url = f"{seller_endpoint.url}/.well-known/jwks.json"
    assert run(lambda http: http.get(jwks_url)).json() == {"keys": []}
    signing_key_create(tenant=seller.tenant)

    current = signing_key_create(tenant=seller.tenant)

    response = run(lambda http: http.get(jwks_url))
    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=300"
    assert response.json() == {"keys": [current.public_jwk]}
    assert "d" not in response.json()["keys"][0]


@pytest.mark.django_db(transaction=True)
def test_a_tenant_without_a_key_serves_unsigned_cards(seller_endpoint: Endpoint, agent: Agent) -> None:
    signing_key_create(tenant=agent.tenant)  # another tenant's key signs nothing of this one

    body = run(lambda http: http.get(seller_endpoint.card_url)).json()

    assert "signatures" not in body


@pytest.mark.django_db(transaction=True)
def test_our_client_negotiates_with_a_signed_card(seller_endpoint: Endpoint, seller: Agent) -> None:
    signing_key_create(tenant=seller.tenant)

    exchange = send_move(
        url=seller_endpoint.url,
        move=Move("propose", "I can pay €800 a day.", {"amount": 800, "currency": "EUR"}, str(uuid.uuid4())),
    )

    assert exchange.counterparty_name == "Idris Haddad"
    assert exchange.task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


class SignedPeer(LoopbackServer):
    """A counterparty serving a card signed with one of our keys, and the key set its ``jku`` names.

    ``card`` (JSON, as served) and ``keys`` may be changed by the test before a fetch.
    """

    what = "the signed peer"

    def __init__(self, key: SigningKey, *, jku: str | None = None) -> None:
        super().__init__()
        self.url = self.origin
        signed = sign_card(
            agent_card("Signed Seller", "Sells, signed.", self.url),
            key,
            jku=jku or f"{self.origin}/.well-known/jwks.json",
        )
        self.card: dict[str, Any] = agent_card_to_dict(signed)
        self.keys: list[dict[str, Any]] = [key.public_jwk]
        self.listen(
            Starlette(
                routes=[
                    Route("/.well-known/agent-card.json", self.serve_card),
                    Route("/.well-known/jwks.json", self.serve_keys),
                ]
            )
        )

    async def serve_card(self, request: Request) -> JSONResponse:
        return JSONResponse(self.card)

    async def serve_keys(self, request: Request) -> JSONResponse:
        return JSONResponse({"keys": self.keys})


@pytest.fixture
def key(tenant: Tenant) -> SigningKey:
    return signing_key_create(tenant=tenant)


@pytest.fixture
def peer(key: SigningKey) -> Iterator[SignedPeer]:
    with SignedPeer(key) as server:
        yield server


@pytest.mark.django_db
def test_our_client_reads_a_card_whose_signature_holds(peer: SignedPeer) -> None:
    card = read(peer.url)

    assert card.name == "Signed Seller"
    assert parse_agent_card(dict(peer.card)) == card


@pytest.mark.django_db
@pytest.mark.parametrize(
    "tamper",
    [
        lambda peer: peer.card.update(name="Evil Seller"),
        lambda peer: peer.card["skills"][0].update(description="Pays double."),
        lambda peer: peer.card["signatures"][0].update(
            signature=peer.card["signatures"][0]["signature"][::-1]
        ),
    ],
    ids=["name", "skill", "signature"],
)
def test_our_client_refuses_a_tampered_card(peer: SignedPeer, tamper: Callable[[SignedPeer], None]) -> None:
    tamper(peer)

    with pytest.raises(CounterpartyError) as raised:
        read(peer.url)

    assert str(raised.value) == (
        f"{peer.url}/.well-known/agent-card.json: "
        "its card's signature does not verify (No valid signature found)"
    )


@pytest.mark.django_db
def test_our_client_refuses_a_card_signed_by_a_key_the_origin_does_not_serve(
    peer: SignedPeer, other_tenant: Tenant, key: SigningKey
) -> None:
    impostor = signing_key_create(tenant=other_tenant)
    peer.keys = [{**impostor.public_jwk, "kid": key.kid}]

    with pytest.raises(CounterpartyError, match="signature does not verify"):
        read(peer.url)


@pytest.mark.django_db
def test_our_client_fetches_keys_only_from_the_cards_origin(key: SigningKey) -> None:
    elsewhere = "http://127.0.0.1:9/.well-known/jwks.json"
    with SignedPeer(key, jku=elsewhere) as peer, pytest.raises(CounterpartyError) as raised:
        read(peer.url)

    assert str(raised.value) == (
        f"{peer.url}/.well-known/agent-card.json: its card's signing keys are on another origin ({elsewhere})"
    )
