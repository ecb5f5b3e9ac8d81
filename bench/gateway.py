"""Benchmark: SendMessage through our A2A gateway against a bare a2a-sdk app, with one trivial executor.

Two servers run side by side, each one uvicorn process with the same settings,
on loopback:

* **gateway** — ``a2a_gateway.app.build_app(executor=EchoExecutor())``: the
  edge resolves tenant and agent from the path (``ResolveAgent``) and
  authenticates the caller's API key (``inbound_auth=api_key``, the
  ``X-API-Key`` header); the context builders admit the message as the real
  gateway does (the move is checked against the negotiation rules, without a
  turn); the Tasks go to the Postgres store (``DjangoTaskStore``). Only the
  negotiator is replaced.
* **bare** — a Starlette app of a2a-sdk's ``create_jsonrpc_routes`` (0.3 compat
  on, as ours) with ``DefaultRequestHandler`` and ``InMemoryTaskStore``.

Both answer with :class:`EchoExecutor`: the Task, an artifact echoing the
message's parts, completed. Each request is a JSON-RPC ``SendMessage``
(``A2A-Version: 1.0``) opening a new task with one ``propose`` move; every
answer is checked to be a completed task. For each number of concurrent
clients (coroutines sharing one ``httpx.AsyncClient`` with as many
connections), each server gets a warm-up, then the measured requests; the
servers take turns, so drift on the machine hits both. Reported: requests/s
over the measured wall time, p50 and p99 latency, and gateway/bare ratios.
The client runs on the same cores as the servers.

    .venv/bin/python bench/gateway.py [--requests 1000] [--warmup 100] [--concurrency 1 32]

Uses a fresh database ``parley_bench_gw`` (dropped and created) and the Redis database of ``BENCH_REDIS_URL``
(bench/stack.py), which it empties.
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.utils.errors import InvalidParamsError
from stack import REDIS_URL, ROOT, database_url, free_port, fresh_database, wait
from starlette.applications import Starlette
from starlette.types import ASGIApp

DATABASE = "parley_bench_gw"
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


def gateway_app() -> ASGIApp:
    """uvicorn factory: our gateway with :class:`EchoExecutor`; Django set up from the environment."""
    import django

    django.setup()
    from a2a_gateway.app import build_app

    return build_app(executor=EchoExecutor())


def bare_app() -> ASGIApp:
    """uvicorn factory: a2a-sdk alone — JSON-RPC routes, the default handler, the in-memory store."""
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
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()

    routes = create_jsonrpc_routes(handler, rpc_url="/a2a/{tenant}/{agent}", enable_v0_3_compat=True)
    return Starlette(routes=routes, lifespan=lifespan)


def serve(factory: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``factory`` (a function of this module) under uvicorn on 127.0.0.1:``port``."""
    command = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", "bench", f"gateway:{factory}"]
    return subprocess.Popen([*command, "--port", str(port), *UVICORN], cwd=ROOT, env=env)


def body(*, request_id: int) -> bytes:
    """A JSON-RPC 1.0 SendMessage opening a new task with a ``propose`` move (fresh message and offer ids)."""
    move = {
        "action": "propose",
        "message": "I can pay €800 a day.",
        "terms": {"amount": 800, "currency": "EUR"},
        "offerId": str(uuid.uuid4()),
    }
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": move}]}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per server and level")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured requests before each measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args()

    ports = {"gateway": free_port(), "bare": free_port()}
    env = {
        **os.environ,
        "DATABASE_URL": database_url(DATABASE),
        "REDIS_URL": REDIS_URL,
        "PUBLIC_BASE_URL": f"http://127.0.0.1:{ports['gateway']}",
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
    }
    fresh_database(env, DATABASE)
    import httpx
    import redis
    from django.conf import settings

    from a2a_gateway.auth import inbound_key_create
    from agents.models import Agent
    from parley.models import Tenant

    redis.Redis.from_url(REDIS_URL).flushdb()
    tenant = Tenant.objects.create(slug=TENANT, name="Bench")
    agent = Agent.objects.create(
        tenant=tenant,
        slug=AGENT,
        name="Echo",
        terms="amount (number, EUR per day), currency",
        inbound_auth=Agent.InboundAuth.API_KEY,
        **AGENT_CAPS,
    )
    _, key = inbound_key_create(agent=agent, name="bench client")
    common = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    targets = {
        "gateway": (f"http://127.0.0.1:{ports['gateway']}{PATH}", {**common, "X-API-Key": key}),
        "bare": (f"http://127.0.0.1:{ports['bare']}{PATH}", common),
    }

    print(machine())
    print(
        f"servers: uvicorn {' '.join(UVICORN[2:])} (uvloop, httptools), one process each; the client "
        f"(httpx, one process) shares the cores\n"
        f"gateway: build_app(executor=EchoExecutor()), agent inbound_auth=api_key (X-API-Key), "
        f"{', '.join(f'{k}={v}' for k, v in AGENT_CAPS.items())}; Postgres {DATABASE} "
        f"(CONN_MAX_AGE={settings.DATABASES['default']['CONN_MAX_AGE']}), Redis {REDIS_URL}\n"
        f"bare:    create_jsonrpc_routes + DefaultRequestHandler + InMemoryTaskStore, same EchoExecutor\n"
        f"load:    SendMessage (A2A-Version 1.0), a new task each; {args.warmup} warm-up + "
        f"{args.requests} measured requests per server and level"
    )
    processes = [serve(f"{name}_app", port, env) for name, port in ports.items()]
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
        print()
        print(f"{'server':<8} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for concurrency in args.concurrency:
            for name in targets:
                r = results[name, concurrency]
                print(
                    f"{name:<8} {concurrency:>7} {r.throughput:>9.1f} "
                    f"{r.percentile(50):>8.2f} {r.percentile(99):>8.2f}"
                )
        print()
        print(f"{'gateway/bare':<16} {'req/s':>9} {'p50':>8} {'p99':>8}")
        for concurrency in args.concurrency:
            g, b = results["gateway", concurrency], results["bare", concurrency]
            print(
                f"{concurrency:>2} client{'s' if concurrency > 1 else ' '}       "
                f"{g.throughput / b.throughput:>9.2f} {g.percentile(50) / b.percentile(50):>8.2f} "
                f"{g.percentile(99) / b.percentile(99):>8.2f}"
            )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)


if __name__ == "__main__":
    main()
