"""The dashboard's one WebSocket: it pushes live events of the user's own tenants, and nothing else."""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from parley import live
from parley.selectors import tenant_ids_of

# Close codes in the application range (4000-4999) of RFC 6455 §7.4.2.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_STALE = 4403


class LiveConsumer(AsyncWebsocketConsumer):
    """Joins the groups of the user's tenants, then forwards each event as JSON.

    A frame sent to the browser is ``{"event": <name>, "payload": {...}}`` (see
    :mod:`parley.live`). Anonymous sockets are refused. Before every event the
    session and the memberships are read again: once the user has logged out,
    or joined or left a tenant, the socket is closed, and the page reconnects
    into the right groups (or is refused) and re-syncs. Frames from the browser
    are ignored: the socket is push-only.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.tenant_ids = await database_sync_to_async(self._tenant_ids_now)()
        if self.tenant_ids is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.joined = [live.tenant_group(t) for t in self.tenant_ids]
        self.closing = False
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, message: dict[str, Any]) -> None:
        if self.closing:
            return  # events already queued for this socket when it was closed
        # Membership is re-read on every stored event; transient ones (a model's text, chunk by
        # chunk) come too often to cost two queries each, and the next stored event closes the socket.
        if message["event"] not in live.TRANSIENT_EVENTS and (
            await database_sync_to_async(self._tenant_ids_now)() != self.tenant_ids
        ):
            self.closing = True
            await self.close(code=CLOSE_STALE)
            return
        await self.send(text_data=json.dumps({"event": message["event"], "payload": message["payload"]}))

    def _tenant_ids_now(self) -> list[int] | None:
        """The user's tenant ids now, or ``None`` once their session has ended (logged out elsewhere)."""
        session = self.scope["session"]
        if not session.session_key or not session.exists(session.session_key):
            return None
        return tenant_ids_of(self.scope["user"])
