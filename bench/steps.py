"""Benchmark: the agent loop's own overhead per step, with a model and a host tool that answer at once.

The model is a chat-completions server on loopback (``tests/chat_server.py``)
that answers every request at once: a call of the host tool ``lookup`` until
the conversation holds N-1 tool results, then a final text, so every run takes
exactly N steps. ``lookup`` is a host operation served on loopback that
answers ``{"result": "ok"}`` at once. What is left is the platform's own
cost of a step: the enqueue through Redis, a worker picking the task up, the
system message and the history built from Postgres, the model call over HTTP
(streamed), the host tool call over HTTP, and the step's transaction in
Postgres (with its live event).

For each worker configuration (Celery worker processes of one thread each,
against Postgres and Redis on this machine), after a warm-up it measures runs
taken one at a time (no queueing: the latency of a step alone), then R runs
started at once on separate intents (the throughput, and the latency of a step
under load, which includes its wait in the queue behind the other runs'
steps). A step's latency is the time between consecutive assistant messages
of its run (the first: from the run's creation); steps/s is all steps over the
wall time from the first ``run_start`` to the last run's end. Every run must
end ``done`` after exactly N steps, or the benchmark fails.

    .venv/bin/python bench/steps.py [--steps 10] [--runs 20] [--workers 1 4]

Uses a fresh database ``parley_bench`` (dropped and created) and the Redis database of
``BENCH_REDIS_URL`` (bench/stack.py), which it empties.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stack import DATABASE_URL, REDIS_URL, fresh_database, percentile, stop, wait, wait_for_workers

ALONE_RUNS = 3
FINAL_TEXT = "All looked up."


@dataclass(frozen=True)
class Measured:
    """Per-step latencies in seconds, the number of steps, and the wall time in seconds."""

    latencies: list[float]
    steps: int
    wall: float

    def line(self, label: str) -> str:
        median = statistics.median(self.latencies) * 1000
        p95 = percentile(self.latencies, 95) * 1000
        rate = self.steps / self.wall
        return f"  {label:<22} median {median:7.1f} ms   p95 {p95:7.1f} ms   {rate:6.1f} steps/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per run (N)")
    parser.add_argument("--runs", type=int, default=20, help="runs started at once (R)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4], help="worker processes")
    args = parser.parse_args()
    if args.steps < 1 or args.runs < 1 or min(args.workers) < 1:
        parser.error("--steps, --runs and --workers must be at least 1")

    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
        "PARLEY_HOST_OPERATIONS_ALLOW_HTTP": "true",  # the host tool is plain http on loopback
        "OUTBOUND_ALLOW_PRIVATE": "true",  # the model and the host tool are on loopback
    }
    fresh_database(env)
    import redis
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.chat_server import ChatServer, Reply, text, tool_calls
    from tests.loopback import LoopbackServer

    redis.Redis.from_url(REDIS_URL).flushdb()

    def responder(body: dict[str, Any]) -> Reply:
        """A lookup call until the thread holds N-1 tool results, then the final text."""
        results = sum(1 for m in body["messages"] if m["role"] == "tool")
        if results >= args.steps - 1:
            return text(FINAL_TEXT)
        return tool_calls((f"call_{results + 1}_{uuid.uuid4().hex[:8]}", "lookup", '{"key": "k"}'))

    async def lookup(request: Request) -> JSONResponse:
        return JSONResponse({"result": "ok"})

    host = LoopbackServer()
    host.listen(Starlette(routes=[Route("/lookup", lookup, methods=["POST"])]))
    with ChatServer(responder) as chat, host:
        agent = _create_agent(model_url=chat.url, tool_url=f"{host.origin}/lookup", steps=args.steps)
        _print_setup(args.steps)
        for workers in args.workers:
            _configuration(env, agent, workers=workers, steps=args.steps, runs=args.runs)


def _create_agent(*, model_url: str, tool_url: str, steps: int) -> Any:
    """The agent: model ``instant`` at ``model_url``, the host tool ``lookup`` at ``tool_url``."""
    from agents.models import Agent, ModelEndpoint, Tool
    from parley.models import Tenant

    tenant = Tenant.objects.create(slug="bench-steps", name="Bench steps")
    ModelEndpoint.objects.create(
        tenant=tenant, name="instant", base_url=model_url, upstream_model="instant", attempts=1
    )
    tool = Tool.objects.create(
        tenant=tenant,
        name="lookup",
        description="Look a key up.",
        parameters={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        kind=Tool.Kind.HOST,
        url=tool_url,
        secret="bench-secret",
    )
    agent = Agent.objects.create(
        tenant=tenant, slug="stepper", name="Stepper", model="instant", max_steps=steps + 5
    )
    agent.tools.add(tool)
    return agent


def _print_setup(steps: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("show server_version")
        postgres = cursor.fetchone()[0].split()[0]
    print(f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, Postgres {postgres}, Redis")
    print(f"runs of {steps} steps; worker processes of 1 thread; model and host tool on loopback, instant")
    print(
        "a step: enqueue via Redis, worker pickup, system message and history from Postgres,\n"
        "        model call over HTTP (streamed), host tool call over HTTP, the step's transaction"
    )


def _configuration(env: dict[str, str], agent: Any, *, workers: int, steps: int, runs: int) -> None:
    """Start ``workers`` worker processes, warm them up, measure, print, and stop them."""
    from parley import devstack

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{workers} worker process{'es' if workers > 1 else ''} (load average before: {load}):")
    processes = [
        devstack.start_worker(env, subprocess.DEVNULL, threads=1, name=f"steps{workers}-{i}@%h")
        for i in range(workers)
    ]
    try:
        wait_for_workers(workers)
        _measure(agent, steps, max(2, workers))  # warm-up: imports, first connections
        alone = [_measure(agent, steps, 1) for _ in range(ALONE_RUNS)]
        print(
            Measured(
                latencies=[x for m in alone for x in m.latencies],
                steps=sum(m.steps for m in alone),
                wall=sum(m.wall for m in alone),
            ).line("1 run at a time")
        )
        print(_measure(agent, steps, runs).line(f"{runs} runs at once"))
    finally:
        stop(processes)


def _measure(agent: Any, steps: int, count: int) -> Measured:
    """Start ``count`` runs of ``agent`` at once, each on an intent of its own; wait for all to end.

    Fails (SystemExit) unless every run ended ``done`` after exactly ``steps`` steps.
    """
    from django.utils import timezone

    from agents.models import Intent, Message, Run
    from agents.services import runs

    intents = [
        Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Look things up.")
        for _ in range(count)
    ]
    started = timezone.now()
    ids = [runs.run_start(agent=agent, intent=intent, task="Look up every key.").pk for intent in intents]
    pending = Run.objects.for_tenant(agent.tenant_id).filter(pk__in=ids).exclude(status__in=Run.ENDED)
    wait(lambda: not pending.exists(), timeout=60 + runs * steps)

    latencies: list[float] = []
    ended: list[datetime] = []
    for run in Run.objects.for_tenant(agent.tenant_id).filter(pk__in=ids):
        stamps = list(
            Message.objects.for_tenant(run.tenant_id)
            .filter(run=run, role=Message.Role.ASSISTANT)
            .order_by("step")
            .values_list("created_at", flat=True)
        )
        if run.status != Run.Status.DONE or run.step_count != steps or len(stamps) != steps:
            raise SystemExit(
                f"run {run.pk} ended {run.status} after {run.step_count} steps ({len(stamps)} model replies),"
                f" not done after {steps}: {run.end_reason or run.output!r}"
            )
        if run.output != FINAL_TEXT:
            raise SystemExit(f"run {run.pk} answered {run.output!r}, not {FINAL_TEXT!r}")
        previous = run.created_at
        for stamp in stamps:
            latencies.append((stamp - previous).total_seconds())
            previous = stamp
        ended.append(stamps[-1])
    return Measured(latencies=latencies, steps=count * steps, wall=(max(ended) - started).total_seconds())


if __name__ == "__main__":
    main()
