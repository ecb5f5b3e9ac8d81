"""Our outbound A2A client: read the counterparty's card, send one move, get its Task back.

Built on a2a-sdk's card resolver and client factory, so the counterparty may
speak A2A 1.0 or 0.3 (the SDK picks by the card). Errors of any kind reach the
caller as :class:`CounterpartyError`.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_data_part
from a2a.types import Message, Role, SendMessageRequest
from a2a.utils.errors import A2AError
from django.conf import settings
from google.protobuf.json_format import MessageToDict, ParseError

from negotiations.wire import Move


class CounterpartyError(Exception):
    """The counterparty could not be reached or answered outside the protocol."""


@dataclass(frozen=True)
class Exchange:
    """One send: the counterparty's name, our Message as sent and its Task back, both as 1.0 JSON."""

    counterparty_name: str
    sent: dict[str, Any]
    task: dict[str, Any]


def canonical_url(url: str) -> str:
    """``url`` in the form that identifies a counterparty: scheme and host lower-cased, default
    port dropped, unreserved characters unescaped, no trailing slash."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if parts.port in (None, default) else f"{host}:{parts.port}"
    path = _PERCENT.sub(_unescape_unreserved, parts.path).rstrip("/")
    return urlunsplit((scheme, netloc, path, parts.query, ""))


_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _unescape_unreserved(match: re.Match[str]) -> str:
    """RFC 3986 §6.2.2.2: an escaped unreserved character is the character itself."""
    char = chr(int(match.group()[1:], 16))
    return char if char in _UNRESERVED else match.group().upper()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def send_move(
    *, url: str, move: Move, task_id: str = "", context_id: str = "", timeout: float | None = None
) -> Exchange:
    """Send ``move`` to the agent at ``url`` (its card sits at ``url/.well-known/agent-card.json``).

    ``task_id``/``context_id`` continue an existing Task; both are sent
    together (a2a-sdk-brief.md §1.6). Blocks for at most ``timeout`` seconds
    (default ``A2A_SEND_TIMEOUT``). The card's endpoint must be on the origin of ``url``, so a card
    cannot send our moves elsewhere. Raises :class:`CounterpartyError`.
    """
    return asyncio.run(_send(url, move, task_id, context_id, timeout or settings.A2A_SEND_TIMEOUT))


async def _send(url: str, move: Move, task_id: str, context_id: str, seconds: float) -> Exchange:
    timeout = httpx.Timeout(seconds, connect=min(seconds, settings.A2A_CARD_TIMEOUT))
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[new_data_part(move.to_data())],
        task_id=task_id,
        context_id=context_id,
    )
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            card = await A2ACardResolver(http, url.rstrip("/")).get_agent_card()
            elsewhere = [i.url for i in card.supported_interfaces if _origin(i.url) != _origin(url)]
            if elsewhere:
                raise CounterpartyError(f"{url}: its card points to another origin ({elsewhere[0]})")
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            task = None
            async for event in client.send_message(SendMessageRequest(message=message)):
                if event.HasField("task"):
                    task = event.task
            await client.close()
            answer = MessageToDict(task) if task is not None else None
    # What a hostile or broken peer sends can fail anywhere in the SDK's parsing.
    except (A2AError, httpx.HTTPError, ParseError, ValueError, TypeError, KeyError) as exc:
        raise CounterpartyError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if answer is None:
        raise CounterpartyError(f"{url} answered with a bare Message, not a Task")
    return Exchange(
        counterparty_name=card.name, sent=MessageToDict(message), task=with_reply_in_history(answer)
    )


def with_reply_in_history(task: dict[str, Any]) -> dict[str, Any]:
    """The Task with its status message appended to history when history lacks it.

    Index-style peers put the reply last in history; a2a-sdk's ``TaskUpdater``
    puts it only in ``status.message`` (a2a-sdk-brief.md §9). Both read alike after this.
    """
    reply = task.get("status", {}).get("message")
    history = list(task.get("history", []))
    if reply and reply.get("messageId") not in {m.get("messageId") for m in history}:
        history.append(reply)
    return {**task, "history": history}
