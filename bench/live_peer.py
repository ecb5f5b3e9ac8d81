"""The peer of bench/live.py: a bare Channels app and a sender over the same channels-redis layer.

Two roles, both configured by ``BENCH_PEER_LAYER`` (the JSON of the
``CHANNEL_LAYERS`` Parley runs with, so the layer and its Redis are the same)
and ``BENCH_PEER_DATABASE`` (a libpq URL):

- ``application``: a minimal ASGI app, one ``AsyncWebsocketConsumer`` that joins
  the group ``peer`` and forwards each message as ``{"event", "payload"}`` JSON.
  Served by uvicorn exactly as Parley's web process is:
  ``python -m uvicorn live_peer:application`` from bench/.
- ``python bench/live_peer.py``: the sender. Each line on stdin names question
  ids; for each, in order, it writes a row in a Postgres transaction, stamping
  its ``created_at`` (epoch s) inside the transaction as Parley's worker stamps
  its event row, and once it commits sends a ``question.opened`` message to
  the group with ``async_to_sync(layer.group_send)``. It prints ``ok`` after each line.

Nothing here is imported by Parley.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

from django.conf import settings

if "BENCH_PEER_LAYER" in os.environ and not settings.configured:  # bench/live.py started this process
    settings.configure(CHANNEL_LAYERS=json.loads(os.environ["BENCH_PEER_LAYER"]))

from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.routing import ProtocolTypeRouter, URLRouter
from django.urls import path

GROUP = "peer"
TABLE = "bench_peer_event"


class PeerConsumer(AsyncWebsocketConsumer):
    """Joins :data:`GROUP` and forwards what it receives."""

    async def connect(self) -> None:
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def live_event(self, message: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps({"event": message["event"], "payload": message["payload"]}))


application = ProtocolTypeRouter({"websocket": URLRouter([path("ws/", PeerConsumer.as_asgi())])})


def create_table(database: str) -> None:
    """(Re)create the sender's table in ``database``."""
    import psycopg

    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(f"drop table if exists {TABLE}")
        columns = "id uuid primary key, created_at double precision, payload jsonb"
        connection.execute(f"create table {TABLE} ({columns})")


def created_at(database: str, questions: list[str]) -> dict[str, float]:
    """Each question's stamped ``created_at`` (epoch s)."""
    import psycopg

    with psycopg.connect(database) as connection:
        rows = connection.execute(f"select id, created_at from {TABLE} where id = any(%s)", [questions])
        return {str(pk): stamp for pk, stamp in rows}


def _sender() -> None:
    import psycopg

    layer = get_channel_layer()
    connection = psycopg.connect(os.environ["BENCH_PEER_DATABASE"])
    for line in sys.stdin:
        for question in line.split():
            payload = {"question": question, "run": str(uuid.uuid4()), "kind": "input"}
            with connection.transaction():
                connection.execute(
                    f"insert into {TABLE} (id, created_at, payload) values (%s, %s, %s)",
                    [question, time.time(), json.dumps(payload)],
                )
            message = {"type": "live.event", "event": "question.opened", "payload": payload}
            async_to_sync(layer.group_send)(GROUP, message)
        print("ok", flush=True)


if __name__ == "__main__":
    _sender()
