"""Our outbound A2A client: read the counterparty's card, send one move, get its Task back.

Built on a2a-sdk's card resolver and client factory, so the counterparty may
speak A2A 1.0 or 0.3 (the SDK picks by the card). Errors of any kind reach the
caller as :class:`CounterpartyError`.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_data_part
from a2a.types import Message, Role, SendMessageRequest
from a2a.utils.errors import A2AError
from django.conf import settings
from google.protobuf.json_format import MessageToDict

from negotiations.wire import Move


class CounterpartyError(Exception):
    """The counterparty could not be reached or answered outside the protocol."""


@dataclass(frozen=True)
class Exchange:
    """What one send brought back: the counterparty's name and its Task as 1.0 JSON."""

    counterparty_name: str
    task: dict[str, Any]


def send_move(*, url: str, move: Move, task_id: str = "", context_id: str = "") -> Exchange:
    """Send ``move`` to the agent at ``url`` (its card sits at ``url/.well-known/agent-card.json``).

    ``task_id``/``context_id`` continue an existing Task; both are sent
    together (a2a-sdk-brief.md §1.6). Blocks for at most ``A2A_SEND_TIMEOUT``
    seconds. Raises :class:`CounterpartyError`.
    """
    return asyncio.run(_send(url, move, task_id, context_id))


async def _send(url: str, move: Move, task_id: str, context_id: str) -> Exchange:
    timeout = httpx.Timeout(settings.A2A_SEND_TIMEOUT, connect=settings.A2A_CARD_TIMEOUT)
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            card = await A2ACardResolver(http, url.rstrip("/")).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[new_data_part(move.to_data())],
                task_id=task_id,
                context_id=context_id,
            )
            task = None
            async for event in client.send_message(SendMessageRequest(message=message)):
                if event.HasField("task"):
                    task = event.task
            await client.close()
    except (A2AError, httpx.HTTPError) as exc:
        raise CounterpartyError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if task is None:
        raise CounterpartyError(f"{url} answered with a bare Message, not a Task")
    return Exchange(counterparty_name=card.name, task=with_reply_in_history(MessageToDict(task)))


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
