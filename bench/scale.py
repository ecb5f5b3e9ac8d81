"""Benchmark: scaling out on this machine, more web and worker processes against fewer.

1. **negotiate fan-out**: for each layout of 1 and 2 web processes by 1, 2 and 4 worker processes
   (``--threads`` threads each, started as the container image starts them, ``python -m
   parley.processes``), one run of a buyer negotiates with 50 Parley sellers at once
   (bench/negotiate.py's agents, every model ``offline``). The sellers' URLs are spread over the web
   processes' origins in turn (each process names its own origin in its cards), as a load
   balancer would spread their turns. A run with one
   counterparty warms each layout up first. Printed: wall time per layout, and its ratio to the
   layout of 1 web and 1 worker process.
2. **SendMessage**: the gateway of bench/gateway.py (``EchoExecutor``, Postgres task store, API key)
   in 1 and then 2 uvicorn processes, ``--clients`` clients split evenly over the processes.
   Printed: requests/s, p50 and p99, and the ratio of 2 processes to 1.

    .venv/bin/python bench/scale.py [--counterparties 50] [--threads 8] [--clients 32] [--requests 1000]

The machine's cores bound every figure: the client, Postgres, Redis and every Parley process share
them (the load average is printed). Uses a fresh database ``parley_bench`` and
the Redis database of ``BENCH_REDIS_URL`` (bench/stack.py), which it empties.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time

from gateway import PATH, Result, echo_agent, load, serve
from negotiate import agents, negotiate
from stack import DATABASE_URL, REDIS_URL, free_port, fresh_database, stop, wait, wait_for_workers

LAYOUTS = [(webs, workers) for webs in (1, 2) for workers in (1, 2, 4)]


def fan_out(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Part 1: one negotiate with ``args.counterparties`` sellers per layout."""
    import httpx
    import redis
    from django.conf import settings

    from agents.addresses import agent_url
    from parley import devstack

    buyer, sellers = agents(args.counterparties)
    print(
        f"negotiate with {args.counterparties} counterparties; "
        f"workers of {args.threads} threads; offline model"
    )
    print(f"{'web':>3} {'workers':>7} {'seconds':>8} {'agreed':>6} {'turns':>5} {'vs 1x1':>7}  loadavg")
    times: dict[tuple[int, int], float] = {}
    for webs, workers in LAYOUTS:
        redis.Redis.from_url(REDIS_URL).flushdb()
        ports = [free_port() for _ in range(webs)]
        origins = [f"http://127.0.0.1:{port}" for port in ports]
        layout_env = {**env, "PUBLIC_BASE_URL": origins[0]}
        # Each web process names its own origin in the cards it serves, as a counterparty reached it:
        # with one public URL, a load balancer in front would spread the turns the same way.
        processes = [
            devstack.start_web(port, {**env, "PUBLIC_BASE_URL": origin}, subprocess.DEVNULL)
            for port, origin in zip(ports, origins, strict=True)
        ]
        processes += [
            devstack.start_worker(layout_env, subprocess.DEVNULL, threads=args.threads, name=f"scale{i}@%h")
            for i in range(workers)
        ]
        try:
            for origin in origins:
                wait(lambda origin=origin: httpx.get(f"{origin}/login/", timeout=1).status_code == 200)
            wait_for_workers(workers)
            urls = [
                agent_url(seller).replace(settings.PUBLIC_BASE_URL, origins[i % webs], 1)
                for i, seller in enumerate(sellers)
            ]
            negotiate(buyer, urls[:1], f"warm-up {webs}x{workers}")
            elapsed, run, turns = negotiate(buyer, urls, f"{webs} web x {workers} workers")
        finally:
            stop(processes)
        times[webs, workers] = elapsed
        print(
            f"{webs:>3} {workers:>7} {elapsed:>8.2f} {run.output.count('— agreed'):>6} {turns:>5} "
            f"{elapsed / times[1, 1]:>6.2f}x  {os.getloadavg()[0]:.2f}  run {run.status}"
        )


def send_message(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Part 2: SendMessage through 1, then 2, gateway processes."""
    import httpx
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    key = echo_agent()
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json", "X-API-Key": key}
    print()
    print(f"SendMessage, {args.clients} clients split over the processes, {args.requests} measured requests")
    print(f"{'processes':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}  loadavg")
    results: dict[int, Result] = {}
    for count in (1, 2):
        ports = [free_port() for _ in range(count)]
        processes = [
            serve("gateway_app", port, {**env, "PUBLIC_BASE_URL": f"http://127.0.0.1:{port}"})
            for port in ports
        ]
        urls = [f"http://127.0.0.1:{port}{PATH}" for port in ports]
        try:
            for url in urls:
                wait(lambda url=url: httpx.get(url, timeout=1).status_code == 405)
            asyncio.run(spread(urls, headers, requests=100, clients=args.clients))
            results[count] = asyncio.run(spread(urls, headers, requests=args.requests, clients=args.clients))
        finally:
            stop(processes)
        r = results[count]
        print(
            f"{count:>9} {r.throughput:>8.1f} {r.percentile(50):>8.2f} {r.percentile(99):>8.2f}  "
            f"{os.getloadavg()[0]:.2f}"
        )
    one, two = results[1], results[2]
    print(
        f"2 / 1 processes: req/s {two.throughput / one.throughput:.2f}x, "
        f"p50 {two.percentile(50) / one.percentile(50):.2f}x, "
        f"p99 {two.percentile(99) / one.percentile(99):.2f}x"
    )


async def spread(urls: list[str], headers: dict[str, str], *, requests: int, clients: int) -> Result:
    """``requests`` SendMessages from ``clients`` clients, split evenly over ``urls``, at once."""
    started = time.perf_counter()
    parts = await asyncio.gather(
        *(
            load(url, headers, requests=requests // len(urls), concurrency=clients // len(urls))
            for url in urls
        )
    )
    latencies = [latency for part in parts for latency in part.latencies]
    return Result(len(latencies), time.perf_counter() - started, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counterparties", type=int, default=50)
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--clients", type=int, default=32, help="SendMessage clients in all")
    parser.add_argument("--requests", type=int, default=1000, help="measured SendMessages per layout")
    parser.add_argument("--part", choices=["fan-out", "send-message", "both"], default="both")
    args = parser.parse_args()
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
        "OUTBOUND_ALLOW_PRIVATE": "true",  # the counterparties are this stack's own agents, on loopback
    }
    fresh_database(env, DATABASE_URL.rsplit("/", 1)[1])
    print(f"cores {os.cpu_count()}; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.part in ("fan-out", "both"):
        fan_out(args, env)
    if args.part in ("send-message", "both"):
        send_message(args, env)


if __name__ == "__main__":
    main()
