"""Fixtures of the requester's side: a requester agent with a credential for a recipient, and
requests addressed to one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agents.models import Agent
from exchange import outbound
from exchange.models import OutboundExchange
from negotiations.models import CounterpartyCredential
from tests.conftest import runs_settle
from tests.exchange.issuer import Issuer, request_for
from tests.exchange.servers import Behaviour, Recipient, Sink

# The key our agent presents to the recipient (its CounterpartyCredential's secret).
KEY = "pk_test.recipient-key-for-acme"


@pytest.fixture(autouse=True)
def runs_settled(request: pytest.FixtureRequest) -> Iterator[None]:
    """On the live stack, an executed exchange starts a run the worker steps: the test ends once
    it has stopped (:func:`tests.conftest.runs_settle`)."""
    yield
    if "live_stack" in request.fixturenames:
        runs_settle()


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def sink() -> Iterator[Sink]:
    with Sink() as server:
        yield server


@pytest.fixture
def recipient_for(agent: Agent) -> Iterator[Callable[..., Recipient]]:
    """``recipient_for(behaviour)``: a started :class:`Recipient` (an honest card when the behaviour
    names no params), for which ``agent`` holds a credential."""
    started: list[Recipient] = []

    def make(behaviour: Behaviour | None = None, *, honest_card: bool = True) -> Recipient:
        server = Recipient(behaviour)
        if honest_card and server.behaviour.params is None:
            server.behaviour.params = server.honest_params()
        CounterpartyCredential.objects.create(
            tenant=agent.tenant,
            agent=agent,
            url_prefix=server.url,
            scheme=CounterpartyCredential.Scheme.API_KEY,
            header="X-API-Key",
            secret=KEY,
        )
        started.append(server.__enter__())
        return server

    yield make
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture
def send(agent: Agent, issuer: Issuer) -> Callable[..., OutboundExchange]:
    """``send(url, request=None, prepared_by_host=False)``: queue a request from ``agent`` to ``url``
    (default: a complete one addressed to it), run the send as the worker would, and return the row."""

    def make(
        url: str, request: dict[str, Any] | None = None, prepared_by_host: bool = False
    ) -> OutboundExchange:
        request = request or request_for(url, issuer.token(url))
        exchange = outbound.exchange_send_start(
            agent=agent, url=url, request=request, prepared_by_host=prepared_by_host
        )
        outbound.exchange_send(exchange_id=exchange.pk, tenant_id=exchange.tenant_id)
        exchange.refresh_from_db()
        return exchange

    return make
