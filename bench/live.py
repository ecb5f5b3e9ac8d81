"""Benchmark: from a Question committed in a worker to its WebSocket frame in a connected browser's socket.

The production shape on this machine: the uvicorn web process (``parley.asgi``)
and one Celery worker process, with Redis as the broker and as the Channels
layer, Postgres for the data. A client holding a logged-in session connects to
``/ws/live/`` (with the session cookie and an allowed Origin, as a browser
does). Each run of an agent whose model (a chat-completions server on loopback,
answering at once) calls ``ask_user`` suspends in its first step: the worker
writes the Question and its ``question.opened`` event in the step's
transaction, and sends the event to the tenant's group once it commits. The
latency of a question is the frame's arrival at the client minus the event
row's ``created_at``, which the worker stamps inside that transaction just
before it commits: the figure is an upper bound of commit → frame (it also
holds the transaction's tail and the commit itself).

Two passes of Q questions each (default 200): one run started at a time
(each question alone on the socket), and Q runs started at once (the worker
commits questions back to back, as fast as it steps).

    .venv/bin/python bench/live.py [--questions 200]

Uses a fresh database ``parley_bench`` (dropped and created) and the Redis database of
``BENCH_REDIS_URL`` (bench/stack.py), which it empties.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from stack import DATABASE_URL, REDIS_URL, free_port, fresh_database, percentile, stop, wait, wait_for_workers

WARM_UP = 5


class Socket:
    """A live socket read on a thread of its own: ``arrived`` maps question ids to arrival (epoch s)."""

    def __init__(self, url: str, cookie: str, origin: str) -> None:
        self.arrived: dict[str, float] = {}
        self.connected = threading.Event()
        self._url, self._headers = url, {"Cookie": cookie, "Origin": origin}
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_until_complete, args=(self._read(),), daemon=True).start()

    async def _read(self) -> None:
        import websockets

        async with websockets.connect(self._url, additional_headers=self._headers) as socket:
            self.connected.set()
            try:
                async for frame in socket:
                    received = time.time()
                    message = json.loads(frame)
                    if message["event"] == "question.opened":
                        self.arrived[message["payload"]["question"]] = received
            except websockets.ConnectionClosed:
                return  # the web process stopped at the end of the benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200, help="questions per pass (Q)")
    args = parser.parse_args()
    if args.questions < 1:
        parser.error("--questions must be at least 1")

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
    }
    fresh_database(env)
    import redis

    from parley import devstack
    from tests.chat_server import ChatServer, tool_calls

    redis.Redis.from_url(REDIS_URL).flushdb()
    ask = ("call_ask", "ask_user", '{"question": "Which budget may I commit?"}')
    with ChatServer(lambda body: tool_calls(ask)) as chat:
        agent, cookie = _create_agent(model_url=chat.url)
        web = devstack.start_web(port, env, subprocess.DEVNULL)
        worker = devstack.start_worker(env, subprocess.DEVNULL, threads=1, name="live@%h")
        try:
            wait(lambda: _healthy(port), timeout=60)
            wait_for_workers(1)
            socket = Socket(f"ws://127.0.0.1:{port}/ws/live/", cookie, f"http://127.0.0.1:{port}")
            if not socket.connected.wait(timeout=30):
                raise SystemExit("the live socket did not connect")
            _print_setup()
            _measure(agent, socket, WARM_UP, at_once=False)
            alone = _measure(agent, socket, args.questions, at_once=False)
            print(_line("1 question at a time", alone))
            together = _measure(agent, socket, args.questions, at_once=True)
            print(_line(f"{args.questions} runs at once", together))
        finally:
            stop([worker, web])


def _create_agent(*, model_url: str) -> tuple[Any, str]:
    """The tenant, its party (logged in: the session cookie) and the agent whose model always asks."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from agents.models import Agent, ModelEndpoint
    from parley.models import Membership, Tenant

    tenant = Tenant.objects.create(slug="bench-live", name="Bench live")
    user = get_user_model().objects.create_user(username="founder", password="unused-in-the-bench")
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.PRINCIPAL)
    ModelEndpoint.objects.create(tenant=tenant, name="asker", base_url=model_url, upstream_model="asker")
    agent = Agent.objects.create(tenant=tenant, slug="asker", name="Asker", model="asker", principal=user)
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return agent, f"{name}={client.cookies[name].value}"


def _healthy(port: int) -> bool:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200


def _print_setup() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("show server_version")
        postgres = cursor.fetchone()[0].split()[0]
    print(f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, Postgres {postgres}, Redis layer")
    print("1 uvicorn web process, 1 Celery worker process (1 thread), 1 connected socket. Latency: the")
    print("question.opened frame's arrival minus the event's created_at (in the worker's transaction)")


def _measure(agent: Any, socket: Socket, count: int, *, at_once: bool) -> list[float]:
    """Start ``count`` runs that each ask one question; return each question's latency in seconds.

    With ``at_once`` every run is started before any is waited for; otherwise
    each run's frame is awaited before the next starts. Fails (SystemExit)
    when a question's frame does not arrive within 60 s.
    """
    from agents.models import Intent, Question
    from agents.services import runs
    from parley.models import Event

    run_ids = []
    for _ in range(count):
        intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Raise a seed round.")
        run = runs.run_start(agent=agent, intent=intent, task="Find out the budget.")
        run_ids.append(run.pk)
        if not at_once:
            wait(lambda run=run: _arrived(socket, agent.tenant_id, run.pk), timeout=60)
    try:
        wait(lambda: all(_arrived(socket, agent.tenant_id, pk) for pk in runs), timeout=60 + count)
    except SystemExit:
        asked = Question.objects.for_tenant(agent.tenant_id).filter(run_id__in=runs).count()
        arrived = len(socket.arrived)
        raise SystemExit(f"{arrived} frames arrived for {asked} questions asked by {count} runs") from None
    asked_now = Question.objects.for_tenant(agent.tenant_id).filter(run_id__in=runs)
    questions = {str(q.pk): q.run_id for q in asked_now}
    opened = Event.objects.for_tenant(agent.tenant_id).filter(kind="question.opened")
    events = list(opened.filter(payload__question__in=list(questions)))
    if len(events) != count:
        raise SystemExit(f"{count} runs opened {len(events)} questions, not one each")
    return [socket.arrived[e.payload["question"]] - e.created_at.timestamp() for e in events]


def _arrived(socket: Socket, tenant_id: int, run_id: Any) -> bool:
    from agents.models import Question

    asked = Question.objects.for_tenant(tenant_id).filter(run_id=run_id)
    question = asked.values_list("pk", flat=True).first()
    return question is not None and str(question) in socket.arrived


def _line(label: str, latencies: list[float]) -> str:
    p50, p99, most = (percentile(latencies, p) * 1000 for p in (50, 99, 100))
    counted = f"{len(latencies)} questions"
    return f"  {label:<21} {counted:<14} p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  max {most:6.1f} ms"


if __name__ == "__main__":
    main()
