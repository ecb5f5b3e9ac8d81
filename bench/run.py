"""Benchmark: inbound negotiation turns through the public A2A endpoint, over real HTTP on loopback.

Each request opens a new Task on one seller agent with a JSON-RPC 1.0
``SendMessage`` carrying a propose move; the agent's offline negotiator
answers and the turn, the Negotiation and the A2A Task are written. Reports
latency percentiles, throughput and the process's peak RSS.

    .venv/bin/python bench/run.py [--requests 300] [--concurrency 8]

It runs on the embedded default (a fresh SQLite file) unless DATABASE_URL is
set, in which case that database must already be migrated.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid

from stack import ROOT, free_port

sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()

    if "DATABASE_URL" not in os.environ:
        os.environ["DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite3"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "parley.settings.base")
    import django

    django.setup()
    import httpx
    import uvicorn
    from django.conf import settings
    from django.core.management import call_command

    from agents.models import Agent
    from parley.models import Tenant

    port = free_port()
    settings.PUBLIC_BASE_URL = f"http://127.0.0.1:{port}"
    call_command("migrate", verbosity=0)
    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    Agent.objects.for_tenant(tenant).delete()
    Agent.objects.create(
        tenant=tenant,
        slug="seller",
        name="Seller",
        terms="amount (number, EUR per day), currency",
        term_guards=[{"term": "amount", "op": ">=", "value": 950}],
    )
    server = uvicorn.Server(
        uvicorn.Config("parley.asgi:application", host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)

    url = f"{settings.PUBLIC_BASE_URL}/a2a/bench/seller"

    async def one(http: httpx.AsyncClient) -> float:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "parts": [
                        {
                            "data": {
                                "action": "propose",
                                "message": "I can offer €800.",
                                "terms": {"amount": 800, "currency": "EUR"},
                                "offerId": str(uuid.uuid4()),
                            }
                        }
                    ],
                }
            },
        }
        started = time.perf_counter()
        response = await http.post(url, json=body, headers={"A2A-Version": "1.0"})
        elapsed = time.perf_counter() - started
        state = response.json()["result"]["task"]["status"]["state"]
        if state != "TASK_STATE_INPUT_REQUIRED":
            raise SystemExit(f"unexpected answer: {response.text[:300]}")
        return elapsed

    async def run() -> tuple[list[float], float]:
        latencies: list[float] = []
        queue = list(range(args.requests))
        async with httpx.AsyncClient(timeout=60) as http:
            await one(http)  # warm up: imports, first connection

            async def worker() -> None:
                while queue:
                    queue.pop()
                    latencies.append(await one(http))

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            return latencies, time.perf_counter() - started

    latencies, wall = asyncio.run(run())
    server.should_exit = True
    latencies.sort()
    ms = [x * 1000 for x in latencies]
    print(f"database      {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
    print(f"requests      {len(ms)} at concurrency {args.concurrency}")
    print(f"throughput    {len(ms) / wall:.1f} inbound turns/s")
    p95 = ms[int(len(ms) * 0.95) - 1]
    print(f"latency ms    p50 {statistics.median(ms):.1f}  p95 {p95:.1f}  max {ms[-1]:.1f}")
    print(f"peak RSS      {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
