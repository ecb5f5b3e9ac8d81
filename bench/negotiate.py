"""Benchmark: one ``negotiate`` call with 1, 10 and 50 counterparties, on the production shape.

A uvicorn web process and two Celery worker processes run against Postgres
and Redis on this machine; every counterparty is a Parley agent reached over
HTTP A2A on loopback; every model is ``offline``. For each size, one run of a
buyer agent negotiates with all counterparties at once; the wall time is from
``run_start`` to the run being done.

    .venv/bin/python bench/negotiate.py [--sizes 1 10 50] [--threads 8] [--rounds 1]

Prints each run's wall time, turns, the CPU seconds the web and worker processes spent on it and the
load average, then the ratio of each size's median time to the median time of one counterparty.

Uses a fresh database ``parley_bench`` (dropped and created) and the Redis database of
``BENCH_REDIS_URL`` (bench/stack.py), which it empties.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from typing import Any
from urllib.parse import urlsplit

from stack import DATABASE_URL, REDIS_URL, free_port, fresh_database, wait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--rounds", type=int, default=1, help="times each size runs, alternating sizes")
    args = parser.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "PUBLIC_BASE_URL": base,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
        "OUTBOUND_ALLOW_PRIVATE": "true",  # the counterparties are this stack's own agents, on loopback
    }
    fresh_database(env, urlsplit(DATABASE_URL).path.lstrip("/"))
    import httpx
    import redis

    from agents.addresses import agent_url
    from parley import devstack

    redis.Redis.from_url(REDIS_URL).flushdb()
    buyer, sellers = agents(max(args.sizes))
    processes = [
        devstack.start_web(port, env, None),
        *(
            devstack.start_worker(env, subprocess.DEVNULL, threads=args.threads, name=f"bench{i}@%h")
            for i in range(2)
        ),
    ]
    try:
        wait(lambda: httpx.get(f"{base}/login/", timeout=1).status_code == 200)
        time.sleep(2)  # the workers connect to the broker
        print(f"web 1 process, workers 2 x {args.threads} threads, Postgres, Redis, offline model")
        results: dict[int, list[float]] = {size: [] for size in args.sizes}
        for round_ in range(args.rounds):
            for size in args.sizes:
                urls = [agent_url(s) for s in sellers[:size]]
                cpu = [_cpu_seconds(p.pid) for p in processes]
                elapsed, run, turns = negotiate(buyer, urls, f"Bench with {size}, round {round_}")
                web, *workers = (
                    _cpu_seconds(p.pid) - before for p, before in zip(processes, cpu, strict=True)
                )
                settled = run.output.count("— agreed")
                results[size].append(elapsed)
                print(
                    f"{size:>3} counterparties  {elapsed:7.2f} s  run {run.status}, {settled} agreed, "
                    f"{turns} turns; cpu s: web {web:.1f}, workers {sum(workers):.1f}; "
                    f"loadavg {os.getloadavg()[0]:.2f}"
                )
        medians = {size: statistics.median(times) for size, times in results.items()}
        for size, median in medians.items():
            if size != 1 and 1 in medians:
                print(f"ratio {size}/1 {median / medians[1]:11.1f}   (medians of {args.rounds})")
        print("loadavg", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)


def agents(count: int) -> tuple[Any, list[Any]]:
    """A buyer (ceiling 1,100 EUR a day) and ``count`` sellers (floor 950), in tenants of their own
    made anew; Django must be set up."""
    from agents.models import Agent
    from parley.models import Tenant

    Tenant.objects.filter(slug__in=["bench-buyer", "bench-sellers"]).delete()
    buyer_tenant = Tenant.objects.create(slug="bench-buyer", name="Buyer")
    sellers_tenant = Tenant.objects.create(slug="bench-sellers", name="Sellers")
    terms = "amount (number, EUR per day), currency"
    buyer = Agent.objects.create(
        tenant=buyer_tenant,
        slug="buyer",
        name="Buyer",
        terms=terms,
        term_guards=[{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}],
    )
    sellers = [
        Agent.objects.create(
            tenant=sellers_tenant,
            slug=f"seller-{i}",
            name=f"Seller {i}",
            terms=terms,
            term_guards=[{"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}],
        )
        for i in range(count)
    ]
    return buyer, sellers


def negotiate(buyer: Any, urls: list[str], statement: str) -> tuple[float, Any, int]:
    """One run of ``buyer`` told to negotiate with the agents at ``urls``, under a new intent:
    (seconds from ``run_start`` to the run no longer active, the run, the intent's turns)."""
    from agents.models import Intent, Run
    from agents.services import runs
    from negotiations.models import Turn

    intent = Intent.objects.create(tenant=buyer.tenant, agent=buyer, statement=statement)
    started = time.perf_counter()
    run = runs.run_start(agent=buyer, intent=intent, task=f"Negotiate with {' '.join(urls)}")
    wait(
        lambda: Run.objects.for_tenant(buyer.tenant).get(pk=run.pk).status not in Run.ACTIVE,
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    run.refresh_from_db()
    turns = Turn.objects.for_tenant(buyer.tenant).filter(negotiation__intent=intent).count()
    return elapsed, run, turns


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process ``pid`` has used (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
