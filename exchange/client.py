"""Agent Exchange on the requester's side: prepare a request with the recipient, send its reference.

docs/agent-exchange.md is the profile. :func:`send` reads the recipient's card
(:func:`negotiations.client.read_card`: a signed card must verify, its interfaces must be on the
origin of the URL we were given), finds the Agent Exchange extension there, hands the complete
request to the preparation endpoint the card names — unless the host delivered it through a
channel of its own (``prepared_by_host``), or the card names none (out of band) — and only then
sends the request's **reference** over A2A, activating the extension, and checks the receipt.

Before a byte of the request leaves, the preparation endpoint must be exactly what the profile
allows: named by ``params.preparation`` with exactly ``endpoint``, ``mediaType`` and ``method``,
``POST`` in the preparation media type, an absolute URL without userinfo, query or fragment on the
origin of the recipient's URL, over https — plain http only to a loopback address when
``settings.WEBHOOKS_ALLOW_HTTP`` allows it (tests and development; production settings refuse it).
Its answer must be no redirect, a 2xx, exactly the preparation media type, at most
:data:`MAX_PREPARATION_BYTES` of strict JSON holding exactly ``{"reference"}``, and that reference
the one we derived (:func:`exchange.wire.reference_of`): else nothing goes over A2A.

Over A2A 0.3 a data part carries no media type (a2a-sdk's compat conversion drops it), so a
receipt from a 0.3 peer is the data part of the ``agent-exchange:receipt`` artifact
(:data:`exchange.wire.RECEIPT_ARTIFACT_ID`); over 1.0 it is the part of
:data:`exchange.wire.RECEIPT_MEDIA_TYPE`. Either way its data must be a receipt
(:func:`exchange.wire.check_receipt`) for our exchange and reference.

Every request goes to public addresses only (:mod:`parley.outbound`): a refusal is "<url> was not
called: the host '<host>' resolves to a private address; …", and nothing was sent there.

Every failure is an :class:`ExchangeFailed` whose message says why, in words that name no token
or protected value.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.helpers import new_data_part
from a2a.types import AgentCard, Message, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import A2AError
from django.conf import settings
from google.protobuf.json_format import MessageToDict, ParseError

from exchange import wire
from exchange.models import OutboundExchange
from negotiations.client import (
    JSONRPC,
    CounterpartyError,
    before_1_0,
    credential_headers,
    failure_reason,
    origin_of,
    read_card,
)
from parley import outbound, strict_json

# Bytes of a preparation endpoint's answer we read; a longer one is refused unread past this.
MAX_PREPARATION_BYTES = 64 * 1024
# Characters of a peer's own words (an error message, a refusal) kept in ours.
MAX_QUOTED = 300
# Characters of the whole reason an exchange failed.
MAX_ERROR = 1000
PREPARATION_KEYS = frozenset({"endpoint", "mediaType", "method"})
_WHITESPACE = re.compile(r"\s+")


class ExchangeFailed(Exception):
    """The exchange did not complete; the message says why (and where)."""


def send(exchange: OutboundExchange) -> dict[str, Any]:
    """Send ``exchange`` to the agent at ``exchange.url`` and return the receipt it answered with.

    Prepares the request first as the module docstring says (``exchange.request`` must still be
    held when the card names a preparation endpoint and the host did not prepare it), then sends
    a ``ROLE_USER`` message listing :data:`exchange.wire.EXTENSION_URI` in its ``extensions``,
    with the ``A2A-Extensions`` service parameter activating it and one data part
    ``{"reference": …}`` of :data:`exchange.wire.REFERENCE_MEDIA_TYPE`. Every request carries the
    agent's credential for ``exchange.url`` (:func:`negotiations.client.credential_headers`); no
    redirect is followed. The whole exchange takes at most ``settings.A2A_SEND_TIMEOUT`` seconds.

    Returns the receipt (:data:`exchange.wire.RECEIPT_SCHEMA`, numbers as ints). Raises
    :class:`ExchangeFailed` naming the cause.
    """
    seconds = float(settings.A2A_SEND_TIMEOUT)
    headers = credential_headers(agent=exchange.agent, url=exchange.url)
    outgoing = _Outgoing(
        url=exchange.url,
        exchange_id=exchange.exchange_id,
        reference=exchange.reference,
        request=exchange.request,
        prepared_by_host=exchange.prepared_by_host,
    )
    try:
        # A total deadline: httpx's timeouts bound each read, and a peer can trickle forever.
        return asyncio.run(asyncio.wait_for(_exchange(outgoing, headers, seconds), seconds))
    except TimeoutError:
        raise ExchangeFailed(f"{exchange.url}: no answer within {seconds:g} s") from None
    except ExchangeFailed as exc:
        raise ExchangeFailed(_bounded(str(exc), MAX_ERROR)) from None


@dataclass(frozen=True)
class _Outgoing:
    """What one send needs of the row, read before the event loop starts (no database in it)."""

    url: str
    exchange_id: str
    reference: str
    request: Any
    prepared_by_host: bool


async def _exchange(outgoing: _Outgoing, headers: dict[str, str], seconds: float) -> dict[str, Any]:
    url = outgoing.url
    timeout = httpx.Timeout(seconds, connect=min(seconds, settings.A2A_CARD_TIMEOUT))
    # httpx follows no redirect unless told to: neither the request nor the credential leaves the origin.
    # The URL is the tenant's choice: every request goes to public addresses only (parley.outbound).
    async with outbound.async_client(timeout=timeout, headers=headers) as http:
        try:
            card = await read_card(http, url)
        except CounterpartyError as exc:
            raise ExchangeFailed(str(exc)) from None
        except (httpx.HTTPError, ValueError) as exc:
            if outbound.refusal(exc):
                raise ExchangeFailed(failure_reason(url, exc)) from None
            raise ExchangeFailed(f"{url}: its agent card could not be read ({type(exc).__name__})") from None
        endpoint = preparation_endpoint(card, url)
        if not outgoing.prepared_by_host and endpoint is not None:
            if outgoing.request is None:
                raise ExchangeFailed("The request is no longer held here, so it cannot be prepared.")
            await _prepare(http, endpoint, outgoing.request, outgoing.reference)
        return await _deliver(http, card, outgoing)


def preparation_endpoint(card: AgentCard, url: str) -> str | None:
    """The preparation endpoint ``card`` (read from ``url``) names, or None when it names none (the
    request is then prepared out of band).

    Raises :class:`ExchangeFailed` when the card does not advertise the extension (or advertises
    it twice), or names a preparation the profile does not allow (see the module docstring).
    """
    found = [extension for extension in card.capabilities.extensions if extension.uri == wire.EXTENSION_URI]
    if not found:
        raise ExchangeFailed(f"{url}: its card does not advertise Agent Exchange ({wire.EXTENSION_URI}).")
    if len(found) > 1:
        raise ExchangeFailed(f"{url}: its card lists the Agent Exchange extension more than once.")
    params = MessageToDict(found[0].params) if found[0].HasField("params") else {}
    if "preparation" not in params:
        return None
    preparation = params["preparation"]
    if not isinstance(preparation, dict) or set(preparation) != PREPARATION_KEYS:
        named = sorted(preparation) if isinstance(preparation, dict) else type(preparation).__name__
        raise ExchangeFailed(
            f"{url}: its card's Agent Exchange preparation must name exactly endpoint, mediaType and "
            f"method, not {named}."
        )
    if preparation["mediaType"] != wire.PREPARATION_MEDIA_TYPE:
        raise ExchangeFailed(
            f"{url}: its card's preparation takes {_quoted(preparation['mediaType'])}, not "
            f"{wire.PREPARATION_MEDIA_TYPE}."
        )
    if preparation["method"] != "POST":
        raise ExchangeFailed(
            f"{url}: its card's preparation method is {_quoted(preparation['method'])}, not POST."
        )
    endpoint = preparation["endpoint"]
    check_endpoint(endpoint, url)
    assert isinstance(endpoint, str)
    return endpoint


def check_endpoint(endpoint: Any, url: str) -> None:
    """Raise :class:`ExchangeFailed` unless ``endpoint`` is an absolute http(s) URL without userinfo,
    query or fragment, on the origin of ``url``, and https (or, where settings allow plain http,
    http to a loopback address)."""
    what = f"{url}: its card's preparation endpoint {_quoted(endpoint)}"
    if not isinstance(endpoint, str):
        raise ExchangeFailed(f"{what} is not a URL.")
    try:
        parts = urlsplit(endpoint)
        host, _ = parts.hostname, parts.port  # .port raises ValueError for a port that is not one
    except ValueError:
        raise ExchangeFailed(f"{what} is not a URL.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not host:
        raise ExchangeFailed(f"{what} is not an absolute http(s) URL.")
    if "@" in parts.netloc:
        raise ExchangeFailed(f"{what} carries userinfo.")
    if "?" in endpoint or "#" in endpoint:
        raise ExchangeFailed(f"{what} carries a query or a fragment.")
    if origin_of(endpoint) != origin_of(url):
        raise ExchangeFailed(f"{what} is on another origin than the agent; it is refused.")
    if scheme == "http" and not (settings.WEBHOOKS_ALLOW_HTTP and _is_loopback(host)):
        raise ExchangeFailed(
            f"{what} is not https: the request would travel in the clear (WEBHOOKS_ALLOW_HTTP allows http "
            "to a loopback address, for local development)."
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _prepare(http: httpx.AsyncClient, endpoint: str, request: dict[str, Any], reference: str) -> None:
    """POST ``{"request": request}`` to ``endpoint`` and check that it answers exactly ``reference``."""
    body = json.dumps({"request": request}, ensure_ascii=False, separators=(",", ":")).encode()
    media = {"Content-Type": wire.PREPARATION_MEDIA_TYPE, "Accept": wire.PREPARATION_MEDIA_TYPE}
    try:
        async with http.stream("POST", endpoint, content=body, headers=media) as response:
            status = response.status_code
            if 300 <= status < 400:
                raise ExchangeFailed(
                    f"{endpoint} answered the preparation with a redirect (HTTP {status}); redirects are "
                    "refused, so the request was not sent on."
                )
            raw = await _read_bounded(response)
            content_type = response.headers.get("content-type", "")
    except httpx.HTTPError as exc:
        if outbound.refusal(exc):
            raise ExchangeFailed(failure_reason(endpoint, exc)) from None
        raise ExchangeFailed(f"{endpoint}: the preparation failed ({type(exc).__name__}: {exc})") from None
    if not 200 <= status < 300:
        said = _error_message(raw)
        raise ExchangeFailed(
            f"{endpoint} refused the preparation (HTTP {status})" + (f": {said}" if said else ".")
        )
    if raw is None:
        raise ExchangeFailed(
            f"{endpoint}: its answer to the preparation is longer than {MAX_PREPARATION_BYTES} bytes."
        )
    media_type = content_type.partition(";")[0].strip().lower()
    if media_type != wire.PREPARATION_MEDIA_TYPE:
        raise ExchangeFailed(
            f"{endpoint} answered the preparation as {_quoted(media_type or 'no media type')}, not "
            f"{wire.PREPARATION_MEDIA_TYPE}."
        )
    try:
        answer = strict_json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ExchangeFailed(f"{endpoint}: its answer to the preparation is not JSON ({exc}).") from None
    if not isinstance(answer, dict) or set(answer) != {"reference"}:
        members = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise ExchangeFailed(
            f"{endpoint}: its answer to the preparation must hold exactly one member, reference, "
            f"not {members}."
        )
    if answer["reference"] != reference:
        raise ExchangeFailed(
            f"{endpoint} answered the preparation with the reference {_quoted(answer['reference'])}, not "
            f"{reference}, the request's own: it did not store what was sent."
        )


async def _read_bounded(response: httpx.Response) -> bytes | None:
    """The body of ``response``, or None when it is longer than :data:`MAX_PREPARATION_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_PREPARATION_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _error_message(raw: bytes | None) -> str:
    """The ``error.message`` of an error body (the profile's ``{"error": {"code", "message"}}``),
    quoted and bounded; "" when the body holds none."""
    if raw is None:
        return ""
    try:
        body = strict_json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return _bounded(message, MAX_QUOTED) if isinstance(message, str) else ""


async def _deliver(http: httpx.AsyncClient, card: AgentCard, outgoing: _Outgoing) -> dict[str, Any]:
    """Send the reference over A2A (the SDK speaks 1.0 or 0.3 as the card allows) and return the receipt."""
    url = outgoing.url
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[new_data_part({"reference": outgoing.reference}, media_type=wire.REFERENCE_MEDIA_TYPE)],
        extensions=[wire.EXTENSION_URI],
    )
    context = ClientCallContext(
        service_parameters=ServiceParametersFactory.create([with_a2a_extensions([wire.EXTENSION_URI])])
    )
    config = ClientConfig(httpx_client=http, streaming=False, accepted_output_modes=[wire.RECEIPT_MEDIA_TYPE])
    task: Task | None = None
    try:
        client = ClientFactory(config).create(card)
        try:
            async for event in client.send_message(SendMessageRequest(message=message), context=context):
                if event.HasField("task"):
                    task = event.task
        finally:
            await client.close()
    # What a hostile or broken peer sends can fail anywhere in the SDK's parsing.
    except (A2AError, httpx.HTTPError, ParseError, ValueError, TypeError, KeyError) as exc:
        raise ExchangeFailed(failure_reason(url, exc)) from None
    if task is None:
        raise ExchangeFailed(f"{url} answered with a bare Message, not a Task.")
    return receipt_of(task, outgoing, legacy=speaks_0_3(card))


def speaks_0_3(card: AgentCard) -> bool:
    """Whether the SDK's client speaks A2A 0.3 to ``card`` (as read by
    :func:`negotiations.client.read_card`): it does when no JSON-RPC interface is 1.0 or later."""
    return all(
        before_1_0(i.protocol_version) for i in card.supported_interfaces if i.protocol_binding == JSONRPC
    )


def receipt_of(task: Task, outgoing: _Outgoing, *, legacy: bool) -> dict[str, Any]:
    """The receipt of a COMPLETED ``task`` (see the module docstring for where it is); raises
    :class:`ExchangeFailed` with the status message of a REJECTED or FAILED one, or for any other
    state, a missing, doubled or invalid receipt, one for another exchange or reference, or one
    whose ``mandateId`` is not the ``jti`` of the mandate our request carried (or names one when
    it carried none)."""
    url, state = outgoing.url, task.status.state
    if state in (TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_FAILED):
        verb = "rejected" if state == TaskState.TASK_STATE_REJECTED else "failed"
        said = _status_text(task)
        raise ExchangeFailed(f"{url} {verb} the exchange" + (f": {said}" if said else "."))
    if state != TaskState.TASK_STATE_COMPLETED:
        raise ExchangeFailed(
            f"{url} answered with a task in state {TaskState.Name(state)}, not a completed one."
        )
    parts = [
        part
        for artifact in task.artifacts
        for part in artifact.parts
        if part.media_type == wire.RECEIPT_MEDIA_TYPE
        or (legacy and not part.media_type and artifact.artifact_id == wire.RECEIPT_ARTIFACT_ID)
    ]
    if len(parts) != 1:
        raise ExchangeFailed(
            f"{url} completed the task with {'no' if not parts else len(parts)} Agent Exchange receipts, "
            "not one."
        )
    if not parts[0].HasField("data"):
        raise ExchangeFailed(f"{url}: its receipt holds no data.")
    receipt = _whole_numbers(MessageToDict(parts[0].data))
    try:
        wire.check_receipt(receipt)
    except wire.WireError as exc:
        raise ExchangeFailed(f"{url}: its receipt is not valid ({_bounded(str(exc), MAX_QUOTED)}).") from None
    if receipt["exchangeId"] != outgoing.exchange_id or receipt["reference"] != outgoing.reference:
        raise ExchangeFailed(f"{url}: its receipt is for another exchange or reference than ours.")
    carried = wire.mandate_id_of(outgoing.request)
    if receipt.get("mandateId") != carried or ("usesRemaining" in receipt) != (carried is not None):
        raise ExchangeFailed(
            f"{url}: its receipt does not account for the mandate our request carried."
            if carried
            else f"{url}: its receipt names a mandate our request did not carry."
        )
    return receipt


def _status_text(task: Task) -> str:
    """The text of ``task``'s status message, bounded; "" when it has none."""
    text = " ".join(part.text for part in task.status.message.parts if part.HasField("text"))
    return _bounded(text, MAX_QUOTED)


def _whole_numbers(value: Any) -> Any:
    """``value`` with every float that is a whole number made an int: protobuf's ``Value`` holds
    every JSON number as a double, and a receipt's numbers are integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def _quoted(value: Any) -> str:
    """``value`` as a peer gave it, quoted, on one line and bounded."""
    return repr(_bounded(str(value), MAX_QUOTED))


def _bounded(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = _WHITESPACE.sub(" ", text).strip()
    return flat if len(flat) <= limit else f"{flat[: limit - 1]}…"
