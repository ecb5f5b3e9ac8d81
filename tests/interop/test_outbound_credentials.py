"""Our client presents the tenant's credential for a counterparty: on the card fetch and on every call.

The counterparty is an Index-style peer (``IndexPeer``) that answers only
requests carrying the credential it expects, and records what each request
presented.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agents.models import Agent
from negotiations.client import CounterpartyError, covers, credential_headers, send_move
from negotiations.models import CounterpartyCredential
from negotiations.wire import Move
from parley.models import Tenant
from tests.interop.index_peer import IndexPeer, ScriptedSeller

pytestmark = pytest.mark.django_db

SECRET = "s3cret-for-idris"


class GuardedPeer(IndexPeer):
    """An Index-style peer behind a header check: ``header: value`` or 401."""

    def __init__(self, header: str, value: str) -> None:
        super().__init__(ScriptedSeller())
        self.header, self.value = header, value
        self.presented: list[tuple[str, str, str | None]] = []

    async def serve(self, request: Request) -> Response:
        presented = request.headers.get(self.header)
        self.presented.append((request.method, request.url.path, presented))
        if presented != self.value:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await super().serve(request)


def proposal() -> Move:
    return Move("propose", "I can pay €800 a day.", {"amount": 800, "currency": "EUR"}, str(uuid.uuid4()))


def credential(
    tenant: Tenant, prefix: str, secret: str, *, agent: Agent | None = None, **fields: str
) -> None:
    CounterpartyCredential.objects.create(
        tenant=tenant, agent=agent, url_prefix=prefix, secret=secret, **fields
    )


@pytest.fixture
def bearer_peer() -> Iterator[GuardedPeer]:
    with GuardedPeer("Authorization", f"Bearer {SECRET}") as peer:
        yield peer


def test_a_bearer_credential_is_sent_on_the_card_fetch_and_the_call(
    agent: Agent, bearer_peer: GuardedPeer
) -> None:
    credential(agent.tenant, bearer_peer.origin, SECRET)

    exchange = send_move(url=bearer_peer.url, move=proposal(), agent=agent)

    assert exchange.task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    # The card beside the URL (404), at the origin root, then the move: all with the credential.
    assert bearer_peer.presented == [
        ("GET", "/idris/.well-known/agent-card.json", f"Bearer {SECRET}"),
        ("GET", "/.well-known/agent-card.json", f"Bearer {SECRET}"),
        ("POST", "/idris", f"Bearer {SECRET}"),
    ]


def test_an_api_key_goes_in_its_header(agent: Agent) -> None:
    with GuardedPeer("X-Peer-Key", SECRET) as peer:
        credential(agent.tenant, peer.url, SECRET, scheme="api_key", header="X-Peer-Key")

        send_move(url=peer.url, move=proposal(), agent=agent)

    assert {value for _, _, value in peer.presented} == {SECRET}


def test_without_a_credential_the_peer_refuses_the_card(agent: Agent, bearer_peer: GuardedPeer) -> None:
    with pytest.raises(CounterpartyError) as raised:
        send_move(url=bearer_peer.url, move=proposal(), agent=agent)

    assert str(raised.value) == (
        f"{bearer_peer.url}: no agent card (HTTP 401 from {bearer_peer.url}/.well-known/agent-card.json)"
    )
    assert [value for _, _, value in bearer_peer.presented] == [None]


def test_another_tenants_credential_is_never_sent(
    agent: Agent, other_tenant: Tenant, bearer_peer: GuardedPeer
) -> None:
    credential(other_tenant, bearer_peer.origin, SECRET)

    with pytest.raises(CounterpartyError):
        send_move(url=bearer_peer.url, move=proposal(), agent=agent)

    assert [value for _, _, value in bearer_peer.presented] == [None]


def test_another_agents_credential_is_never_sent(
    agent: Agent, tenant: Tenant, bearer_peer: GuardedPeer
) -> None:
    colleague = Agent.objects.create(tenant=tenant, slug="ana", name="Ana's agent")
    credential(tenant, bearer_peer.origin, SECRET, agent=colleague)

    with pytest.raises(CounterpartyError):
        send_move(url=bearer_peer.url, move=proposal(), agent=agent)


def test_the_agents_own_credential_beats_the_tenants(agent: Agent, bearer_peer: GuardedPeer) -> None:
    credential(agent.tenant, bearer_peer.origin, "the tenant's")
    credential(agent.tenant, bearer_peer.origin, SECRET, agent=agent)

    send_move(url=bearer_peer.url, move=proposal(), agent=agent)

    assert {value for _, _, value in bearer_peer.presented} == {f"Bearer {SECRET}"}


@pytest.mark.parametrize(
    ("prefixes", "expected"),
    [
        # The longest prefix wins, the tenant's included.
        ([("https://peer.example", None), ("https://peer.example/agents/idris", None)], "long"),
        ([("https://peer.example", "agent"), ("https://peer.example/agents/idris", None)], "long"),
        # Equally long: the agent's own.
        ([("https://peer.example/agents", None), ("https://peer.example/agents", "agent")], "agent"),
        # Canonical forms compare equal: case, default port, trailing slash, dot segments.
        ([("HTTPS://Peer.Example:443/agents/./idris/", None)], "long"),
        # Only whole path segments, only the same origin.
        ([("https://peer.example/agents/idr", None)], None),
        ([("https://peer.example.evil.example", None)], None),
        ([("http://peer.example", None)], None),
        ([("https://peer.example:8443", None)], None),
    ],
)
def test_which_credential_covers_a_url(
    agent: Agent, prefixes: list[tuple[str, str | None]], expected: str | None
) -> None:
    for n, (prefix, whose) in enumerate(prefixes):
        owner = agent if whose == "agent" else None
        secret = "agent" if whose == "agent" else ("long" if "idris" in prefix else f"short{n}")
        credential(agent.tenant, prefix, secret, agent=owner)

    headers = credential_headers(agent=agent, url="https://peer.example/agents/idris")

    assert headers == ({"Authorization": f"Bearer {expected}"} if expected else {})


@pytest.mark.parametrize(
    ("prefix", "url", "covered"),
    [
        ("https://a.example", "https://a.example/x/y", True),
        ("https://a.example/", "https://a.example", True),
        ("https://a.example/x", "https://a.example/x", True),
        ("https://a.example/x", "https://a.example/x/", True),
        ("https://a.example/x", "https://a.example/xy", False),
        ("https://a.example/x/y", "https://a.example/x", False),
        ("https://a.example", "https://a.example.b.example/", False),
        ("https://a.example", "https://b.example/https://a.example", False),
        ("not a url", "https://a.example", False),
    ],
)
def test_covers(prefix: str, url: str, covered: bool) -> None:
    assert covers(prefix, url) is covered
