"""The requester's side against a recipient we write by hand: what it sends, and every refusal.

Each send runs as the worker runs it (:func:`exchange.outbound.exchange_send`), in this process,
against :class:`tests.exchange.servers.Recipient` on loopback, which records every request it
gets. A refusal must leave the exchange FAILED with an error naming the cause, its request
cleared, and — when the refusal comes before A2A — no A2A call made at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from agents.models import Agent
from exchange import client, outbound, wire
from exchange.models import OutboundExchange
from parley.models import Event
from tests.conftest import PRIVATE
from tests.exchange.conftest import KEY
from tests.exchange.issuer import Issuer, request_for
from tests.exchange.servers import Behaviour, Recipient, Sink

pytestmark = pytest.mark.django_db

Send = Callable[..., OutboundExchange]
RecipientFor = Callable[..., Recipient]


def assert_failed(exchange: OutboundExchange, *causes: str) -> None:
    """FAILED, the request gone, the error naming every one of ``causes``, and the event stored."""
    assert exchange.status == OutboundExchange.Status.FAILED, exchange.error
    assert exchange.request is None
    assert exchange.receipt is None
    assert exchange.finished_at is not None
    for cause in causes:
        assert cause in exchange.error, exchange.error
    [event] = Event.across_tenants.filter(kind="exchange.failed")
    assert event.payload == {
        "exchange": str(exchange.pk),
        "agent": str(exchange.agent_id),
        "exchange_id": exchange.exchange_id,
        "status": "failed",
        "reference": exchange.reference,
    }


def assert_only_the_reference_went_over_a2a(recipient: Recipient, exchange: OutboundExchange) -> None:
    """One A2A call, activating the extension, carrying the reference and nothing of the request."""
    [call] = recipient.messages
    assert call.headers["a2a-extensions"] == wire.EXTENSION_URI
    assert call.headers["x-api-key"] == KEY
    message = call.json()["params"]["message"]
    assert message["role"] == "ROLE_USER"
    assert message["extensions"] == [wire.EXTENSION_URI]
    assert message["parts"] == [
        {"data": {"reference": exchange.reference}, "mediaType": wire.REFERENCE_MEDIA_TYPE}
    ]
    assert call.json()["params"]["configuration"]["acceptedOutputModes"] == [wire.RECEIPT_MEDIA_TYPE]


# --- An honest recipient ------------------------------------------------------------------------------


def test_the_request_is_prepared_then_only_its_reference_goes_over_a2a(
    send: Send, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    recipient = recipient_for()
    request = request_for(recipient.url, issuer.token(recipient.url))

    exchange = send(recipient.url, request)

    assert exchange.status == OutboundExchange.Status.COMPLETED, exchange.error
    [preparation] = recipient.preparations
    assert preparation.json() == {"request": request}
    assert preparation.headers["content-type"] == wire.PREPARATION_MEDIA_TYPE
    assert preparation.headers["accept"] == wire.PREPARATION_MEDIA_TYPE
    assert preparation.headers["x-api-key"] == KEY
    assert_only_the_reference_went_over_a2a(recipient, exchange)
    a2a = recipient.messages[0].body.decode()
    for secret in (request["delegation"]["accessToken"], "hunter2-secret", request["instruction"]):
        assert secret not in a2a
    assert exchange.reference == wire.reference_of(request)
    assert exchange.receipt is not None
    assert exchange.receipt["reference"] == exchange.reference
    assert exchange.receipt["exchangeId"] == request["exchangeId"]
    assert isinstance(exchange.receipt["completedAt"], int)  # not the double protobuf made of it
    assert exchange.request is None
    assert exchange.error == ""
    [event] = Event.across_tenants.filter(kind="exchange.completed")
    assert event.payload["status"] == "completed"
    assert "request" not in event.payload


def test_without_a_preparation_endpoint_the_request_is_prepared_out_of_band(
    send: Send, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    recipient = recipient_for(Behaviour(params={}))
    request = request_for(recipient.url, issuer.token(recipient.url))
    recipient.prepared[wire.reference_of(request)] = request  # handed over out of band

    exchange = send(recipient.url, request)

    assert exchange.status == OutboundExchange.Status.COMPLETED, exchange.error
    assert recipient.preparations == []
    assert_only_the_reference_went_over_a2a(recipient, exchange)
    assert exchange.request is None


def test_prepared_by_host_completes_with_the_receipt_of_the_hosts_own_channel(
    send: Send, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    recipient = recipient_for()
    request = request_for(recipient.url, issuer.token(recipient.url))
    recipient.prepared[wire.reference_of(request)] = request  # the host's channel delivered it

    exchange = send(recipient.url, request, prepared_by_host=True)

    assert exchange.status == OutboundExchange.Status.COMPLETED, exchange.error
    assert recipient.preparations == []
    assert_only_the_reference_went_over_a2a(recipient, exchange)


# --- Refused before anything is sent -------------------------------------------------------------------


def test_a_card_without_the_extension_is_refused(send: Send, recipient_for: RecipientFor) -> None:
    recipient = recipient_for(honest_card=False)

    exchange = send(recipient.url)

    assert_failed(exchange, "does not advertise Agent Exchange", wire.EXTENSION_URI)
    assert recipient.preparations == []
    assert recipient.messages == []


def test_a_cross_origin_preparation_url_is_refused(
    send: Send, recipient_for: RecipientFor, sink: Sink
) -> None:
    elsewhere = f"{sink.origin}/agent/agent-exchange/preparation"
    recipient = recipient_for(
        Behaviour(
            params={
                "preparation": {
                    "endpoint": elsewhere,
                    "mediaType": wire.PREPARATION_MEDIA_TYPE,
                    "method": "POST",
                }
            }
        )
    )

    exchange = send(recipient.url)

    assert_failed(exchange, elsewhere, "another origin")
    assert sink.received == []
    assert recipient.preparations == []
    assert recipient.messages == []


def honest(url: str, **changes: Any) -> dict[str, Any]:
    preparation = {"endpoint": url, "mediaType": wire.PREPARATION_MEDIA_TYPE, "method": "POST"}
    preparation.update(changes)
    return {"preparation": {k: v for k, v in preparation.items() if v is not None}}


@pytest.mark.parametrize(
    ("changes", "cause"),
    [
        ({"endpoint": "{origin}/agent/agent-exchange/preparation?to=elsewhere"}, "a query or a fragment"),
        ({"endpoint": "{origin}/agent/agent-exchange/preparation#x"}, "a query or a fragment"),
        ({"endpoint": "http://user:pw@{host}/agent/agent-exchange/preparation"}, "carries userinfo"),
        ({"endpoint": "/agent/agent-exchange/preparation"}, "not an absolute http(s) URL"),
        ({"endpoint": "ftp://{host}/agent/agent-exchange/preparation"}, "not an absolute http(s) URL"),
        ({"endpoint": 7}, "is not a URL"),
        ({"mediaType": "application/json"}, "takes 'application/json'"),
        ({"method": "PUT"}, "method is 'PUT', not POST"),
        ({"method": None}, "exactly endpoint, mediaType and method"),
        ({"headers": {"X-Forward": "yes"}}, "exactly endpoint, mediaType and method"),
    ],
)
def test_a_preparation_the_profile_does_not_allow_is_refused(
    send: Send, recipient_for: RecipientFor, changes: dict[str, Any], cause: str
) -> None:
    started = recipient_for(Behaviour(params={}))
    origin, host = started.origin, started.origin.removeprefix("http://")
    shaped = {k: v.format(origin=origin, host=host) if isinstance(v, str) else v for k, v in changes.items()}
    started.behaviour.params = honest(started.endpoint, **shaped)

    exchange = send(started.url)

    assert_failed(exchange, cause)
    assert started.preparations == []
    assert started.messages == []


def test_plain_http_is_refused_where_settings_do_not_allow_it(
    send: Send, recipient_for: RecipientFor, settings: Any
) -> None:
    settings.WEBHOOKS_ALLOW_HTTP = False  # as in production
    recipient = recipient_for()

    exchange = send(recipient.url)

    assert_failed(exchange, "is not https: the request would travel in the clear")
    assert recipient.preparations == []
    assert recipient.messages == []


def test_a_redirect_from_the_preparation_endpoint_is_refused_and_not_followed(
    send: Send, recipient_for: RecipientFor, sink: Sink
) -> None:
    recipient = recipient_for(
        Behaviour(
            preparation_status=307,
            preparation_body={},
            preparation_headers={"Location": f"{sink.origin}/agent-exchange/preparation"},
        )
    )

    exchange = send(recipient.url)

    assert_failed(exchange, "redirect (HTTP 307)")
    assert len(recipient.preparations) == 1
    assert sink.received == []
    assert recipient.messages == []


def test_a_recipient_whose_host_resolves_to_a_private_address_is_not_called(
    settings: Any, agent: Agent, recipient_for: RecipientFor, issuer: Issuer
) -> None:
    """Queued while the setting allowed it, or its name (``localhost``) resolves to loopback since:
    the send is refused before its card is fetched."""
    recipient = recipient_for()
    url = recipient.url.replace("127.0.0.1", "localhost")
    queued = outbound.exchange_send_start(agent=agent, url=url, request=request_for(url, issuer.token(url)))
    settings.OUTBOUND_ALLOW_PRIVATE = False

    outbound.exchange_send(exchange_id=queued.pk, tenant_id=queued.tenant_id)

    exchange = OutboundExchange.across_tenants.get(pk=queued.pk)
    assert_failed(exchange)
    assert exchange.error == f"{url} was not called: the host 'localhost' {PRIVATE}"
    assert recipient.received == []


@pytest.mark.parametrize(
    ("behaviour", "cause"),
    [
        (
            Behaviour(preparation_type="application/json"),
            f"as 'application/json', not {wire.PREPARATION_MEDIA_TYPE}",
        ),
        (Behaviour(preparation_type="text/plain"), "as 'text/plain'"),
        (
            Behaviour(preparation_body={"reference": "{reference}", "stored": True}),
            "exactly one member, reference, not ['reference', 'stored']",
        ),
        (Behaviour(preparation_body={}), "exactly one member, reference, not []"),
        (Behaviour(preparation_body=["{reference}"]), "exactly one member, reference, not list"),
        (
            Behaviour(preparation_body={"reference": "sha256:" + "A" * 43}),
            "with the reference 'sha256:AAAA",
        ),
        (Behaviour(preparation_body=b'{"reference": NaN}'), "is not JSON"),
        (Behaviour(preparation_body=b"x" * (64 * 1024 + 1)), "longer than 65536 bytes"),
        (
            Behaviour(
                preparation_status=409,
                preparation_type="application/json",
                preparation_body={"error": {"code": "replay", "message": "request.exchangeId: a replay."}},
            ),
            "refused the preparation (HTTP 409): request.exchangeId: a replay.",
        ),
        (
            Behaviour(preparation_status=500, preparation_body=b"<html>"),
            "refused the preparation (HTTP 500).",
        ),
    ],
)
def test_an_answer_to_the_preparation_other_than_exactly_our_reference_is_refused(
    send: Send, recipient_for: RecipientFor, behaviour: Behaviour, cause: str
) -> None:
    recipient = recipient_for(behaviour)

    exchange = send(recipient.url)

    assert_failed(exchange, cause)
    assert len(recipient.preparations) == 1
    assert recipient.messages == []


def test_a_different_reference_names_ours_too(send: Send, recipient_for: RecipientFor) -> None:
    other = "sha256:" + "B" * 43
    recipient = recipient_for(Behaviour(preparation_body={"reference": other}))

    exchange = send(recipient.url)

    assert_failed(exchange, repr(other), exchange.reference, "did not store what was sent")
    assert recipient.messages == []


# --- Refused after the A2A call -----------------------------------------------------------------------


def test_a_rejected_task_fails_the_exchange_with_its_reason(send: Send, recipient_for: RecipientFor) -> None:
    recipient = recipient_for(
        Behaviour(task_state="TASK_STATE_REJECTED", status_text="The delegation token has expired.")
    )

    exchange = send(recipient.url)

    assert_failed(exchange, "rejected the exchange: The delegation token has expired.")
    assert_only_the_reference_went_over_a2a(recipient, exchange)


def test_a_failed_task_fails_the_exchange(send: Send, recipient_for: RecipientFor) -> None:
    recipient = recipient_for(Behaviour(task_state="TASK_STATE_FAILED"))

    exchange = send(recipient.url)

    assert_failed(exchange, "failed the exchange.")


def test_a_task_left_open_is_no_receipt(send: Send, recipient_for: RecipientFor) -> None:
    recipient = recipient_for(Behaviour(task_state="TASK_STATE_INPUT_REQUIRED"))

    exchange = send(recipient.url)

    assert_failed(exchange, "TASK_STATE_INPUT_REQUIRED, not a completed one")


def receipt(**changes: Any) -> dict[str, Any]:
    base = {
        "exchangeId": "{exchangeId}",
        "reference": "{reference}",
        "status": "submitted",
        "completedAt": 1764500000000,
        "processingMode": "tool-confined",
        "modelObservedSecret": False,
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "cause"),
    [
        ({"protected": {"mailbox": "tomas@example.com"}}, "receipt is not valid"),
        ({"modelObservedSecret": True}, "receipt is not valid"),
        ({"completedAt": None}, "receipt is not valid"),
        ({"exchangeId": "someone-elses"}, "receipt is for another exchange or reference"),
        ({"reference": "sha256:" + "C" * 43}, "receipt is for another exchange or reference"),
    ],
)
def test_a_receipt_that_is_not_exactly_ours_is_refused(
    send: Send, recipient_for: RecipientFor, issuer: Issuer, changes: dict[str, Any], cause: str
) -> None:
    recipient = recipient_for()
    request = request_for(recipient.url, issuer.token(recipient.url))
    mine = {"exchangeId": request["exchangeId"], "reference": wire.reference_of(request)}
    recipient.behaviour.receipt = {
        k: mine.get(v.strip("{}"), v) if isinstance(v, str) else v for k, v in receipt(**changes).items()
    }

    exchange = send(recipient.url, request)

    assert_failed(exchange, cause)
    assert_only_the_reference_went_over_a2a(recipient, exchange)


def test_a_receipt_in_another_media_type_is_no_receipt(send: Send, recipient_for: RecipientFor) -> None:
    recipient = recipient_for(Behaviour(receipt_media_type="application/json"))

    exchange = send(recipient.url)

    assert_failed(exchange, "no Agent Exchange receipts, not one")


# --- What the host may ask --------------------------------------------------------------------------


def test_the_error_never_quotes_the_request(send: Send, recipient_for: RecipientFor, issuer: Issuer) -> None:
    recipient = recipient_for(
        Behaviour(preparation_status=400, preparation_type="application/json", preparation_body={"x": 1})
    )
    request = request_for(recipient.url, issuer.token(recipient.url))

    exchange = send(recipient.url, request)

    assert_failed(exchange, "refused the preparation (HTTP 400).")
    stored = json.dumps(
        list(OutboundExchange.across_tenants.values()) + list(Event.across_tenants.values("payload")),
        default=str,
    )
    for secret in (request["delegation"]["accessToken"], "hunter2-secret", request["instruction"]):
        assert secret not in stored


# --- The endpoint rule on its own ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("https://peer.example/a2a/t/a/agent-exchange/preparation", "https://peer.example/a2a/t/a"),
        ("https://PEER.example:443/a2a/t/a/agent-exchange/preparation", "https://peer.example/a2a/t/a"),
        ("https://peer.example/elsewhere/on/the/origin", "https://peer.example:443/a2a/t/a"),
        ("http://127.0.0.1:8000/a2a/t/a/agent-exchange/preparation", "http://127.0.0.1:8000/a2a/t/a"),
        ("http://[::1]:8000/a2a/t/a/agent-exchange/preparation", "http://[::1]:8000/a2a/t/a"),
        ("http://localhost:8000/p", "http://localhost:8000/a2a/t/a"),
    ],
)
def test_endpoints_on_the_agents_origin_pass(endpoint: str, url: str) -> None:
    client.check_endpoint(endpoint, url)


@pytest.mark.parametrize(
    ("endpoint", "url", "cause"),
    [
        ("http://10.0.0.7/a2a/t/a/agent-exchange/preparation", "http://10.0.0.7/a2a/t/a", "is not https"),
        ("http://peer.example/p", "http://peer.example/a2a/t/a", "is not https"),
        ("https://peer.example:8443/p", "https://peer.example/a2a/t/a", "another origin"),
        ("https://peer.example.evil.net/p", "https://peer.example/a2a/t/a", "another origin"),
        ("https://peer.example/p", "http://peer.example/a2a/t/a", "another origin"),
        ("https://peer.example:99999/p", "https://peer.example/a2a/t/a", "is not a URL"),
        ("https://peer.example@evil.net/p", "https://evil.net/a2a/t/a", "carries userinfo"),
        ("https:///p", "https://peer.example/a2a/t/a", "not an absolute http(s) URL"),
        (None, "https://peer.example/a2a/t/a", "is not a URL"),
    ],
)
def test_endpoints_the_profile_does_not_allow_are_refused(endpoint: Any, url: str, cause: str) -> None:
    with pytest.raises(client.ExchangeFailed, match=re.escape(cause)):
        client.check_endpoint(endpoint, url)
