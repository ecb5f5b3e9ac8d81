"""The dashboard's one WebSocket: it forwards live events of the user's own tenants."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from parley import live
from parley.selectors import tenant_ids_of


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the user's group and their tenants' groups; refuses anonymous sockets."""

    groups: list[str] = []

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        tenant_ids = await database_sync_to_async(tenant_ids_of)(user)
        self._joined = [live.user_group(user.pk)] + [live.tenant_group(t) for t in tenant_ids]
        for group in self._joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, message: dict[str, Any]) -> None:
        await self.send_json({"event": message["event"], "payload": message["payload"]})
