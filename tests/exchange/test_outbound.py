"""Queueing an exchange and recording its outcome (:mod:`exchange.outbound`), without the network
where none is needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent
from exchange import outbound, wire
from exchange.models import OutboundExchange
from parley.models import Event
from tests.exchange.issuer import Issuer, request_for
from tests.exchange.servers import Sink

pytestmark = pytest.mark.django_db

URL = "https://recipient.example/a2a/globex/helpdesk"


@pytest.fixture
def request_(issuer: Issuer) -> dict[str, Any]:
    return request_for(URL, issuer.token(URL))


def test_a_request_is_queued_with_its_reference_and_sent_after_the_commit(
    agent: Agent, request_: dict[str, Any], django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        exchange = outbound.exchange_send_start(agent=agent, url=URL, request=request_)

    row = OutboundExchange.across_tenants.get()
    assert row.pk == exchange.pk
    assert (row.tenant_id, row.agent_id, row.url) == (agent.tenant_id, agent.pk, URL)
    assert (row.exchange_id, row.reference) == (request_["exchangeId"], wire.reference_of(request_))
    assert (row.status, row.request, row.prepared_by_host) == ("queued", request_, False)
    assert len(callbacks) == 1  # the task, enqueued only once the row is committed


@pytest.mark.parametrize(
    ("url", "request_changes", "errors"),
    [
        ("ftp://recipient.example/a", {}, {"url"}),
        ("not a url", {}, {"url"}),
        (f"https://recipient.example/{'a' * 500}", {}, {"url"}),
        (URL, {"delegation": {}}, {"request"}),
        (URL, {"exchangeId": "-starts-badly"}, {"request"}),
        ("nope", {"surprise": True}, {"url", "request"}),
    ],
)
def test_what_is_not_valid_is_refused_at_its_field_and_nothing_is_written(
    agent: Agent, request_: dict[str, Any], url: str, request_changes: dict[str, Any], errors: set[str]
) -> None:
    with pytest.raises(ValidationError) as refused:
        outbound.exchange_send_start(agent=agent, url=url, request={**request_, **request_changes})

    assert set(refused.value.message_dict) == errors
    if "request" in errors:
        [message] = refused.value.message_dict["request"]
        assert message.startswith("request")
    assert not OutboundExchange.across_tenants.exists()


def test_a_number_storage_would_not_give_back_exactly_is_refused(
    agent: Agent, request_: dict[str, Any]
) -> None:
    request_["protected"] = {"account": {"limits": [1e15, 1e16]}}

    with pytest.raises(ValidationError) as refused:
        outbound.exchange_send_start(agent=agent, url=URL, request=request_)

    assert refused.value.message_dict == {
        "request": [
            "request.protected.account.limits[1]: a number beyond ±(2**53 - 1), which JSON cannot carry "
            "exactly"
        ]
    }


def test_a_request_is_kept_exactly_until_it_is_sent(agent: Agent, request_: dict[str, Any]) -> None:
    request_["protected"] = {"limits": [9007199254740991, 1e15, 0.1, 1e-7, -2.5]}
    exchange = outbound.exchange_send_start(agent=agent, url=URL, request=request_)

    stored = OutboundExchange.across_tenants.get(pk=exchange.pk).request

    assert stored == request_
    assert wire.reference_of(stored) == exchange.reference


def test_a_request_that_is_no_object_is_refused(agent: Agent) -> None:
    with pytest.raises(ValidationError) as refused:
        outbound.exchange_send_start(agent=agent, url=URL, request=["not", "a", "request"])

    assert refused.value.message_dict == {"request": ["request: must be of type object"]}


def test_an_exchange_id_is_sent_once_per_agent(
    agent: Agent, seller: Agent, request_: dict[str, Any], issuer: Issuer
) -> None:
    outbound.exchange_send_start(agent=agent, url=URL, request=request_)
    again = {**request_, "instruction": "Something else entirely."}

    with pytest.raises(ValidationError) as refused:
        outbound.exchange_send_start(agent=agent, url=URL, request=again)

    [message] = refused.value.message_dict["request"]
    assert message.startswith(
        f"request.exchangeId: this agent already sent an exchange {request_['exchangeId']!r}"
    )
    assert OutboundExchange.across_tenants.count() == 1
    # Another agent has exchange ids of its own.
    outbound.exchange_send_start(agent=seller, url=URL, request=request_)
    assert OutboundExchange.across_tenants.count() == 2


def test_sending_an_exchange_that_is_no_longer_queued_does_nothing(
    agent: Agent, issuer: Issuer, sink: Sink
) -> None:
    url = f"{sink.origin}/agent"
    exchange = outbound.exchange_send_start(agent=agent, url=url, request=request_for(url, issuer.token(url)))
    OutboundExchange.across_tenants.filter(pk=exchange.pk).update(
        status=OutboundExchange.Status.FAILED, error="x"
    )

    outbound.exchange_send(exchange_id=exchange.pk, tenant_id=exchange.tenant_id)

    assert sink.received == []
    row = OutboundExchange.across_tenants.get()
    assert (row.status, row.error, row.finished_at) == ("failed", "x", None)
    assert not Event.across_tenants.exists()


def test_another_tenants_exchange_or_none_is_not_sent(agent: Agent, issuer: Issuer, sink: Sink) -> None:
    url = f"{sink.origin}/agent"
    exchange = outbound.exchange_send_start(agent=agent, url=url, request=request_for(url, issuer.token(url)))

    outbound.exchange_send(exchange_id=exchange.pk, tenant_id=exchange.tenant_id + 1)
    outbound.exchange_send(exchange_id=exchange.pk + 1, tenant_id=exchange.tenant_id)

    assert sink.received == []
    assert OutboundExchange.across_tenants.get().status == OutboundExchange.Status.QUEUED


def test_an_unreachable_recipient_fails_the_exchange_and_lets_the_request_go(
    agent: Agent, issuer: Issuer
) -> None:
    url = "http://127.0.0.1:9/a2a/globex/helpdesk"  # the discard port: nothing listens
    exchange = outbound.exchange_send_start(agent=agent, url=url, request=request_for(url, issuer.token(url)))

    outbound.exchange_send(exchange_id=exchange.pk, tenant_id=exchange.tenant_id)

    row = OutboundExchange.across_tenants.get()
    assert (row.status, row.request, row.receipt) == ("failed", None, None)
    assert row.error.startswith(f"{url}: its agent card could not be read (ConnectError)")
    assert Event.across_tenants.get().kind == "exchange.failed"
