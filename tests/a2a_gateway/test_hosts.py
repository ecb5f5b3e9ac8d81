"""An agent on a host name of its own: card and JSON-RPC endpoint at the host's root, on the live stack.

The live stack listens on 127.0.0.1; requests "to" the agent's host name are
sent there with that Host header, as DNS would route them. For a2a-sdk's
client, :class:`HostsFile` plays the part of DNS: every request keeps its URL's
Host header and goes to the live stack.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import AgentCard, SendMessageRequest, Task, TaskState
from django.core.exceptions import ValidationError
from starlette.responses import PlainTextResponse

from a2a_gateway.hosts import check_host_name
from a2a_gateway.models import A2ATask
from a2a_gateway.signing import signing_key_create
from agents import configuration
from agents.models import Agent
from agents.services import host_names
from negotiations.client import read_card
from tests.a2a_gateway.conftest import Endpoint, proposal, proved_host_name, user_message
from tests.conftest import LiveStack, wait_until
from tests.loopback import NameServer, PageServer

T = TypeVar("T")
HOST = "idris.example.com"


class HostsFile(httpx.AsyncBaseTransport):
    """Sends every request to ``origin`` while its Host header still names the host in its URL."""

    def __init__(self, origin: str) -> None:
        parts = urlsplit(origin)
        self.host, self.port = parts.hostname or "", parts.port
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(scheme="http", host=self.host, port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def via_host(live_stack: LiveStack, make: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    """Run ``make(http)`` with an httpx client whose every request reaches the live stack."""

    async def main() -> T:
        async with httpx.AsyncClient(transport=HostsFile(live_stack.url), timeout=30) as http:
            return await make(http)

    return asyncio.run(main())


def get(live_stack: LiveStack, path: str, host: str = HOST, **headers: str) -> httpx.Response:
    return httpx.get(f"{live_stack.url}{path}", headers={"Host": host, **headers}, timeout=30)


@pytest.fixture
def hosted(live_stack: LiveStack, seller_endpoint: Endpoint, seller: Agent) -> Agent:
    """The seller on its own proved host name, once the web process has seen it (its table is reloaded
    briefly)."""
    proved_host_name(seller, HOST)
    wait_until(
        lambda: get(live_stack, "/.well-known/agent-card.json").status_code == 200,
        what="the web process to serve the new host name",
    )
    return seller


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("card_path", ["/.well-known/agent-card.json", "/.well-known/agent.json"])
def test_the_card_is_at_the_hosts_root_and_names_it(
    live_stack: LiveStack, hosted: Agent, card_path: str
) -> None:
    response = get(live_stack, card_path)

    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "Idris Haddad"
    # The scheme of PUBLIC_BASE_URL (http on the test stack), never the request's.
    assert [(i["url"], i["protocolVersion"]) for i in body["supportedInterfaces"]] == [
        (f"http://{HOST}/", "1.0"),
        (f"http://{HOST}/", "0.3"),
    ]
    assert body["url"] == f"http://{HOST}/"


@pytest.mark.django_db(transaction=True)
def test_the_card_at_the_agents_path_still_names_the_path(
    live_stack: LiveStack, hosted: Agent, seller_endpoint: Endpoint
) -> None:
    body = httpx.get(seller_endpoint.card_url, timeout=30).json()

    assert body["url"] == seller_endpoint.url


@pytest.mark.django_db(transaction=True)
def test_the_host_name_matches_whatever_its_case_or_port(live_stack: LiveStack, hosted: Agent) -> None:
    response = get(live_stack, "/.well-known/agent-card.json", host="Idris.Example.COM.:443")

    assert response.status_code == 200
    assert response.json()["url"] == f"http://{HOST}/"


@pytest.mark.django_db(transaction=True)
def test_the_sdk_client_negotiates_at_the_hosts_root(live_stack: LiveStack, hosted: Agent) -> None:
    async def exchange(http: httpx.AsyncClient) -> tuple[AgentCard, Task]:
        card = await A2ACardResolver(http, f"http://{HOST}").get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        [event] = [e async for e in client.send_message(SendMessageRequest(message=user_message(proposal())))]
        return card, event.task

    card, task = via_host(live_stack, exchange)

    assert card.supported_interfaces[0].url == f"http://{HOST}/"
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert A2ATask.across_tenants.get(task_id=task.id).agent_id == hosted.pk


@pytest.mark.django_db(transaction=True)
def test_a_signed_card_on_the_host_names_the_hosts_key_set(live_stack: LiveStack, hosted: Agent) -> None:
    """Our own client fetches keys only from the card's origin: the host's, here."""
    key = signing_key_create(tenant=hosted.tenant)

    card = via_host(live_stack, lambda http: read_card(http, f"http://{HOST}"))

    [signature] = card.signatures
    header = json.loads(base64.urlsafe_b64decode(signature.protected + "=" * (-len(signature.protected) % 4)))
    assert header["jku"] == f"http://{HOST}/.well-known/jwks.json"
    assert get(live_stack, "/.well-known/jwks.json").json() == {"keys": [key.public_jwk]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/login/"),
        ("GET", "/admin/"),
        ("GET", "/health"),
        ("POST", "/a2a/globex/idris"),
        ("GET", "/a2a/acme/tomas/.well-known/agent-card.json"),
        ("GET", "/idris/.well-known/agent-card.json"),
    ],
)
def test_nothing_else_is_served_on_the_host(
    live_stack: LiveStack, hosted: Agent, agent: Agent, method: str, path: str
) -> None:
    """Not the dashboard, not another agent: the host is the agent's only."""
    response = httpx.request(method, f"{live_stack.url}{path}", headers={"Host": HOST}, timeout=30)

    assert response.status_code == 404
    assert response.json()["error"]["message"] == f"Nothing is served at {path!r} on this host."


@pytest.mark.django_db(transaction=True)
def test_a_host_name_no_agent_has_is_left_to_django(live_stack: LiveStack, hosted: Agent) -> None:
    response = get(live_stack, "/.well-known/agent-card.json", host="nobody.example.com")

    assert response.status_code == 400  # Django's ALLOWED_HOSTS refusal


@pytest.mark.django_db(transaction=True)
def test_an_agent_without_a_host_name_is_not_served_on_one(
    live_stack: LiveStack, hosted: Agent, seller_endpoint: Endpoint
) -> None:
    hosted.host_name = None
    hosted.save()

    wait_until(
        lambda: get(live_stack, "/.well-known/agent-card.json").status_code == 400,
        what="the web process to forget the host name",
    )


@pytest.mark.django_db(transaction=True)
def test_a_host_name_serves_nothing_until_proved(
    live_stack: LiveStack,
    hosted: Agent,
    agent: Agent,
    name_server: NameServer,
    host_web: PageServer,
    resolve_to: dict[str, list[str]],
) -> None:
    """Tomas's agent claims tomas.example.com: the web process, which serves Idris's host, serves
    nothing on Tomas's until its HTTP token proves it."""
    configuration.agent_update(agent=agent, values={"host_name": "tomas.example.com"})
    claimed = Agent.across_tenants.get(pk=agent.pk)
    # Proving another name reloads the table after the claim: when that one is served, this one would be.
    proved_host_name(hosted, "idris.example.org")
    wait_until(
        lambda: get(live_stack, "/.well-known/agent-card.json", host="idris.example.org").status_code == 200,
        what="the web process to serve the other proved host name",
    )

    assert get(live_stack, "/.well-known/agent-card.json", host="tomas.example.com").status_code == 400

    resolve_to["tomas.example.com"] = ["127.0.0.1"]
    path = f"/.well-known/parley-verification/{claimed.host_name_token}"
    host_web.pages[path] = PlainTextResponse(f"parley-verification={claimed.host_name_token}")
    host_names.verify(agent=claimed)

    wait_until(
        lambda: get(live_stack, "/.well-known/agent-card.json", host="tomas.example.com").status_code == 200,
        what="the web process to serve the proved host name",
    )
    card = get(live_stack, "/.well-known/agent-card.json", host="tomas.example.com").json()
    assert (card["name"], card["url"]) == (agent.name, "http://tomas.example.com/")


@pytest.mark.django_db(transaction=True)
def test_a_changed_host_name_serves_nothing_until_proved_again(live_stack: LiveStack, hosted: Agent) -> None:
    configuration.agent_update(agent=hosted, values={"host_name": "idris.example.org"})

    wait_until(
        lambda: get(live_stack, "/.well-known/agent-card.json").status_code == 400,
        what="the web process to forget the old host name",
    )
    assert get(live_stack, "/.well-known/agent-card.json", host="idris.example.org").status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("host_name", "error"),
    [
        ("buyer.example.com", None),
        ("xn--bcher-kva.example", None),
        (None, None),
        ("", None),
        ("Buyer.example.com", "Write the host name in lower case."),
        ("buyer.example.com/path", "Enter a valid domain name."),
        ("bücher.example", "Enter a valid domain name."),
        ("127.0.0.1", "Enter a valid domain name."),
        ("parley.example", "That is the platform's own host name."),
        ("app.parley.example", "That is the platform's own host name."),
        # A subdomain pattern of ALLOWED_HOSTS is where agents' own subdomains live.
        ("buyer.parley.example", None),
    ],
)
def test_a_host_name_is_checked_at_save_time(host_name: str | None, error: str | None, settings: Any) -> None:
    settings.PUBLIC_BASE_URL = "https://parley.example"
    settings.ALLOWED_HOSTS = ["app.parley.example", "localhost", ".parley.example"]
    agent = Agent(host_name=host_name)

    if error is None:
        check_host_name(agent)
    else:
        with pytest.raises(ValidationError) as raised:
            check_host_name(agent)
        assert raised.value.message_dict == {"host_name": [error]}


def tls_ask(live_stack: LiveStack, query: str) -> httpx.Response:
    """Ask as Caddy's on-demand TLS does, by the proxy's own name for the web process."""
    return httpx.get(f"{live_stack.url}/tls/allowed{query}", headers={"Host": "web:8000"}, timeout=30)


@pytest.mark.django_db(transaction=True)
def test_the_tls_ask_allows_the_platforms_host_and_proved_host_names_only(
    live_stack: LiveStack, hosted: Agent, agent: Agent
) -> None:
    configuration.agent_update(agent=agent, values={"host_name": "tomas.example.com"})
    # Proving another name reloads the table after the claim: when that one is allowed, this one would be.
    proved_host_name(hosted, "idris.example.org")
    wait_until(
        lambda: tls_ask(live_stack, "?domain=idris.example.org").status_code == 200,
        what="the web process to allow the newly proved host name",
    )
    platform = urlsplit(live_stack.url).hostname

    answers = {
        domain: tls_ask(live_stack, f"?domain={domain}").status_code
        for domain in ("Idris.Example.org.", HOST, platform, "tomas.example.com", "nobody.example.com")
    }

    assert answers == {
        "Idris.Example.org.": 200,
        HOST: 404,  # proved once, then changed
        platform: 200,
        "tomas.example.com": 404,  # claimed, not proved
        "nobody.example.com": 404,
    }
    assert tls_ask(live_stack, "").status_code == 400
