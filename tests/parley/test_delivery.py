"""Live events over the Redis channel layer, sent from a thread with no event loop (a Celery worker's)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings as django_settings

from parley import live

# Redis itself: left out of the embedded default's run.
pytestmark = pytest.mark.redis

COUNT = 100


@pytest.fixture
def redis_layer(settings: Any) -> Any:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [django_settings.REDIS_URL]},
        }
    }
    layer = get_channel_layer()
    async_to_sync(layer.flush)()
    return layer


def test_streamed_text_sent_from_a_worker_thread_arrives_whole_and_in_order(redis_layer: Any) -> None:
    tenant_id = 424242

    async def receive_all(channel: str) -> list[str]:
        return [(await redis_layer.receive(channel))["payload"]["delta"] for _ in range(COUNT)]

    async def listen() -> list[str]:
        channel = await redis_layer.new_channel()
        await redis_layer.group_add(live.tenant_group(tenant_id), channel)
        started.set()
        return await asyncio.wait_for(receive_all(channel), timeout=30)

    def publish() -> None:
        started.wait(timeout=30)
        for i in range(COUNT):
            live.push_transient(
                event="run.delta",
                tenant_id=tenant_id,
                party_id=None,
                payload={"run": "r", "step": 1, "delta": str(i)},
            )

    started = threading.Event()
    worker = threading.Thread(target=publish)  # no event loop on it, like a Celery worker's thread
    worker.start()
    received = async_to_sync(listen)()
    worker.join()

    assert received == [str(i) for i in range(COUNT)]
    # Sent on the process's delivery loop, not a loop of async_to_sync's per event.
    assert live._delivery is not None
    assert live._delivery[1].is_running()
