"""A third party checks a settlement receipt (docs/settlement-signatures.md#receipts): the API
endpoint and the page, which fetch the key sets the receipt names from the live stack, and the
management command, offline with the key sets as files. Our side downloads its own receipt."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.test import APIClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from a2a_gateway.cards import jwks_url
from a2a_gateway.models import SigningKey
from a2a_gateway.signing import signing_key_create
from agents.addresses import agent_url, card_document
from agents.models import Agent
from negotiations import receipts
from negotiations.models import Negotiation, Settlement
from negotiations.services import signatures
from parley import services
from tests.conftest import LiveStack
from tests.loopback import LoopbackServer

pytestmark = pytest.mark.django_db(transaction=True)

TERMS = {"amount": 1030, "currency": "EUR"}


def party(agent: Agent) -> dict[str, str]:
    return receipts.identity(name=agent.name, party_id=agent.party_id, jwks=jwks_url(agent_url(agent)))


def settlement_of(buyer: Agent, seller: Agent) -> dict[str, Any]:
    return receipts.canonical_settlement(
        task_id="task-1",
        context_id="context-1",
        parties={"user": party(buyer), "agent": party(seller)},
        terms=TERMS,
        offer_id="offer-1",
        verdict="agreed",
        basis="reference",
    )


def signed_by(key: SigningKey, agent: Agent, settlement: dict[str, Any]) -> str:
    return receipts.sign(settlement, private_pem=key.private_pem, kid=key.kid, jku=jwks_url(agent_url(agent)))


@pytest.fixture
def keys(agent: Agent, seller: Agent) -> dict[str, SigningKey]:
    return {
        "user": signing_key_create(tenant=agent.tenant),
        "agent": signing_key_create(tenant=seller.tenant),
    }


@pytest.fixture
def receipt(agent: Agent, seller: Agent, keys: dict[str, SigningKey]) -> dict[str, Any]:
    """Tomas's agent (user) and Idris's (agent) both signed the settlement, each with its key."""
    settlement = settlement_of(agent, seller)
    return receipts.receipt(
        settlement,
        {
            "user": signed_by(keys["user"], agent, settlement),
            "agent": signed_by(keys["agent"], seller, settlement),
        },
    )


def with_other_terms(receipt: dict[str, Any]) -> dict[str, Any]:
    tampered = copy.deepcopy(receipt)
    tampered["settlement"]["terms"]["amount"] = 950
    return tampered


def with_broken_signature(receipt: dict[str, Any]) -> dict[str, Any]:
    tampered = copy.deepcopy(receipt)
    jws = tampered["signatures"]["agent"]["jws"]
    tampered["signatures"]["agent"]["jws"] = jws[:-4] + ("AAAA" if not jws.endswith("AAAA") else "BBBB")
    return tampered


def with_swapped_signer(receipt: dict[str, Any]) -> dict[str, Any]:
    """The buyer's signature presented as the seller's too: it names the buyer's key set."""
    tampered = copy.deepcopy(receipt)
    tampered["signatures"]["agent"] = tampered["signatures"]["user"]
    return tampered


@pytest.fixture(autouse=True)
def no_checks_counted_yet() -> None:
    """Each test starts with no receipt checks counted against its address: the count is kept in
    the cache for a minute, and other tests (the schema's property-based calls) make checks too."""
    cache.clear()


# --- The API endpoint ------------------------------------------------------------------------------


def verify_api(body: Any) -> Any:
    return APIClient().post("/api/v1/receipts/verify", body, format="json")


def test_anyone_checks_a_receipt_through_the_api(live_stack: LiveStack, receipt: dict[str, Any]) -> None:
    response = verify_api(receipt)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "valid": True,
        "reason": "Both signatures hold: each side signed exactly this settlement.",
        "signatures": {"user": None, "agent": None},
    }


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (with_other_terms, "The signature is over another settlement: terms differ."),
        (with_broken_signature, "The signature does not hold with key"),
        (with_swapped_signer, "The signature names the key set"),
    ],
)
def test_a_tampered_receipt_fails_through_the_api_saying_why(
    live_stack: LiveStack, receipt: dict[str, Any], tamper: Any, said: str
) -> None:
    body = verify_api(tamper(receipt)).json()
    assert body["valid"] is False
    assert body["reason"].startswith("The receipt does not hold.")
    assert said in body["signatures"]["agent"]
    if tamper is with_other_terms:
        assert body["signatures"]["user"] == body["signatures"]["agent"]
    else:
        assert body["signatures"]["user"] is None


def test_a_key_set_that_cannot_be_fetched_is_named(live_stack: LiveStack, receipt: dict[str, Any]) -> None:
    tampered = copy.deepcopy(receipt)
    tampered["settlement"]["parties"]["agent"]["jwks"] = (
        f"{live_stack.url}/a2a/globex/nobody/.well-known/jwks.json"
    )
    body = verify_api(tampered).json()
    assert body["valid"] is False
    assert "nobody" in body["signatures"]["agent"]


def test_what_is_no_receipt_is_refused(db: None) -> None:
    response = verify_api({"settlement": "no", "signatures": {}})
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["settlement"]
    response = verify_api({"settlement": {"terms": {}}, "signatures": {}})
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["settlement"] == [
        "The settlement names no parties (parties.user and parties.agent)."
    ]


@override_settings(RECEIPT_CHECKS_PER_MINUTE=2)
def test_an_address_that_checks_too_often_is_told_when_to_come_back(db: None) -> None:
    """Two checks a minute here, the API's and the page's counted together: the third from the same
    address is a 429 with Retry-After, through either door, and fetches nothing."""
    no_receipt = {"settlement": {"terms": {}}, "signatures": {}}
    assert verify_api(no_receipt).status_code == 400
    assert Client().post(reverse("receipts:verify"), {"receipt": "{}"}).status_code == 400

    # An X-Forwarded-For of its own choosing does not make it another address.
    refused = APIClient().post(
        "/api/v1/receipts/verify", no_receipt, format="json", HTTP_X_FORWARDED_FOR="203.0.113.9"
    )
    page = Client().post(reverse("receipts:verify"), {"receipt": "{}"})

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    assert page.status_code == 429
    assert 0 < int(page["Retry-After"]) <= 60
    assert "Too many receipt checks from your address" in page.content.decode()


# --- The page ------------------------------------------------------------------------------------


def test_anyone_checks_a_receipt_on_the_page(live_stack: LiveStack, receipt: dict[str, Any]) -> None:
    page = Client()
    url = reverse("receipts:verify")
    assert page.get(url).status_code == 200

    held = page.post(url, {"receipt": json.dumps(receipt)})
    assert held.status_code == 200
    assert "The receipt holds" in held.content.decode()

    failed = page.post(url, {"receipt": json.dumps(with_other_terms(receipt))}).content.decode()
    assert "The receipt does not hold" in failed
    assert "The signature is over another settlement: terms differ." in failed

    unreadable = page.post(url, {"receipt": "{not json"})
    assert unreadable.status_code == 400
    assert "This is not JSON" in unreadable.content.decode()


# --- The management command, offline ---------------------------------------------------------------


def files(
    tmp_path: Path, receipt: dict[str, Any], keys: dict[str, SigningKey], *, swapped: bool = False
) -> list[str]:
    """The command's arguments: the receipt, and each role's key set saved for its party's URL (or,
    ``swapped``, for the other party's)."""
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    parties = receipt["settlement"]["parties"]
    given = []
    for role, key in keys.items():
        path = tmp_path / f"{role}-jwks.json"
        path.write_text(json.dumps({"keys": [key.public_jwk]}))
        url = parties["agent" if role == "user" else "user"]["jwks"] if swapped else parties[role]["jwks"]
        given.append(f"--jwks={url}={path}")
    return [str(tmp_path / "receipt.json"), *given]


def test_the_command_checks_a_receipt_offline(
    tmp_path: Path, receipt: dict[str, Any], keys: dict[str, SigningKey], capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("verify_receipt", *files(tmp_path, receipt, keys))
    out = capsys.readouterr().out
    assert "user: holds\nagent: holds\n" in out
    assert "Both signatures hold" in out


def test_the_command_fails_a_tampered_receipt_or_a_missing_key_set(
    tmp_path: Path, receipt: dict[str, Any], keys: dict[str, SigningKey]
) -> None:
    with pytest.raises(CommandError, match="terms differ"):
        call_command("verify_receipt", *files(tmp_path, with_other_terms(receipt), keys))
    with pytest.raises(CommandError, match="No key set file was given"):
        call_command("verify_receipt", *files(tmp_path, receipt, {"user": keys["user"]}))


def test_the_command_checks_each_side_only_with_its_own_partys_key_set(
    tmp_path: Path, receipt: dict[str, Any], keys: dict[str, SigningKey]
) -> None:
    """Both key sets given, but each under the other party's URL: neither side's key vouches for the
    other's signature."""
    with pytest.raises(CommandError, match=r"user: .*agent: "):
        call_command("verify_receipt", *files(tmp_path, receipt, keys, swapped=True))


def test_the_command_names_the_form_of_a_key_set_argument(
    tmp_path: Path, receipt: dict[str, Any], keys: dict[str, SigningKey]
) -> None:
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    with pytest.raises(CommandError, match="is not URL=FILE"):
        call_command("verify_receipt", str(tmp_path / "receipt.json"), f"--jwks={tmp_path / 'a.json'}")


# --- Our side downloads its receipt -------------------------------------------------------------------


def test_our_side_downloads_its_receipt(
    agent: Agent, seller: Agent, receipt: dict[str, Any], owner: Any, logged_in: Client
) -> None:
    negotiation = Negotiation.objects.create(
        tenant=agent.tenant, agent=agent, direction=Negotiation.Direction.OUTBOUND, task_id="task-1"
    )
    Settlement.objects.create(
        tenant=agent.tenant,
        negotiation=negotiation,
        outcome=Settlement.Outcome.AGREED,
        basis=Settlement.Basis.REFERENCE,
        terms=TERMS,
        signature=Settlement.Signature.COUNTERSIGNED,
        signed_settlement=receipt["settlement"],
        our_signature=receipt["signatures"]["user"]["jws"],
        their_signature=receipt["signatures"]["agent"]["jws"],
    )
    detail = logged_in.get(reverse("negotiations:detail", kwargs={"tenant": "acme", "pk": negotiation.pk}))
    assert "Download the receipt" in detail.content.decode()
    page = logged_in.get(reverse("negotiations:receipt", kwargs={"tenant": "acme", "pk": negotiation.pk}))
    assert page.status_code == 200
    assert page["Content-Disposition"] == f'attachment; filename="receipt-{negotiation.pk}.json"'
    assert json.loads(page.content) == receipt

    _, key = services.api_key_create(tenant=agent.tenant, name="backend", scopes=["read"], user=owner)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    answer = api.get(f"/api/v1/negotiations/{negotiation.pk}/receipt")
    assert answer.status_code == 200
    assert (
        answer.json()
        == receipt
        == signatures.receipt_of(Settlement.objects.for_tenant(agent.tenant_id).get())
    )
    settlement = api.get(f"/api/v1/settlements?negotiation={negotiation.pk}").json()["results"][0]
    assert (settlement["signature"], settlement["signature_reason"]) == ("countersigned", "")

    Settlement.objects.for_tenant(agent.tenant_id).update(signed_settlement=None)
    assert api.get(f"/api/v1/negotiations/{negotiation.pk}/receipt").status_code == 404
    missing = logged_in.get(reverse("negotiations:receipt", kwargs={"tenant": "acme", "pk": negotiation.pk}))
    assert missing.status_code == 404


# --- The card ------------------------------------------------------------------------------------


def test_the_card_declares_the_extension_with_its_key_set_only_when_the_tenant_signs(agent: Agent) -> None:
    assert receipts.identity_of_card(card_document(agent)) is None
    signing_key_create(tenant=agent.tenant)
    assert receipts.identity_of_card(card_document(agent)) == party(agent)
    # An override cannot name another key set: the extension stays as derived.
    other = {"uri": receipts.SETTLEMENT_EXTENSION, "params": {"jwks": "https://evil.example/jwks.json"}}
    agent.card_fields = {"capabilities": {"extensions": [other]}}
    agent.save()
    assert receipts.identity_of_card(card_document(agent)) == party(agent)


# --- The canonical settlement --------------------------------------------------------------------


def test_the_canonical_form_reads_a_protobuf_double_as_the_integer_it_holds() -> None:
    """A2A 1.0 carries 1030 as 1030.0 (docs/wire-format.md#dialects): both sides sign the same bytes."""
    assert receipts.canonical_bytes({"amount": 1030.0, "currency": "EUR"}) == receipts.canonical_bytes(
        {"currency": "EUR", "amount": 1030}
    )
    assert receipts.canonical_bytes({"amount": "1030"}) != receipts.canonical_bytes({"amount": 1030})


def test_a_card_without_the_extension_or_its_key_set_states_no_signing_party() -> None:
    extension = {"uri": receipts.SETTLEMENT_EXTENSION, "params": {"jwks": "https://a.example/jwks.json"}}
    party_extension = {"uri": receipts.PARTY_EXTENSION, "params": {"partyId": "p1"}}
    card = {"name": "A", "capabilities": {"extensions": [party_extension, extension]}}
    assert receipts.identity_of_card(card) == {
        "name": "A",
        "partyId": "p1",
        "jwks": "https://a.example/jwks.json",
    }
    assert receipts.identity_of_card({"name": "A", "capabilities": {"extensions": [party_extension]}}) is None
    no_key_set = {"uri": receipts.SETTLEMENT_EXTENSION, "params": {"jwks": 7}}
    assert receipts.identity_of_card({"name": "A", "capabilities": {"extensions": [no_key_set]}}) is None
    assert receipts.identity_of_card({}) is None


# --- Hostile key sets and receipts ---------------------------------------------------------------


def test_a_secret_under_the_signing_kid_is_no_key(receipt: dict[str, Any]) -> None:
    """A key set that lists an HMAC secret (``oct``) under the signature's kid: ES256 cannot read it,
    and the check says the signature does not hold instead of failing on it (a 500 before)."""
    kid = receipts.header_of(receipt["signatures"]["agent"]["jws"])["kid"]
    secret = {"kid": kid, "kty": "oct", "k": "c2VjcmV0"}

    def keys_for(url: str) -> list[Any]:
        return [secret]

    check = receipts.verify_receipt(receipt, keys_for)
    assert not check.valid
    assert "does not hold" in str(check.signatures["agent"])


def test_a_receipt_signed_twice_with_one_key_does_not_hold(
    agent: Agent, seller: Agent, keys: dict[str, SigningKey]
) -> None:
    """Both roles' signatures made with Tomas's key, each party naming a key set that lists it: each
    holds on its own, but one party signed for both, so the receipt proves no agreement."""
    settlement = settlement_of(agent, seller)
    key = keys["user"]
    forged = receipts.receipt(
        settlement,
        {"user": signed_by(key, agent, settlement), "agent": signed_by(key, seller, settlement)},
    )

    def keys_for(url: str) -> list[Any]:
        return [{**receipts.public_jwk(key.private_pem), "kid": key.kid}]

    check = receipts.verify_receipt(forged, keys_for)
    assert not check.valid
    assert check.signatures == {
        "user": None,
        "agent": "It is made with the same key as the user side's: one party signed for both.",
    }


class KeySetServer(LoopbackServer):
    """Serves ``body`` as a key set at any path."""

    what = "the key set server"

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.body = body
        self.listen(Starlette(routes=[Route("/{path:path}", self.serve)]))

    async def serve(self, request: Request) -> Response:
        return Response(self.body, media_type="application/json")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        # Anyone names the key set's URL: a body of any length is not read whole.
        (b'{"keys": [], "pad": "' + b"x" * 1_000_000 + b'"}', "longer than 65536 bytes"),
        # Nested past what the JSON reader can recurse into (a RecursionError, a 500, before).
        (b"[" * 30_000 + b"]" * 30_000, "could not be fetched"),
    ],
)
def test_a_key_set_too_long_or_too_deep_is_a_reason_not_an_error(
    receipt: dict[str, Any], body: bytes, said: str
) -> None:
    with KeySetServer(body) as server:
        tampered = copy.deepcopy(receipt)
        jws = tampered["signatures"]["agent"]["jws"]
        url = f"{server.origin}/jwks.json"
        tampered["settlement"]["parties"]["agent"]["jwks"] = url
        header = {**receipts.header_of(jws), "jku": url}
        encoded = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
        tampered["signatures"]["agent"]["jws"] = ".".join([encoded, *jws.split(".")[1:]])
        response = verify_api(tampered)
    assert response.status_code == 200, response.content
    assert said in response.json()["signatures"]["agent"]
