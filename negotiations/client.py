"""Our outbound A2A client: read the counterparty's card, send one move, get its Task back.

Built on a2a-sdk's card parser and client factory, so the counterparty may
speak A2A 1.0 or 0.3 (the SDK picks by the card). Cards are read leniently, as
Index Network peers publish them (docs/wire-format.md#cards): at the origin
root when not beside the URL, without
``protocolVersion`` (0.3) and without any usable interface (then the URL we
were given is the endpoint). A signed card is checked (:func:`verify_card`)
and refused when no signature holds. What our agent presents to the
counterparty is its :class:`CounterpartyCredential` for that URL
(:func:`credential_headers`), sent on every request of the exchange. The URL
is a tenant's or a counterparty's choice, so every request goes to public
addresses only (:mod:`parley.outbound`), no redirect is followed, and a refusal
names the policy, never what the address would have answered. Errors of any
kind reach the caller as :class:`CounterpartyError`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import posixpath
import re
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.errors import A2AClientError
from a2a.helpers import new_data_part
from a2a.types import AgentCard, AgentInterface, GetTaskRequest, Message, Role, SendMessageRequest
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from django.conf import settings
from django.db import models
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from agents.models import Agent
from negotiations.models import CounterpartyCredential
from negotiations.receipts import SETTLEMENT_EXTENSION, identity_of_card
from negotiations.rules import NEGOTIATION_EXTENSION, MoveRules, rules_from_params
from negotiations.wire import Move
from parley import outbound

logger = logging.getLogger(__name__)

R = TypeVar("R")

CARD_PATH = "/.well-known/agent-card.json"
JSONRPC = "JSONRPC"  # the only protocol binding our client speaks (the SDK's default)
# Signature algorithms a card may use: asymmetric only, so that a published key set cannot hold
# the very secret that forges a signature (HS256 with an "oct" key would).
SIGNATURE_ALGORITHMS = [
    "ES256",
    "ES384",
    "ES512",
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "EdDSA",
]
# How a2a-sdk's JSON-RPC transports word an error whose code maps to none of its error classes.
_UNKNOWN_CODE = re.compile(r"JSON-RPC Error (?P<code>-?\d+): (?P<message>.*)", re.DOTALL)
# Key sets one card may send us to: each signature names one, and each is a request.
MAX_KEY_SETS = 3
# The longest key set read: a few public keys take a few hundred bytes each.
MAX_KEY_SET_BYTES = 64 * 1024


class CounterpartyError(Exception):
    """The counterparty could not be reached or answered outside the protocol.

    ``refused`` (sending a message): it certainly did not take the message — it
    answered with an error (a JSON-RPC error, or HTTP 4xx), or the message never
    left (no usable card, no connection, the address policy). False when it may
    have: no answer in time, a dropped connection, a 5xx, an answer we could not
    read.
    """

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class Exchange:
    """One send: the counterparty's name, our Message as sent and its Task back, both as 1.0 JSON,
    the move rules its card publishes (:func:`published_rules`; None when it publishes none) and
    the party its card states when it signs settlements (:func:`negotiations.receipts.identity_of_card`;
    None when it does not)."""

    counterparty_name: str
    sent: dict[str, Any]
    task: dict[str, Any]
    rules: MoveRules | None = None
    identity: dict[str, str] | None = None


def canonical_url(url: str) -> str:
    """``url`` in the form that identifies a counterparty: scheme and host lower-cased, default
    port dropped, unreserved characters unescaped, dot segments resolved, no trailing slash."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(scheme)
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if parts.port in (None, default) else f"{host}:{parts.port}"
    path = _PERCENT.sub(_unescape_unreserved, parts.path)
    # RFC 3986 §5.2.4: dot segments name the same resource without them.
    path = posixpath.normpath(path) if path else ""
    path = "" if path in (".", "/") else path
    return urlunsplit((scheme, netloc, path, parts.query, ""))


_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _unescape_unreserved(match: re.Match[str]) -> str:
    """RFC 3986 §6.2.2.2: an escaped unreserved character is the character itself."""
    char = chr(int(match.group()[1:], 16))
    return char if char in _UNRESERVED else match.group().upper()


def origin_of(url: str) -> tuple[str, str]:
    """The origin of ``url`` (RFC 6454): scheme and host[:port] as :func:`canonical_url` writes them
    (lower case, the default port dropped), so ``https://A.example:443`` is ``https://a.example``."""
    parts = urlsplit(canonical_url(url))
    return parts.scheme, parts.netloc


def move_message(*, move: Move, task_id: str = "", context_id: str = "") -> dict[str, Any]:
    """``move`` as the A2A 1.0 JSON Message we send: a new ``messageId``, role user, the move as one
    data part, ``taskId``/``contextId`` to continue a Task (both together: docs/wire-format.md#messages).

    Without ``context_id`` (an opening move) a new one is minted, so the message is whole before it
    is first sent, and sending it again is sending the same message.
    """
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[new_data_part(move.to_data())],
        task_id=task_id,
        context_id=context_id or str(uuid.uuid4()),
    )
    return MessageToDict(message)


def send_move(
    *,
    url: str,
    move: Move,
    task_id: str = "",
    context_id: str = "",
    timeout: float | None = None,
    agent: Agent | None = None,
) -> Exchange:
    """Send ``move`` as a new message (:func:`move_message`) and return the exchange: see
    :func:`send_message`."""
    message = move_message(move=move, task_id=task_id, context_id=context_id)
    return send_message(url=url, message=message, timeout=timeout, agent=agent)


def send_message(
    *, url: str, message: dict[str, Any], timeout: float | None = None, agent: Agent | None = None
) -> Exchange:
    """Send ``message`` (an A2A 1.0 JSON Message, :func:`move_message`) as it is to the agent at
    ``url`` and return the exchange: :meth:`Session.send_message` on a session of its own."""
    with Session(url=url, agent=agent, timeout=timeout) as session:
        return session.send_message(message)


def task_get(
    *,
    url: str,
    task_id: str,
    sent: dict[str, Any],
    timeout: float | None = None,
    agent: Agent | None = None,
) -> Exchange | None:
    """The counterparty's Task ``task_id`` as the exchange of our message ``sent``:
    :meth:`Session.task_get` on a session of its own."""
    with Session(url=url, agent=agent, timeout=timeout) as session:
        return session.task_get(task_id=task_id, sent=sent)


class Session:
    """Our side of the exchanges with the agent at ``url`` over several requests — the turns one pump
    of a negotiation takes: one event loop, one HTTP client whose connections stay open between
    requests, ``agent``'s credential for ``url`` (:func:`credential_headers`; none without
    ``agent``), read once, and the counterparty's card (:func:`read_card`), read on first use and
    read again after a request that failed.

    So a turn costs the counterparty one request (its card is not fetched, nor its signature
    checked, before every move), and us no new loop, client or connection. A card kept for the
    session holds their moves to the rules it published when the session began. Each request
    blocks for at most ``timeout`` seconds (default ``A2A_SEND_TIMEOUT``). Use it as a context
    manager, from one thread; it is closed on leaving.
    """

    def __init__(self, *, url: str, agent: Agent | None = None, timeout: float | None = None) -> None:
        self.url = url
        self.seconds = timeout or settings.A2A_SEND_TIMEOUT
        self._agent = agent
        self._runner = asyncio.Runner()
        self._http: httpx.AsyncClient | None = None
        self._card: AgentCard | None = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client and the event loop."""
        try:
            if self._http is not None:
                self._runner.run(self._http.aclose())
        finally:
            self._http = None
            self._runner.close()

    def send_message(self, message: dict[str, Any]) -> Exchange:
        """Send ``message`` (an A2A 1.0 JSON Message, :func:`move_message`) as it is and return the
        exchange (see :func:`read_card` for the card).

        The same message may be sent again (a retry after a lost answer): it is sent unchanged, ids
        included, so the counterparty can tell it is the same. The card's endpoint must be on the
        origin of the session's URL, so a card cannot send our moves elsewhere. Raises
        :class:`CounterpartyError`, whose message names a refusal's HTTP status and JSON-RPC code
        (see :func:`failure_reason`) and whose ``refused`` says whether the message certainly was
        not taken.
        """
        return self._run(self._send(message))

    def task_get(self, *, task_id: str, sent: dict[str, Any]) -> Exchange | None:
        """The counterparty's Task ``task_id`` read with GetTask, as the exchange of our message
        ``sent`` (whether the Task carries it is the caller's to check); None when its card offers
        no A2A 1.0 interface — an Index peer speaks ``message/send`` only
        (docs/wire-format.md#index-peers). Errors as :meth:`send_message`."""
        return self._run(self._get(task_id, sent))

    def _run(self, work: Coroutine[Any, Any, R]) -> R:
        if self._http is None:
            agent = self._agent
            headers = credential_headers(agent=agent, url=self.url) if agent is not None else {}
            # No redirects are followed (httpx's default), so the credential never leaves the origin.
            self._http = outbound.async_client(timeout=_timeout(self.seconds), headers=headers)
        try:
            # A total deadline: httpx's timeouts bound each read, and a peer can trickle forever.
            return self._runner.run(asyncio.wait_for(work, self.seconds))
        except TimeoutError as exc:
            self._card = None
            raise CounterpartyError(f"{self.url}: no answer within {self.seconds:g} s") from exc
        except CounterpartyError:
            self._card = None
            raise

    async def _client(self) -> tuple[httpx.AsyncClient, AgentCard]:
        """The session's HTTP client and the counterparty's card, read on first use."""
        assert self._http is not None
        if self._card is None:
            self._card = await read_card(self._http, self.url)
        return self._http, self._card

    async def _send(self, message: dict[str, Any]) -> Exchange:
        url, posted = self.url, False
        try:
            http, card = await self._client()
            if SETTLEMENT_EXTENSION in message.get("extensions", []):
                # A2A extension activation: the request names what the message carries.
                http.headers["A2A-Extensions"] = SETTLEMENT_EXTENSION
            else:
                http.headers.pop("A2A-Extensions", None)
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            posted = True
            task = None
            request = SendMessageRequest(message=ParseDict(message, Message()))
            async for event in client.send_message(request):
                if event.HasField("task"):
                    task = event.task
            answer = MessageToDict(task) if task is not None else None
        except CounterpartyError as exc:
            # Its card could not be read or used: the message was not sent.
            raise CounterpartyError(str(exc), refused=True) from exc
        # What a hostile or broken peer sends can fail anywhere in the SDK's parsing.
        except (A2AError, httpx.HTTPError, ParseError, ValueError, TypeError, KeyError) as exc:
            refused = not posted or refused_outright(exc)
            raise CounterpartyError(failure_reason(url, exc), refused=refused) from exc
        if answer is None:
            raise CounterpartyError(f"{url} answered with a bare Message, not a Task")
        return Exchange(
            counterparty_name=card.name,
            sent=message,
            task=with_reply_in_history(answer),
            rules=published_rules(card),
            identity=identity_of_card(MessageToDict(card)),
        )

    async def _get(self, task_id: str, sent: dict[str, Any]) -> Exchange | None:
        try:
            http, card = await self._client()
            if all(before_1_0(i.protocol_version) for i in card.supported_interfaces):
                return None
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            task = await client.get_task(GetTaskRequest(id=task_id))
        except (A2AError, httpx.HTTPError, ParseError, ValueError, TypeError, KeyError) as exc:
            raise CounterpartyError(failure_reason(self.url, exc)) from exc
        return Exchange(
            counterparty_name=card.name,
            sent=sent,
            task=with_reply_in_history(MessageToDict(task)),
            rules=published_rules(card),
            identity=identity_of_card(MessageToDict(card)),
        )


def credential_headers(*, agent: Agent, url: str) -> dict[str, str]:
    """The header ``agent`` presents to the counterparty at ``url``: ``{}`` when it has no credential.

    The credential is the tenant's :class:`CounterpartyCredential` whose
    ``url_prefix`` covers ``url`` (:func:`covers`): the longest prefix wins,
    and of two equally long, the agent's own beats the tenant-wide one.
    ``bearer`` gives ``Authorization: Bearer <secret>``, ``api_key``
    ``<header>: <secret>``.
    """
    rows = CounterpartyCredential.objects.for_tenant(agent.tenant_id).filter(
        models.Q(agent=None) | models.Q(agent=agent)
    )
    matching = [row for row in rows if covers(row.url_prefix, url)]
    if not matching:
        return {}
    best = max(matching, key=lambda row: (len(canonical_url(row.url_prefix)), row.agent_id is not None))
    if best.scheme == CounterpartyCredential.Scheme.BEARER:
        return {"Authorization": f"Bearer {best.secret}"}
    return {best.header: best.secret}


def covers(prefix: str, url: str) -> bool:
    """Whether ``prefix`` covers ``url``: the same origin, and a path equal to the prefix's path or
    under it segment by segment, both compared canonically (:func:`canonical_url`).

    ``https://api.example.com/a`` covers ``https://api.example.com/a/b``, not
    ``https://api.example.com/ab`` nor ``https://api.example.com.evil.net/a``:
    a bare string prefix would hand the secret to hosts that merely start alike.
    """
    ours, theirs = urlsplit(canonical_url(prefix)), urlsplit(canonical_url(url))
    if (ours.scheme, ours.netloc) != (theirs.scheme, theirs.netloc) or not ours.netloc:
        return False
    return theirs.path == ours.path or theirs.path.startswith(f"{ours.path}/")


def card_identity(url: str, *, timeout: float) -> dict[str, str] | None:
    """The party the card of the agent at ``url`` states when it signs settlements
    (:func:`negotiations.receipts.identity_of_card`), read as :func:`read_card` reads cards
    (a signed card must verify); None when it declares no settlement signatures, or cannot be
    read within ``timeout`` seconds (logged)."""

    async def read() -> dict[str, str] | None:
        async with outbound.async_client(timeout=_timeout(timeout)) as http:
            return identity_of_card(MessageToDict(await read_card(http, url)))

    try:
        return asyncio.run(asyncio.wait_for(read(), timeout))
    except (CounterpartyError, httpx.HTTPError, ValueError, TimeoutError) as exc:
        logger.warning("reading the card at %s for its settlement signatures: %s", url, exc)
        return None


def _timeout(seconds: float) -> httpx.Timeout:
    return httpx.Timeout(seconds, connect=min(seconds, settings.A2A_CARD_TIMEOUT))


def published_rules(card: AgentCard) -> MoveRules | None:
    """The move rules ``card`` publishes in our extension :data:`negotiations.rules.NEGOTIATION_EXTENSION`
    (a Parley agent's card does), read leniently; None when it publishes none (an Index peer's)."""
    for extension in card.capabilities.extensions:
        if extension.uri == NEGOTIATION_EXTENSION:
            return rules_from_params(MessageToDict(extension.params))
    return None


async def read_card(http: httpx.AsyncClient, url: str) -> AgentCard:
    """The card of the agent at ``url``, with only interfaces our client can use on that origin.

    Fetched from ``<url>/.well-known/agent-card.json``, or, when that is a 404,
    from the origin root, where Index peers serve it. Parsed by a2a-sdk (a 0.3
    card's ``url`` becomes a JSONRPC interface, its version 0.3 when it names
    none); a card the SDK cannot parse still gives the agent's name. A JSONRPC
    interface with no version or one before 1.0 speaks 0.3 (A2A: an empty
    version means 0.3). With no JSONRPC interface left (an Index card's ``url``
    is often ""), ``url`` itself is the 0.3 endpoint: Index clients post to the
    URL exactly as given.

    A card that carries signatures must verify (:func:`verify_card`).

    Raises :class:`CounterpartyError` when the card cannot be fetched, is not a
    JSON object, is signed but does not verify, or names an interface on
    another origin (a card must not send our moves elsewhere); httpx's errors
    and ``ValueError`` (not JSON) pass.
    """
    card_url = f"{url.rstrip('/')}{CARD_PATH}"
    response = await http.get(card_url)
    if response.status_code == 404 and urlsplit(url).path.strip("/"):
        scheme, netloc = urlsplit(url)[:2]
        card_url = f"{scheme}://{netloc}{CARD_PATH}"
        response = await http.get(card_url)
    if not response.is_success:
        raise CounterpartyError(f"{url}: no agent card (HTTP {response.status_code} from {response.url})")
    data = response.json()
    if not isinstance(data, dict):
        raise CounterpartyError(f"{url}: its agent card is not a JSON object")
    name = data.get("name")
    try:
        card = parse_agent_card(data)
    except ParseError as exc:
        if data.get("signatures"):
            raise CounterpartyError(f"{url}: its agent card is signed but cannot be read to check") from exc
        card = AgentCard(name=name if isinstance(name, str) else "")
    if card.signatures:
        await verify_card(http, card, card_url=card_url)
    elsewhere = [i.url for i in card.supported_interfaces if i.url and origin_of(i.url) != origin_of(url)]
    if elsewhere:
        raise CounterpartyError(f"{url}: its card points to another origin ({elsewhere[0]})")
    usable = [
        AgentInterface(
            url=i.url,
            protocol_binding=i.protocol_binding,
            protocol_version="0.3" if before_1_0(i.protocol_version) else i.protocol_version,
            tenant=i.tenant,
        )
        for i in card.supported_interfaces
        if i.url and i.protocol_binding == JSONRPC
    ]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(
        usable or [AgentInterface(url=url, protocol_binding=JSONRPC, protocol_version="0.3")]
    )
    return card


async def verify_card(http: httpx.AsyncClient, card: AgentCard, *, card_url: str) -> None:
    """Check the card's signatures (A2A "Agent Card Signing": a detached JWS over the card's
    canonical JSON) with a2a-sdk's verifier; at least one must hold.

    Each signature's key is looked up by ``kid`` in the key set its protected
    header names (``jku``), fetched with ``http`` (its timeouts) only from the
    origin ``card_url`` was fetched from. A ``jku`` elsewhere is refused: the
    origin is what the card speaks for, so only keys it serves can vouch for
    it — keys anywhere else would let whoever controls them sign any card, and
    would make our worker fetch any URL a card names (internal addresses
    included). Raises :class:`CounterpartyError` naming what failed.
    """
    key_sets: dict[str, list[Any]] = {}
    for signature in card.signatures:
        jku = _protected_header(signature.protected).get("jku")
        if not isinstance(jku, str) or not jku:
            continue
        if origin_of(jku) != origin_of(card_url):
            raise CounterpartyError(f"{card_url}: its card's signing keys are on another origin ({jku})")
        if jku not in key_sets:
            if len(key_sets) == MAX_KEY_SETS:
                raise CounterpartyError(f"{card_url}: its card names more than {MAX_KEY_SETS} key sets")
            key_sets[jku] = await key_set(http, jku)

    def key_for(kid: str | None, jku: str | None) -> PyJWK:
        for jwk in key_sets.get(jku or "", []):
            if isinstance(jwk, dict) and jwk.get("kid") == kid:
                return PyJWK(jwk)
        # A PyJWTError: the verifier moves on to the card's next signature.
        raise PyJWKError(f"no key {kid!r} in {jku!r}")

    try:
        create_signature_verifier(key_for, SIGNATURE_ALGORITHMS)(card)
    except SignatureVerificationError as exc:
        raise CounterpartyError(f"{card_url}: its card's signature does not verify ({exc})") from exc


def _protected_header(protected: str) -> dict[str, Any]:
    """A JWS protected header, decoded; {} when it is not base64url JSON of an object."""
    try:
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    except (binascii.Error, ValueError):
        return {}
    return header if isinstance(header, dict) else {}


async def key_set(http: httpx.AsyncClient, jku: str) -> list[Any]:
    """The ``keys`` of the JSON Web Key Set at ``jku``, fetched with ``http``; CounterpartyError when
    it cannot be read (a URL httpx cannot parse included) or is longer than :data:`MAX_KEY_SET_BYTES`
    (anyone may name the URL: the receipt endpoint is public)."""
    try:
        async with http.stream("GET", jku) as response:
            raw = bytearray()
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_KEY_SET_BYTES:
                    raise CounterpartyError(f"{jku}: the key set is longer than {MAX_KEY_SET_BYTES} bytes")
        body = json.loads(raw) if response.is_success else None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, RecursionError) as exc:
        raise CounterpartyError(f"{jku}: the signing keys could not be fetched ({exc})") from exc
    keys = body.get("keys") if isinstance(body, dict) else None
    if not isinstance(keys, list):
        raise CounterpartyError(f"{jku}: no key set there (HTTP {response.status_code})")
    return keys


def before_1_0(version: str) -> bool:
    """Whether a protocolVersion ("", "0.2.5", "0.3.0") means the 0.x dialect, ``message/send``.

    The SDK would speak 1.0 to an empty version and to anything before 0.3.
    """
    return version.strip().split(".")[0] in ("", "0")


def failure_reason(url: str, exc: Exception) -> str:
    """What went wrong with one send, in a sentence for the negotiation's record.

    A refusal names its JSON-RPC code: "<url> refused the move (HTTP 409, JSON-RPC
    -32002): Task … is completed …" — the SDK's transports keep only the status
    of a non-2xx answer, so its body is read here from the ``httpx`` error the
    SDK chained; a code the SDK has no error class for (-32010) it reports as
    "JSON-RPC Error <code>: <message>", read back here. Anything else is
    "<url>: <ExceptionType>: <text>". A URL the address policy refused (:mod:`parley.outbound`),
    whichever request it stopped, is "<url> was not called: the host '<host>' resolves to a
    private address; Parley does not call private addresses".
    """
    if (refused := outbound.refusal(exc)) is not None:
        return f"{url} was not called: {refused}"
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        status = cause.response.status_code
        error = _rpc_error(cause.response)
        if error is None:
            return f"{url} answered HTTP {status}"
        return f"{url} refused the move (HTTP {status}, JSON-RPC {error[0]}): {error[1]}"
    if isinstance(exc, A2AError) and (code := JSON_RPC_ERROR_CODE_MAP.get(type(exc))) is not None:
        return f"{url} refused the move (JSON-RPC {code}): {exc.message}"
    if isinstance(exc, A2AClientError) and (unknown := _UNKNOWN_CODE.fullmatch(str(exc.message))):
        return f"{url} refused the move (JSON-RPC {unknown['code']}): {unknown['message']}"
    return f"{url}: {type(exc).__name__}: {exc}"


def refused_outright(exc: Exception) -> bool:
    """Whether ``exc``, raised sending a message, shows the counterparty did not take it: it
    answered with a JSON-RPC error or an HTTP 4xx, no connection was made, or the address policy
    stopped the request."""
    if outbound.refusal(exc) is not None or isinstance(exc, httpx.ConnectError):
        return True
    cause = exc.__cause__
    if isinstance(cause, httpx.ConnectError):
        return True
    if isinstance(cause, httpx.HTTPStatusError):
        return cause.response.is_client_error or _rpc_error(cause.response) is not None
    if isinstance(exc, A2AClientError):
        return _UNKNOWN_CODE.fullmatch(str(exc.message)) is not None
    return isinstance(exc, A2AError)


def _rpc_error(response: httpx.Response) -> tuple[Any, str] | None:
    """(code, message) of the JSON-RPC error in ``response``'s body, if it carries one."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    return error.get("code"), str(error.get("message", ""))


def with_reply_in_history(task: dict[str, Any]) -> dict[str, Any]:
    """The Task with its status message appended to history when history lacks it.

    Index-style peers put the reply last in history; a2a-sdk's ``TaskUpdater``
    puts it only in ``status.message`` (docs/wire-format.md#history). Both read alike after this.
    """
    reply = task.get("status", {}).get("message")
    history = list(task.get("history", []))
    if reply and reply.get("messageId") not in {m.get("messageId") for m in history}:
        history.append(reply)
    return {**task, "history": history}
