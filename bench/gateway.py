"""Benchmark: SendMessage through our A2A gateway against a bare a2a-sdk app, with one trivial executor.

Three servers run side by side, each one uvicorn process with the same settings,
on loopback:

* **gateway** — ``a2a_gateway.app.build_app(executor=EchoExecutor())``: the
  edge resolves tenant and agent from the path (``ResolveAgent``) and
  authenticates the caller's API key (``inbound_auth=api_key``, the
  ``X-API-Key`` header); the context builders admit the message as the real
  gateway does (the move is checked against the negotiation rules, without a
  turn); the Tasks go to the Postgres store (``DjangoTaskStore``). Only the
  negotiator is replaced.
* **bare-db** — a Starlette app of a2a-sdk's ``create_jsonrpc_routes`` (0.3 compat
  on, as ours) with ``DefaultRequestHandler`` and the SDK's own durable
  ``DatabaseTaskStore`` (SQLAlchemy async over asyncpg, the ``a2a-sdk[postgresql]``
  extra) on the same Postgres server, in its own database: the peer a user would
  pick instead.
* **bare-mem** — the same bare app with ``InMemoryTaskStore``: nothing durable, the floor.

Both answer with :class:`EchoExecutor`: the Task, an artifact echoing the
message's parts, completed. Each request is a JSON-RPC ``SendMessage``
(``A2A-Version: 1.0``) opening a new task with one ``propose`` move; every
answer is checked to be a completed task. For each number of concurrent
clients (coroutines sharing one ``httpx.AsyncClient`` with as many
connections), each server gets a warm-up, then the measured requests; the
servers take turns, so drift on the machine hits both. Reported: requests/s
over the measured wall time, p50 and p99 latency, and the gateway's ratios to
each bare app. Then, for the two durable servers, an accounting pass at one
client: SQL statements per SendMessage (counted in the server process: Django's
execute wrappers, SQLAlchemy's cursor events) and commits per SendMessage (the
database's ``xact_commit`` in ``pg_stat_database``). The client runs on the
same cores as the servers; the load average is printed before and after.

    .venv/bin/python bench/gateway.py [--requests 1000] [--warmup 100] [--concurrency 1 32]

Uses fresh databases ``parley_bench_gw`` and ``bare_bench_gw`` (dropped and created) on the server of
``BENCH_POSTGRES_URL`` and the Redis database of ``BENCH_REDIS_URL`` (bench/stack.py), which it empties.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.utils.errors import InvalidParamsError
from stack import REDIS_URL, ROOT, database_url, free_port, fresh_database, wait
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

DATABASE = "parley_bench_gw"
# The durable bare app's own database, on the same server.
BARE_DATABASE = "bare_bench_gw"
# Where each server tells how many SQL statements it has run (bench only).
STATEMENTS_PATH = "/bench/statements"
# Requests of the accounting pass (statements and commits per SendMessage).
ACCOUNTED = 100
# Seconds after which an idle Postgres backend reports its commits to pg_stat_database at the latest.
IDLE_REPORT_SECONDS = 10
TENANT, AGENT = "bench", "echo"
PATH = f"/a2a/{TENANT}/{AGENT}"
# One uvicorn worker process each, the same settings for both servers.
UVICORN = ["--host", "127.0.0.1", "--workers", "1", "--log-level", "warning", "--no-access-log"]
# What would refuse the load rather than serve it is lifted: a cap of 8 turns at once (32 clients),
# 60 messages a minute per caller; and contexts are never forgotten, so no run pays for evictions.
AGENT_CAPS = {"max_concurrency": 64, "rate_limit": 1_000_000, "max_contexts": 1_000_000}


class EchoExecutor(AgentExecutor):
    """The trivial executor: the Task, an artifact echoing the message's parts, completed — at once."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message, task_id, context_id = context.message, context.task_id, context.context_id
        if message is None or not task_id or not context_id:
            raise InvalidParamsError(message="The request carries no message.")
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.add_artifact(list(message.parts), name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if not context.task_id or not context.context_id:
            raise InvalidParamsError(message="The request names no task.")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Statements:
    """A count of the SQL statements a server process runs, answered at :data:`STATEMENTS_PATH`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == STATEMENTS_PATH:
            await JSONResponse({"statements": self.count})(scope, receive, send)
            return
        await self.app(scope, receive, send)


def gateway_app() -> ASGIApp:
    """uvicorn factory: our gateway with :class:`EchoExecutor`; Django set up from the environment."""
    import django

    django.setup()
    from django.db.backends.signals import connection_created

    from a2a_gateway.app import build_app

    counted = Statements(build_app(executor=EchoExecutor()))

    def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        counted.count += 1
        return execute(sql, params, many, context)

    def wrap(sender: object, connection: object, **kwargs: object) -> None:
        connection.execute_wrappers.append(count)  # type: ignore[attr-defined]

    connection_created.connect(wrap, weak=False)
    return counted


def bare_db_app() -> ASGIApp:
    """uvicorn factory: a2a-sdk alone with its durable ``DatabaseTaskStore`` (SQLAlchemy, asyncpg)."""
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(os.environ["BARE_DATABASE_URL"])
    store = DatabaseTaskStore(engine)
    counted = Statements(bare_app(store, startup=store.initialize))

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def count(*args: object) -> None:
        counted.count += 1

    return counted


def bare_mem_app() -> ASGIApp:
    """uvicorn factory: a2a-sdk alone with ``InMemoryTaskStore``."""
    return Statements(bare_app(InMemoryTaskStore()))


def bare_app(store: TaskStore, startup: Callable[[], Awaitable[None]] | None = None) -> ASGIApp:
    """a2a-sdk alone — JSON-RPC routes, the default handler — over ``store``."""
    card = AgentCard(
        name="Echo",
        description="Answers every message at once.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1{PATH}", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes the message.", tags=["bench"])],
    )
    handler = DefaultRequestHandler(agent_executor=EchoExecutor(), task_store=store, agent_card=card)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if startup is not None:
            await startup()
        yield
        await handler.aclose()

    routes = create_jsonrpc_routes(handler, rpc_url="/a2a/{tenant}/{agent}", enable_v0_3_compat=True)
    return Starlette(routes=routes, lifespan=lifespan)


def serve(factory: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``factory`` (a function of this module) under uvicorn on 127.0.0.1:``port``."""
    command = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", "bench", f"gateway:{factory}"]
    return subprocess.Popen([*command, "--port", str(port), *UVICORN], cwd=ROOT, env=env)


def body(*, request_id: int) -> bytes:
    """A JSON-RPC 1.0 SendMessage opening a new task with a ``propose`` move (fresh message, context and
    offer ids): a first message with a ``contextId``, as our own client sends one (negotiations.client), so
    the gateway answers it under its claim (a2a_gateway.claims.MessageClaims)."""
    move = {
        "action": "propose",
        "message": "I can pay €800 a day.",
        "terms": {"amount": 800, "currency": "EUR"},
        "offerId": str(uuid.uuid4()),
    }
    message = {
        "messageId": str(uuid.uuid4()),
        "contextId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": move}],
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": {"message": message}}
    ).encode()


@dataclass(frozen=True)
class Result:
    requests: int
    wall: float  # seconds
    latencies: list[float]  # seconds, one per request

    @property
    def throughput(self) -> float:
        return self.requests / self.wall

    def percentile(self, p: int) -> float:
        """The ``p``-th percentile latency in milliseconds."""
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[p - 1] * 1000


async def load(url: str, headers: dict[str, str], *, requests: int, concurrency: int) -> Result:
    """``requests`` SendMessages from ``concurrency`` clients; exits on any answer but a completed task."""
    import httpx

    latencies: list[float] = []
    left = requests
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as http:

        async def client() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                content = body(request_id=left)
                started = time.perf_counter()
                response = await http.post(url, content=content)
                latencies.append(time.perf_counter() - started)
                try:
                    state = response.json()["result"]["task"]["status"]["state"]
                except (ValueError, KeyError, TypeError):
                    state = None
                if state != "TASK_STATE_COMPLETED":
                    raise SystemExit(
                        f"unexpected answer from {url}: {response.status_code} {response.text[:300]}"
                    )

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return Result(requests, time.perf_counter() - started, latencies)


def echo_agent() -> str:
    """The agent at :data:`PATH` (inbound API keys, :data:`AGENT_CAPS`) in a new tenant; its one
    inbound key. Django must be set up on the benchmark's database."""
    from a2a_gateway.auth import inbound_key_create
    from agents.models import Agent
    from parley.models import Tenant

    tenant = Tenant.objects.create(slug=TENANT, name="Bench")
    agent = Agent.objects.create(
        tenant=tenant,
        slug=AGENT,
        name="Echo",
        terms="amount (number, EUR per day), currency",
        inbound_auth=Agent.InboundAuth.API_KEY,
        **AGENT_CAPS,
    )
    return inbound_key_create(agent=agent, name="bench client")[1]


def machine() -> str:
    """Cores, CPU model, OS, and the versions that matter here."""
    from importlib.metadata import version

    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    postgres = subprocess.run(
        ["psql", database_url("postgres"), "-tAc", "show server_version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    packages = ", ".join(
        f"{name} {version(name)}"
        for name in ("a2a-sdk", "starlette", "uvicorn", "uvloop", "httptools", "httpx")
    )
    return (
        f"machine: {os.cpu_count()} cores ({model}), {platform.platform()}\n"
        f"         Python {platform.python_version()}, Postgres {postgres}; {packages}"
    )


def commits(database: str) -> int:
    """Transactions committed in ``database`` so far, once the servers' backends have reported theirs.

    A backend reports its counts at a transaction's end at most once a second, and once idle only
    after 10 s (Postgres 15's PGSTAT_IDLE_INTERVAL): polled until steady for longer than that, or the
    last second's commits of a run could be missed (3 s of steadiness gave counts from 3 to 8).
    """

    def read() -> int:
        sql = f"select xact_commit from pg_stat_database where datname = '{database}'"
        return int(
            subprocess.run(
                ["psql", database_url("postgres"), "-tAc", sql],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )

    last, steady = read(), 0
    while steady < IDLE_REPORT_SECONDS + 1:
        time.sleep(1)
        now = read()
        steady = steady + 1 if now == last else 0
        last = now
    return last


def loadavg() -> str:
    return "load average: " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per server and level")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured requests before each measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args()

    names = ("gateway", "bare-db", "bare-mem")
    ports = {name: free_port() for name in names}
    env = {
        **os.environ,
        "DATABASE_URL": database_url(DATABASE),
        "BARE_DATABASE_URL": database_url(BARE_DATABASE).replace("postgres://", "postgresql+asyncpg://", 1),
        "REDIS_URL": REDIS_URL,
        "PUBLIC_BASE_URL": f"http://127.0.0.1:{ports['gateway']}",
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
    }
    for sql in (f"drop database if exists {BARE_DATABASE}", f"create database {BARE_DATABASE}"):
        subprocess.run(["psql", database_url("postgres"), "-qc", sql], check=True)
    fresh_database(env, DATABASE)
    import httpx
    import redis
    from django.conf import settings

    redis.Redis.from_url(REDIS_URL).flushdb()
    key = echo_agent()
    from django.db import connection

    connection.close()  # the servers' connections alone count in the database's commits
    common = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    keyed = {**common, "X-API-Key": key}
    targets = {
        name: (f"http://127.0.0.1:{port}{PATH}", keyed if name == "gateway" else common)
        for name, port in ports.items()
    }
    databases = {"gateway": DATABASE, "bare-db": BARE_DATABASE}

    print(machine())
    print(
        f"servers: uvicorn {' '.join(UVICORN[2:])} (uvloop, httptools), one process each; the client "
        f"(httpx, one process) shares the cores\n"
        f"gateway:  build_app(executor=EchoExecutor()), agent inbound_auth=api_key (X-API-Key), "
        f"{', '.join(f'{k}={v}' for k, v in AGENT_CAPS.items())}; Postgres {DATABASE} "
        f"(CONN_MAX_AGE={settings.DATABASES['default']['CONN_MAX_AGE']}), {REDIS_URL}\n"
        f"bare-db:  create_jsonrpc_routes + DefaultRequestHandler + DatabaseTaskStore (SQLAlchemy, asyncpg; "
        f"Postgres {BARE_DATABASE}), same EchoExecutor\n"
        f"bare-mem: the same with InMemoryTaskStore\n"
        f"load:     SendMessage (A2A-Version 1.0), a new task each; {args.warmup} warm-up + "
        f"{args.requests} measured requests per server and level, the servers in turn\n"
        f"before:   {loadavg()}"
    )
    processes = [serve(f"{name.replace('-', '_')}_app", port, env) for name, port in ports.items()]
    try:
        for url, _ in targets.values():
            wait(lambda url=url: httpx.get(url, timeout=1).status_code == 405)
        # The key is really on the path: without it, the gateway refuses.
        refused = httpx.post(targets["gateway"][0], content=body(request_id=0), headers=common)
        if refused.status_code != 401:
            raise SystemExit(f"the gateway answered a call without its key: {refused.status_code}")
        results: dict[tuple[str, int], Result] = {}
        for concurrency in args.concurrency:
            for name, (url, headers) in targets.items():
                asyncio.run(load(url, headers, requests=args.warmup, concurrency=concurrency))
                results[name, concurrency] = asyncio.run(
                    load(url, headers, requests=args.requests, concurrency=concurrency)
                )
        print(f"after:    {loadavg()}")
        print()
        print(f"{'server':<9} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for concurrency in args.concurrency:
            for name in targets:
                r = results[name, concurrency]
                print(
                    f"{name:<9} {concurrency:>7} {r.throughput:>9.1f} "
                    f"{r.percentile(50):>8.2f} {r.percentile(99):>8.2f}"
                )
        for peer in ("bare-db", "bare-mem"):
            print()
            print(f"{'gateway/' + peer:<17} {'req/s':>8} {'p50':>8} {'p99':>8}")
            for concurrency in args.concurrency:
                g, b = results["gateway", concurrency], results[peer, concurrency]
                print(
                    f"{concurrency:>2} client{'s' if concurrency > 1 else ' '}        "
                    f"{g.throughput / b.throughput:>8.2f} {g.percentile(50) / b.percentile(50):>8.2f} "
                    f"{g.percentile(99) / b.percentile(99):>8.2f}"
                )
        print()
        print(f"per SendMessage ({ACCOUNTED} at 1 client)  {'statements':>10} {'commits':>8}")
        for name, database in databases.items():
            url, headers = targets[name]
            statements_url = f"http://127.0.0.1:{ports[name]}{STATEMENTS_PATH}"
            statements, committed = httpx.get(statements_url).json()["statements"], commits(database)
            asyncio.run(load(url, headers, requests=ACCOUNTED, concurrency=1))
            statements = httpx.get(statements_url).json()["statements"] - statements
            committed = commits(database) - committed
            print(f"{name:<34} {statements / ACCOUNTED:>10.1f} {committed / ACCOUNTED:>8.1f}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)


if __name__ == "__main__":
    main()
