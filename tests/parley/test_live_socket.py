"""A dashboard socket on the production shape (uvicorn, the Redis channel layer) that sits idle for
longer than a Redis read may take still receives the next question.

channels-redis waits for a socket's next message in 5-second blocks; redis-py 8 gives up on a read
after 5 s unless told otherwise, and the consumer then died without closing the socket, so a page
open for more than a few quiet seconds never heard of the question its party had to answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import connections
from django.test import Client
from websockets.asyncio.client import ClientConnection, connect

from agents.models import Agent, Intent, Question
from agents.offline import ASK_FOR_COUNTERPARTIES
from agents.services import runs
from tests.conftest import LiveStack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

# Seconds without a frame: past redis-py's 5 s read timeout and channels-redis's 5 s block, twice over.
IDLE = 12.0


def start_asking_run(agent: Agent, intent: Intent) -> None:
    """A run whose task names no counterparty: the offline model asks its party which to negotiate with."""
    try:
        runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO.")
    finally:
        connections.close_all()


async def next_frame(socket: ClientConnection, event: str) -> dict[str, Any]:
    """The first frame of ``event`` within 30 s, skipping others (run.updated, run.delta) before it."""
    async with asyncio.timeout(30):
        while True:
            frame: dict[str, Any] = json.loads(await socket.recv())
            if frame["event"] == event:
                return frame


def test_a_socket_idle_past_a_redis_read_timeout_receives_the_next_question(
    live_stack: LiveStack, client: Client, principal: AbstractUser, agent: Agent, intent: Intent
) -> None:
    client.force_login(principal)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    address = live_stack.url.replace("http://", "ws://") + "/ws/live/"

    async def idle_then_ask() -> dict[str, Any]:
        headers = {"Cookie": cookie, "Origin": live_stack.url}
        async with connect(address, additional_headers=headers) as socket:
            await asyncio.sleep(IDLE)
            await asyncio.to_thread(start_asking_run, agent, intent)
            return await next_frame(socket, "question.opened")

    frame = asyncio.run(idle_then_ask())

    question = Question.across_tenants.get(run__agent=agent)
    assert question.question == ASK_FOR_COUNTERPARTIES
    assert frame["payload"]["question"] == str(question.pk)
