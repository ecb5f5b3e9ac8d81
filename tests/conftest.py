"""Fixtures: tenants and people, and the live stack — a real web server and Celery worker.

The live stack runs ``parley.asgi`` under uvicorn and a Celery worker as
subprocesses against the test database (Postgres) and Redis, exactly as in
production. Tests that use it need committed data: mark them
``@pytest.mark.django_db(transaction=True)``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
import pytest
import redis
from allauth.account.models import EmailAddress
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from cryptography.fernet import Fernet
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agents.models import Agent, Intent, ModelEndpoint, Run
from parley import devstack, live
from parley.models import Membership, Tenant
from representative.models import GroundingDocument
from tests.chat_server import ChatServer
from tests.representative import studio

if TYPE_CHECKING:
    from tests.loopback import NameServer, PageServer

PASSWORD = "correct-horse-battery"
# Index Network's scenario files, shipped in scenarios/index-network (MIT; SOURCE.md says where from).
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios" / "index-network"
# The file the README's "Running it for real" imports.
README_SCENARIO = (
    SCENARIOS / "with-instructions" / "05-users-05-intents-cofounders-and-project-collaborators.json"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, naming the service, when Postgres or Redis does not answer: otherwise every
    test fails on its own with a connection error."""
    if settings.EMBEDDED:
        return  # parley.settings.test_sqlite: nothing outside this process
    db = settings.DATABASES["default"]
    try:
        psycopg.connect(
            host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname="postgres", connect_timeout=5
        ).close()
    except psycopg.OperationalError as error:
        pytest.exit(f"Postgres at {db['HOST']}:{db['PORT']} (TEST_DATABASE_URL) does not answer: {error}", 3)
    for url in (settings.REDIS_URL, settings.TEST_SPARE_REDIS_URL):
        try:
            redis.Redis.from_url(url, socket_timeout=5).ping()
        except redis.RedisError as error:
            pytest.exit(f"Redis at {url} does not answer: {error}", 3)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the embedded default (``parley.settings.test_sqlite``) leave out what needs a service it does
    not have: the live stack (Postgres shared with other processes), Redis, what only Postgres has,
    and Chromium (whose tests all drive the live stack)."""
    if not settings.EMBEDDED:
        return
    kept, left_out = [], []
    for item in items:
        needs_services = "live_stack" in getattr(item, "fixturenames", ()) or any(
            item.get_closest_marker(name) for name in ("browser", "redis", "postgres")
        )
        (left_out if needs_services else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.fixture
def resolve_to(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Host names the system resolver answers with the addresses the test puts here, in order."""
    names: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def resolver(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in names:
            return real(host, port, *args, **kwargs)
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in names[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    return names


@pytest.fixture
def name_server(settings: Any) -> Iterator[NameServer]:
    """A name server on loopback, the one Parley asks for host names' TXT records
    (``HOST_NAME_DNS_SERVERS``); it knows no name until the test adds its records."""
    from tests.loopback import NameServer  # tests.loopback imports this module

    with NameServer() as server:
        settings.HOST_NAME_DNS_SERVERS = [server.address]
        yield server


@pytest.fixture
def host_web(settings: Any) -> Iterator[PageServer]:
    """An HTTP server on loopback, on the port where Parley fetches host names' HTTP tokens
    (``HOST_NAME_HTTP_PORT``); a host name the test resolves to 127.0.0.1 (``resolve_to``) is
    served by it."""
    from tests.loopback import PageServer

    with PageServer() as server:
        settings.HOST_NAME_HTTP_PORT = server.port
        yield server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate, *, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def wait_web(process: subprocess.Popen[bytes], url: str, log: str, *, timeout: float = 30.0) -> None:
    """Wait until the web ``process`` at ``url`` answers its login page; fail the test, naming the
    ``log`` file, if it exits first, or after ``timeout`` seconds."""

    def up() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the web process at {url} exited; see {log}")
        try:
            return httpx.get(f"{url}/login/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=timeout, what=f"the web process at {url}")


def runs_settle(timeout: float = 30.0) -> None:
    """Wait until no run is stepping: the live worker's step would otherwise race the flush that
    ends a transactional test (Postgres may then find the TRUNCATE and the step deadlocked)."""
    wait_until(
        lambda: not Run.across_tenants.filter(status__in=Run.STEPPING).exists(),
        timeout=timeout,
        what="the runs the test started to stop stepping",
    )


# A host name and the public address the test resolver gives it (see ``public_name``).
PUBLIC_NAME = "public.example"
PUBLIC_ADDRESS = "8.8.8.8"
# What the address policy says of a host on a private address (parley.netguard.POLICY).
PRIVATE = "resolves to a private address; Parley does not call private addresses"
# What production settings need to start: a secret key and field encryption keys of the deployment's own.
DEPLOYMENT_SECRETS = {
    "SECRET_KEY": "a-secret-of-this-deployment-" * 3,
    "FIELD_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
}


@pytest.fixture
def public_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """:data:`PUBLIC_NAME`, a host name the system resolver answers with the public address
    :data:`PUBLIC_ADDRESS`, which in turn resolves to 127.0.0.1: a server on loopback that the
    address policy takes for a public one, as behind a NAT. Only the resolver is replaced; a
    synchronous connection to the literal address resolves it through the resolver (asyncio's does
    not, so it reaches only synchronous clients)."""
    real = socket.getaddrinfo

    def resolver(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == PUBLIC_NAME:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC_ADDRESS, port))]
        return real("127.0.0.1" if host == PUBLIC_ADDRESS else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    return PUBLIC_NAME


def run_python(*arguments: str, env: dict[str, str], check: bool = False) -> subprocess.CompletedProcess[str]:
    """``python *arguments`` in the checkout with ``env``, output as text; ``check`` raises on a failure."""
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=devstack.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


@dataclass
class LiveStack:
    url: str
    env: dict[str, str]


def database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.fixture(scope="session")
def live_stack(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[LiveStack]:
    """A uvicorn web process and a Celery worker process on the test database, for the whole session."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "parley.settings.test",
        "TEST_DATABASE_URL": database_url(),
        "TEST_REDIS_URL": settings.REDIS_URL,
        "PUBLIC_BASE_URL": url,
        "A2A_SEND_TIMEOUT": "30",
        "LOG_LEVEL": "WARNING",
    }
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    logs = devstack.ROOT / ".pytest_cache"
    logs.mkdir(exist_ok=True)
    web_log = (logs / f"live-web-{port}.log").open("w")
    worker_log = (logs / f"live-worker-{port}.log").open("w")
    web = devstack.start_web(port, env, web_log)
    worker = devstack.start_worker(env, worker_log, threads=8)
    previous_base = settings.PUBLIC_BASE_URL
    settings.PUBLIC_BASE_URL = url

    wait_web(web, url, web_log.name)
    try:
        yield LiveStack(url=url, env=env)
    finally:
        settings.PUBLIC_BASE_URL = previous_base
        for process in (web, worker):
            process.terminate()
        for process in (web, worker):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        web_log.close()
        worker_log.close()


def make_user(username: str) -> AbstractUser:
    """An account ``username`` with the password :data:`PASSWORD` and the verified address
    ``<username>@example.com``, as sign-up leaves one: it logs in through the form."""
    email = f"{username}@example.com"
    user = get_user_model().objects.create_user(username=username, email=email, password=PASSWORD)
    EmailAddress.objects.create(user=user, email=email, verified=True, primary=True)
    return user  # type: ignore[return-value]


def principal_member(tenant: Tenant, username: str) -> AbstractUser:
    """A new account, a principal member of ``tenant``: an agent's party, who answers what it asks
    (an agent without a principal never asks)."""
    user = make_user(username)
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.PRINCIPAL)
    return user


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme Robotics")


@pytest.fixture
def logged_in(client: Client, principal: AbstractUser) -> Client:
    """A test client logged in as the party, Tomas."""
    client.force_login(principal)
    return client


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return Tenant.objects.create(slug="globex", name="Globex")


@pytest.fixture
def principal(tenant: Tenant) -> AbstractUser:
    user = make_user("tomas")
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.PRINCIPAL)
    return user


@pytest.fixture
def operator(tenant: Tenant) -> AbstractUser:
    user = make_user("olga")
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.OPERATOR)
    return user


@pytest.fixture
def owner(tenant: Tenant) -> AbstractUser:
    user = make_user("ona")
    user.email = "ona@example.com"
    user.save(update_fields=["email"])
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def agent(tenant: Tenant, principal: AbstractUser) -> Agent:
    return Agent.objects.create(
        tenant=tenant,
        slug="tomas",
        name="Tomas's agent",
        party_id="acme:user:tomas",
        system_prompt="You act for Tomas.",
        terms="amount (number, EUR per day), currency",
        principal=principal,
    )


@pytest.fixture
def intent(agent: Agent) -> Intent:
    return Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Bring in a fractional CFO.")


@pytest.fixture
def seller(other_tenant: Tenant) -> Agent:
    """A counterparty agent in another tenant with a hidden floor of 950 EUR a day."""
    return Agent.objects.create(
        tenant=other_tenant,
        slug="idris",
        name="Idris Haddad",
        terms="amount (number, EUR per day), currency",
        term_guards=[{"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}],
    )


MARKER = {"type": "test.marker"}


@dataclass
class Listener:
    """A channel in a tenant's group of Channels' in-memory layer, as a dashboard socket would be."""

    layer: InMemoryChannelLayer
    channel: str

    def pushed(self) -> list[dict[str, Any]]:
        """The messages pushed to the channel so far, taken off it.

        A marker is sent after them and read back, so nothing ever waits on an empty channel.
        """
        return async_to_sync(self._drain)()

    async def _drain(self) -> list[dict[str, Any]]:
        await self.layer.send(self.channel, MARKER)
        messages = []
        while (message := await self.layer.receive(self.channel)) != MARKER:
            messages.append(message)
        return messages


@pytest.fixture
def listener(settings: Any, tenant: Tenant) -> Listener:
    """A channel in ``tenant``'s group, on the in-memory channel layer the events are pushed through."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    layer = get_channel_layer()
    assert isinstance(layer, InMemoryChannelLayer)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(live.tenant_group(tenant.pk), channel)
    return Listener(layer, channel)


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    """A chat-completions server on loopback with scripted replies (:mod:`tests.chat_server`)."""
    with ChatServer() as server:
        yield server


def on_chat_model(
    agent: Agent,
    chat: ChatServer,
    *,
    name: str = "house-model",
    input_price: int = 2,
    output_price: int = 8,
    attempts: int = 1,
) -> Agent:
    """``agent`` answering with ``chat``'s model: an endpoint ``name`` (prices per million tokens)."""
    ModelEndpoint.objects.create(
        tenant=agent.tenant,
        name=name,
        base_url=chat.url,
        upstream_model=f"{name}-1",
        input_price=Decimal(input_price),
        output_price=Decimal(output_price),
        timeout=5,
        attempts=attempts,
    )
    agent.model = name
    agent.save()
    return agent


# --- The studio's agent, for the representative face ---


@pytest.fixture
def vera(tenant: Tenant, principal: AbstractUser) -> Agent:
    """A studio's agent with two grounding documents, Tomas as its intake owner, a private prompt."""
    agent = Agent.objects.create(
        tenant=tenant,
        slug="vera",
        name="Vera Studio",
        system_prompt="Private: never quote below 1,000 EUR.",
        intake_owner=principal,
    )
    GroundingDocument.objects.create(tenant=tenant, agent=agent, title="Opening hours", text=studio.HOURS)
    GroundingDocument.objects.create(
        tenant=tenant, agent=agent, title="Services and prices", text=f"{studio.PRICES}\n\n{studio.LANGUAGES}"
    )
    return agent


@pytest.fixture
def chat_vera(vera: Agent, chat: ChatServer) -> Agent:
    """``vera`` on the loopback chat model: 2 per million input tokens, 8 per million output tokens."""
    return on_chat_model(vera, chat)
