"""The dashboard's one WebSocket: it pushes the live events the user may see, and nothing else."""

from __future__ import annotations

import asyncio
import json
import time
from importlib import import_module
from typing import Any

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from parley import live
from parley.selectors import roles_of

# Close codes in the application range (4000-4999) of RFC 6455 §7.4.2.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_STALE = 4403


class LiveConsumer(AsyncWebsocketConsumer):
    """Joins the user's groups (per tenant: the tenant's, or a principal's own, see
    :func:`parley.live.groups_for`), then forwards each event as JSON.

    A frame sent to the browser is ``{"event": <name>, "payload": {...}}`` (see
    :mod:`parley.live`). Anonymous sockets are refused. Before a stored event, at
    most once every ``settings.LIVE_RECHECK_SECONDS``, the user is resolved from
    the session again, as an HTTP request would be, and the memberships are read
    again: once the user has logged out, changed their
    password, been deactivated, joined or left a tenant, or been given another
    role in one, the socket is closed, and the page reconnects into the right
    groups (or is refused) and re-syncs, re-rendered for the role it has now.
    Frames from the browser are ignored: the socket is push-only.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.roles = await self._roles_now()
        if self.roles is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.joined = [
            group
            for tenant, role in self.roles
            for group in live.groups_for(tenant_id=tenant, role=role, user_id=user.pk)
        ]
        self.closing = False
        self.checked_at = time.monotonic()
        self.rechecking: asyncio.Task[None] | None = None
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        rechecking: asyncio.Task[None] | None = getattr(self, "rechecking", None)
        if rechecking is not None:
            rechecking.cancel()
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, message: dict[str, Any]) -> None:
        if self.closing:
            return  # events already queued for this socket when it was closed
        # The session and memberships are read again as stored events come, never on an idle socket:
        # three queries per event would put a busy socket seconds behind (and past the layer's channel
        # capacity, which drops events). Read ahead in the background, they keep the event that comes
        # next from waiting for them. Transient events never re-check.
        if message["event"] not in live.TRANSIENT_EVENTS:
            age = time.monotonic() - self.checked_at
            if self.rechecking is None and age >= settings.LIVE_RECHECK_SECONDS / 2:
                self.rechecking = asyncio.ensure_future(self._recheck())
            if age >= settings.LIVE_RECHECK_SECONDS and self.rechecking is not None:
                await asyncio.shield(self.rechecking)
            if self.closing:
                return
        await self.send(text_data=json.dumps({"event": message["event"], "payload": message["payload"]}))

    async def _recheck(self) -> None:
        """Read the user and roles again: close the socket if they changed, else renew the check."""
        started = time.monotonic()
        try:
            if await self._roles_now() != self.roles:
                self.closing = True
                await self.close(code=CLOSE_STALE)
            else:
                self.checked_at = started
        finally:
            self.rechecking = None

    async def _roles_now(self) -> list[tuple[int, str]] | None:
        """The user's ``(tenant id, role)`` pairs now, or ``None`` once the session no longer holds
        this user: logged out, password changed (the session's hash no longer matches), deactivated."""
        # A fresh store of the same key: what is stored now, not what this socket read at connect.
        stored = import_module(settings.SESSION_ENGINE).SessionStore(self.scope["session"].session_key)
        user = await get_user({**self.scope, "session": stored})
        if not user.is_authenticated or user.pk != self.scope["user"].pk:
            return None
        return await database_sync_to_async(roles_of)(user)
