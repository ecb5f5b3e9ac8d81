"""Benchmark: from a Question committed in a worker to its WebSocket frame in a connected browser's socket.

The production shape on this machine: the uvicorn web process (``parley.asgi``)
and one Celery worker process, with Redis as the broker and as the Channels
layer, Postgres for the data. A client holding a logged-in session connects to
``/ws/live/`` (with the session cookie and an allowed Origin, as a browser
does), in a process of its own that stamps each frame's arrival
(bench/live_reader.py; the peer's socket is read the same way). Each run of
an agent whose model (a chat-completions server on loopback, answering at
once) calls ``ask_user`` suspends in its first step: the worker
writes the Question and its ``question.opened`` event in the step's
transaction, and sends the event to the tenant's group once it commits. The
latency of a question is the frame's arrival at the client minus the moment
the event row's transaction committed, by Postgres's clock
(``pg_xact_commit_timestamp``, when the server has ``track_commit_timestamp``
on). Without it, the row's ``created_at``, stamped inside the transaction, stands in:
an upper bound of commit → frame that also holds the rest of the step's
transaction (every write after the event row, and the commit).

The peer, in the same run (bench/live_peer.py): a bare Channels app (one
``AsyncWebsocketConsumer`` joining one group) under the same uvicorn, on the
same channels-redis layer config, and a sender process that writes a row in a
Postgres transaction, stamping ``created_at`` inside it, and on commit does
``async_to_sync(layer.group_send)``; its latency is measured the same way.

Two passes of Q questions each (default 200), each pass alternating Parley and
the peer: one question at a time (each alone on its socket; Parley and peer
take turns per question), and a burst of Q (Parley's Q runs started at once, so
the worker commits questions back to back as fast as it steps; then the
peer's sender commits Q back to back). Prints p50/p99 of both, the ratios
Parley ÷ peer, and the load average.

    .venv/bin/python bench/live.py [--questions 200]

Uses a fresh database ``parley_bench_live`` on ``BENCH_POSTGRES_URL``'s server
(dropped and created) and the Redis database of ``BENCH_REDIS_URL``
(bench/stack.py), which it empties.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from stack import (
    REDIS_URL,
    commit_times,
    database_url,
    free_port,
    fresh_database,
    percentile,
    records_commit_times,
    stop,
    wait,
    wait_for_workers,
)

BENCH = Path(__file__).resolve().parent
DATABASE = "parley_bench_live"
BENCH_DATABASE_URL = database_url(DATABASE)
WARM_UP = 5


_readers: list[Socket] = []


class Socket:
    """A live socket read by a process of its own (bench/live_reader.py): ``arrived`` maps question ids
    to arrival (epoch s), as the reader stamped them."""

    def __init__(self, url: str, cookie: str, origin: str) -> None:
        self.arrived: dict[str, float] = {}
        self.connected = threading.Event()
        self.failed = False
        self._process = subprocess.Popen(
            [sys.executable, str(BENCH / "live_reader.py"), url, origin],
            env={**os.environ, "BENCH_READER_COOKIE": cookie},
            stdout=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._collect, daemon=True).start()
        _readers.append(self)

    def _collect(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.strip() == "connected":
                self.connected.set()
                continue
            question, received = line.split()
            self.arrived[question] = float(received)
        self.failed = not self.connected.is_set()  # the server was not listening yet

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200, help="questions per pass (Q)")
    args = parser.parse_args()
    if args.questions < 1:
        parser.error("--questions must be at least 1")

    port, peer_port = free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": BENCH_DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
        "OUTBOUND_ALLOW_PRIVATE": "true",  # the model is on loopback
    }
    fresh_database(env, DATABASE)
    import live_peer
    import redis
    from django.conf import settings

    from parley import devstack
    from tests.chat_server import ChatServer, tool_calls

    redis.Redis.from_url(REDIS_URL).flushdb()
    live_peer.create_table(BENCH_DATABASE_URL)
    peer_env = {
        **env,
        "BENCH_PEER_LAYER": json.dumps(settings.CHANNEL_LAYERS),
        "BENCH_PEER_DATABASE": BENCH_DATABASE_URL,
    }
    peer_env.pop("DJANGO_SETTINGS_MODULE")
    ask = ("call_ask", "ask_user", '{"question": "Which budget may I commit?"}')
    with ChatServer(lambda body: tool_calls(ask)) as chat:
        agent, cookie = _create_agent(model_url=chat.url)
        web = devstack.start_web(port, env, subprocess.DEVNULL)
        worker = devstack.start_worker(env, subprocess.DEVNULL, threads=1, name="live@%h")
        uvicorn = [sys.executable, "-m", "uvicorn", "live_peer:application", "--host", "127.0.0.1"]
        peer_web = subprocess.Popen(
            [*uvicorn, "--port", str(peer_port), "--log-level", "error"], cwd=BENCH, env=peer_env
        )
        sender = Sender(peer_env)
        try:
            wait(lambda: _healthy(port), timeout=60)
            wait_for_workers(1)
            socket = Socket(f"ws://127.0.0.1:{port}/ws/live/", cookie, f"http://127.0.0.1:{port}")
            if not socket.connected.wait(timeout=30):
                raise SystemExit("the live socket did not connect")
            wait(lambda: _peer_socket(peer_port).connected.is_set(), timeout=30)
            peer_socket = _peer_socket(peer_port)
            _print_setup()
            _measure_alternating(agent, socket, sender, peer_socket, WARM_UP)
            alone = _measure_alternating(agent, socket, sender, peer_socket, args.questions)
            _report("1 question at a time", *alone)
            burst = (
                _measure(agent, socket, args.questions, at_once=True),
                sender.measure(peer_socket, args.questions),
            )
            _report(f"burst of {args.questions}", *burst)
            print(f"  loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            sender.close()
            stop([worker, web, peer_web])
            for reader in _readers:
                reader.close()


_peer_sockets: dict[int, Socket] = {}


def _peer_socket(port: int) -> Socket:
    """The one socket on the peer app (connected once its server listens)."""
    socket = _peer_sockets.get(port)
    if socket is None or socket.failed:
        socket = _peer_sockets[port] = Socket(f"ws://127.0.0.1:{port}/ws/", "", f"http://127.0.0.1:{port}")
    return socket


class Sender:
    """The peer's sender process (bench/live_peer.py), fed question ids on its stdin."""

    def __init__(self, env: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(BENCH / "live_peer.py")],
            cwd=BENCH,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def measure(self, socket: Socket, count: int) -> list[float]:
        """Commit ``count`` questions back to back and wait for their frames; each latency in seconds."""
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        questions = [str(uuid.uuid4()) for _ in range(count)]
        self._process.stdin.write(" ".join(questions) + "\n")
        self._process.stdin.flush()
        if self._process.stdout.readline().strip() != "ok":
            raise SystemExit("the peer's sender failed")
        wait(lambda: all(q in socket.arrived for q in questions), timeout=60 + count)
        import live_peer

        committed = commit_times(BENCH_DATABASE_URL, live_peer.TABLE, questions)
        stamped = committed or live_peer.created_at(BENCH_DATABASE_URL, questions)
        return [socket.arrived[q] - stamped[q] for q in questions]

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=20)


def _measure_alternating(
    agent: Any, socket: Socket, sender: Sender, peer_socket: Socket, count: int
) -> tuple[list[float], list[float]]:
    """``count`` questions one at a time, Parley and the peer taking turns; (Parley's, peer's) latencies."""
    ours: list[float] = []
    peers: list[float] = []
    for _ in range(count):
        ours += _measure(agent, socket, 1, at_once=False)
        peers += sender.measure(peer_socket, 1)
    return ours, peers


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
    since = (
        "its transaction's commit"
        if records_commit_times(BENCH_DATABASE_URL)
        else "its created_at (in the transaction)"
    )
    print("1 uvicorn web process, 1 Celery worker process (1 thread), 1 connected socket. Latency: the")
    print(f"question.opened frame's arrival minus the event row's stamp: {since}.")
    print("Peer: a bare Channels app under uvicorn, the same layer, a sender process committing a row and")
    print("then async_to_sync(layer.group_send); its frame's arrival minus the same stamp of its row.")
    print(f"loadavg {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _measure(agent: Any, socket: Socket, count: int, *, at_once: bool) -> list[float]:
    """Start ``count`` runs that each ask one question; return each question's latency in seconds.

    With ``at_once`` every run is started before any is waited for; otherwise
    each run's frame is awaited before the next starts. Fails (SystemExit)
    when a question's frame does not arrive within 60 s.
    """
    from agents.models import Intent, Question
    from agents.services import runs
    from parley.models import Event

    before = len(socket.arrived)
    run_ids = []
    for _ in range(count):
        intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Raise a seed round.")
        run = runs.run_start(agent=agent, intent=intent, task="Find out the budget.")
        run_ids.append(run.pk)
        if not at_once:
            wait(lambda: len(socket.arrived) >= before + len(run_ids), timeout=60)
    try:
        # Counting frames, not asking Postgres per run: this process must stay idle while they come.
        wait(lambda: len(socket.arrived) >= before + count, timeout=60 + count)
    except SystemExit:
        asked = Question.objects.for_tenant(agent.tenant_id).filter(run_id__in=run_ids).count()
        arrived = len(socket.arrived)
        raise SystemExit(f"{arrived} frames arrived for {asked} questions asked by {count} runs") from None
    asked_now = Question.objects.for_tenant(agent.tenant_id).filter(run_id__in=run_ids)
    questions = {str(q.pk): q.run_id for q in asked_now}
    opened = Event.objects.for_tenant(agent.tenant_id).filter(kind="question.opened")
    events = list(opened.filter(payload__question__in=list(questions)))
    if len(events) != count:
        raise SystemExit(f"{count} runs opened {len(events)} questions, not one each")
    if missing := [q for q in questions if q not in socket.arrived]:
        raise SystemExit(f"{len(missing)} of {count} questions' frames did not arrive")
    committed = commit_times(BENCH_DATABASE_URL, Event._meta.db_table, [str(e.pk) for e in events])
    if committed is not None:
        return [socket.arrived[e.payload["question"]] - committed[str(e.pk)] for e in events]
    return [socket.arrived[e.payload["question"]] - e.created_at.timestamp() for e in events]


def _line(label: str, latencies: list[float]) -> str:
    p50, p99, most = (percentile(latencies, p) * 1000 for p in (50, 99, 100))
    counted = f"{len(latencies)} questions"
    return f"  {label:<32} {counted:<14} p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  max {most:6.1f} ms"


def _report(label: str, ours: list[float], peers: list[float]) -> None:
    """Print both lines of a pass and the ratios Parley ÷ peer at p50 and p99."""
    print(_line(f"{label}, Parley", ours))
    print(_line(f"{label}, peer", peers))
    p50, p99 = (percentile(ours, p) / percentile(peers, p) for p in (50, 99))
    print(f"  {label}: Parley / peer  p50 {p50:.2f}x  p99 {p99:.2f}x")


if __name__ == "__main__":
    main()
