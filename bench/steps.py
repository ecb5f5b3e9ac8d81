"""Benchmark: the agent loop's own overhead per step, beside LangGraph with its Postgres checkpointer.

The model is a chat-completions server on loopback (``tests/chat_server.py``)
that answers every request at once: a call of the host tool ``lookup`` until
the conversation holds K-1 tool results, then a final text, so every run takes
exactly K steps (K model calls, K-1 tool calls). ``lookup`` is served on
loopback and answers ``{"result": "ok"}`` at once. What is left is each
platform's own cost of a step.

Parley: a run started with ``runs.run_start`` and taken by one Celery worker
process of one thread, against Postgres and Redis on this machine. A step: the
enqueue through Redis, the worker picking it up, the system message and history
from Postgres, the model call over HTTP (streamed), the host tool call over
HTTP (signed), and the step's transaction in Postgres (with its live event).

The peer: LangGraph (``StateGraph`` of an agent node and a ``ToolNode``)
compiled with its Postgres checkpointer (``PostgresSaver``) on a database of its
own on the same Postgres server, invoked with ``durability="sync"`` (every
super-step's checkpoint written before the next starts), in this process. Its
agent node sends the same chat-completions request (streamed, with the tool's
schema) over one kept-alive ``httpx.Client``; its tool calls the same loopback
host tool over HTTP.

Pairs, one run at a time: a Parley run and a LangGraph run, in alternating
order (ABBA), after a warm-up of each. A run's ms/step is its wall time over K
(Parley: from just before ``run_start`` to the run's end as written in its
row; LangGraph: ``invoke``). Printed: the median ms/step of each, the median of
the pairs' ratios (Parley ÷ LangGraph, the figure), and per step of each: the
commits on its database (``pg_stat_database.xact_commit``, read after the
statistics are flushed; the benchmark's own wait for a run's end reads in a
transaction it rolls back, so it adds none) and the WAL it wrote (its records
in ``pg_walinspect`` over the pairs, a record without a relation counted for the
database its transaction wrote to), beside the WAL of the whole server over the
pairs (``pg_current_wal_lsn()`` difference, everything else running included).

Then, for each worker configuration (Celery worker processes of one thread
each), R Parley runs started at once on separate intents: the throughput, and
the latency of a step under load (between consecutive assistant messages of a
run, including the wait in the queue behind the other runs' steps). Every run
must end ``done`` after exactly K steps, or the benchmark fails.

    .venv/bin/python bench/steps.py [--steps 10] [--pairs 10] [--runs 20] [--workers 1 4] [--smoke]
        [--database parley_bench_steps] [--peer-database langgraph_bench_steps]

Drops and creates both databases on ``BENCH_POSTGRES_URL``'s server, and empties the Redis database
of ``BENCH_REDIS_URL`` (bench/stack.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stack import REDIS_URL, database_url, fresh_database, percentile, stop, wait, wait_for_workers

FINAL_TEXT = "All looked up."
WARM_UP_RUNS = 2
# Postgres (15+) flushes an idle backend's statistics at most this long after its last transaction.
STATS_FLUSH_SECONDS = 11.0
SYSTEM_PROMPT = "You look keys up with the lookup tool, one at a time, until you are told you are done."
TASK = "Look up every key."
LOOKUP_PARAMETERS = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


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


@dataclass(frozen=True)
class Counters:
    """Commits by database name, and the server's WAL position (``pg_current_wal_lsn()``)."""

    commits: dict[str, int]
    lsn: str


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per run (K)")
    parser.add_argument("--pairs", type=int, default=10, help="Parley/LangGraph pairs, one run at a time")
    parser.add_argument("--runs", type=int, default=20, help="Parley runs started at once (R)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4], help="worker processes, for R")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: 3 steps, 2 pairs, 2 runs, 1 worker")
    parser.add_argument("--database", default="parley_bench_steps", help="Parley's database (dropped)")
    parser.add_argument("--peer-database", default="langgraph_bench_steps", help="LangGraph's (dropped)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.pairs, args.runs, args.workers = 3, 2, 2, [1]
    if args.steps < 2 or args.pairs < 1 or args.runs < 1 or min(args.workers) < 1:
        parser.error("--steps must be at least 2, and --pairs, --runs and --workers at least 1")

    env = {
        **os.environ,
        "DATABASE_URL": database_url(args.database),
        "REDIS_URL": REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
        "PARLEY_HOST_OPERATIONS_ALLOW_HTTP": "true",  # the host tool is plain http on loopback
        "OUTBOUND_ALLOW_PRIVATE": "true",  # the model and the host tool are on loopback
    }
    fresh_database(env, args.database)
    for sql in (f"drop database if exists {args.peer_database}", f"create database {args.peer_database}"):
        subprocess.run(["psql", database_url("postgres"), "-qc", sql], check=True)
    subprocess.run(["psql", env["DATABASE_URL"], "-qc", "create extension pg_walinspect"], check=True)
    import redis
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.chat_server import ChatServer, Reply, text, tool_calls
    from tests.loopback import LoopbackServer

    redis.Redis.from_url(REDIS_URL).flushdb()

    def responder(body: dict[str, Any]) -> Reply:
        """A lookup call until the thread holds K-1 tool results, then the final text."""
        results = sum(1 for m in body["messages"] if m["role"] == "tool")
        if results >= args.steps - 1:
            return text(FINAL_TEXT)
        return tool_calls((f"call_{results + 1}_{uuid.uuid4().hex[:8]}", "lookup", '{"key": "k"}'))

    async def lookup(request: Request) -> JSONResponse:
        return JSONResponse({"result": "ok"})

    host = LoopbackServer()
    host.listen(Starlette(routes=[Route("/lookup", lookup, methods=["POST"])]))
    with ChatServer(responder) as chat, host:
        tool_url = f"{host.origin}/lookup"
        agent = _create_agent(model_url=chat.url, tool_url=tool_url, steps=args.steps)
        _print_setup(args.steps)
        with PeerStack(database_url(args.peer_database), model_url=chat.url, tool_url=tool_url) as peer:
            _pairs(
                env,
                agent,
                peer,
                steps=args.steps,
                pairs=args.pairs,
                databases=(args.database, args.peer_database),
            )
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
        parameters=LOOKUP_PARAMETERS,
        kind=Tool.Kind.HOST,
        url=tool_url,
        secret="bench-secret",
    )
    agent = Agent.objects.create(
        tenant=tenant,
        slug="stepper",
        name="Stepper",
        model="instant",
        max_steps=steps + 5,
        system_prompt=SYSTEM_PROMPT,
    )
    agent.tools.add(tool)
    return agent


def _print_setup(steps: int) -> None:
    import langgraph
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("show server_version")
        postgres = cursor.fetchone()[0].split()[0]
    lg = getattr(langgraph, "__version__", None) or _version("langgraph")
    print(
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, Postgres {postgres}, Redis, LangGraph {lg}"
    )
    print(f"runs of {steps} steps; model and host tool on loopback, instant")
    print(
        "a Parley step: enqueue via Redis, worker pickup, system message and history from Postgres,\n"
        "               model call over HTTP (streamed), host tool call over HTTP, the step's transaction"
    )


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


# -- the peer ---------------------------------------------------------------------------------------------


@dataclass
class Peer:
    """The compiled LangGraph graph; ``run()`` takes one run of K steps and returns its wall time (s)."""

    graph: Any
    steps: int = 0

    def run(self, steps: int) -> float:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        inputs = {"messages": [SystemMessage(SYSTEM_PROMPT), HumanMessage(TASK)]}
        started = time.perf_counter()
        state = self.graph.invoke(inputs, config, durability="sync")
        wall = time.perf_counter() - started
        replies = [m for m in state["messages"] if isinstance(m, AIMessage)]
        if len(replies) != steps or replies[-1].content != FINAL_TEXT:
            raise SystemExit(f"LangGraph answered {replies[-1].content!r} after {len(replies)} model replies")
        return wall


class PeerStack:
    """A context manager: the LangGraph :class:`Peer` on the database at ``url``, with its tables set up."""

    def __init__(self, url: str, *, model_url: str, tool_url: str) -> None:
        self.url, self.model_url, self.tool_url = url, model_url, tool_url

    def __enter__(self) -> Peer:
        import httpx
        from langgraph.checkpoint.postgres import PostgresSaver

        self.http = httpx.Client(timeout=30)
        self.saver_context = PostgresSaver.from_conn_string(self.url)
        saver = self.saver_context.__enter__()
        saver.setup()
        return Peer(graph=_peer_graph(saver, self.http, model_url=self.model_url, tool_url=self.tool_url))

    def __exit__(self, *exc: object) -> None:
        self.saver_context.__exit__(*exc)
        self.http.close()


def _peer_graph(saver: Any, http: Any, *, model_url: str, tool_url: str) -> Any:
    """An agent node (the chat-completions call) and a ``ToolNode`` of ``lookup``, looping until the model
    answers without a tool call, compiled with ``saver``."""
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    spec = {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a key up.", "parameters": LOOKUP_PARAMETERS},
    }

    def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
        body = {
            "model": "instant",
            "messages": convert_to_openai_messages(state["messages"]),
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [spec],
        }
        content, calls = _streamed(http, f"{model_url}/chat/completions", body)
        return {"messages": [AIMessage(content=content, tool_calls=calls)]}

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        response = http.post(tool_url, json={"tool": "lookup", "arguments": {"key": key}})
        response.raise_for_status()
        return response.text

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def _streamed(http: Any, url: str, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A streamed chat completion read to its end: its text, and its tool calls as LangChain's dicts."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    with http.stream("POST", url, json=body, headers={"Accept": "text/event-stream"}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            payload = line.removeprefix("data:").strip()
            if payload == "[DONE]":
                break
            for choice in json.loads(payload).get("choices") or []:
                delta = choice.get("delta") or {}
                content.append(delta.get("content") or "")
                for part in delta.get("tool_calls") or []:
                    call = calls.setdefault(part["index"], {"id": "", "name": "", "arguments": ""})
                    call["id"] = part.get("id") or call["id"]
                    function = part.get("function") or {}
                    call["name"] = function.get("name") or call["name"]
                    call["arguments"] += function.get("arguments") or ""
    return "".join(content), [
        {"id": c["id"], "name": c["name"], "args": json.loads(c["arguments"] or "{}"), "type": "tool_call"}
        for _, c in sorted(calls.items())
    ]


# -- pairs ------------------------------------------------------------------------------------------------


def _pairs(
    env: dict[str, str], agent: Any, peer: Peer, *, steps: int, pairs: int, databases: tuple[str, str]
) -> None:
    """Alternate a Parley run and a LangGraph run, one at a time, with one worker; print the figures."""
    from agents.models import Intent
    from parley import devstack

    print(f"pairs, one run at a time, 1 worker process of 1 thread (load average before: {_load()}):")
    process = devstack.start_worker(env, subprocess.DEVNULL, threads=1, name="steps-pairs@%h")
    try:
        wait_for_workers(1)
        intents = [
            Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Look things up.")
            for _ in range(WARM_UP_RUNS + pairs)
        ]
        with _RunWatch(env["DATABASE_URL"]) as watch:
            for intent in intents[:WARM_UP_RUNS]:
                _parley_run(agent, intent, steps, watch)
                peer.run(steps)
            time.sleep(STATS_FLUSH_SECONDS)
            before = _counters(databases)
            ours: list[float] = []
            theirs: list[float] = []
            for n, intent in enumerate(intents[WARM_UP_RUNS:]):
                if n % 2:
                    theirs.append(peer.run(steps))
                ours.append(_parley_run(agent, intent, steps, watch))
                if not n % 2:
                    theirs.append(peer.run(steps))
            time.sleep(STATS_FLUSH_SECONDS)
            after = _counters(databases)
    finally:
        stop([process])
    wal = _wal_by_database(env["DATABASE_URL"], before.lsn, after.lsn, databases)
    total = pairs * steps
    ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
    for label, walls, database in (("Parley", ours, databases[0]), ("LangGraph", theirs, databases[1])):
        per_step = [w / steps * 1000 for w in walls]
        commits = (after.commits[database] - before.commits[database]) / total
        kb = f"{wal[database] / total / 1024:6.1f} KB" if database in wal else "   n/a"
        print(
            f"  {label:<10} median {statistics.median(per_step):6.1f} ms/step"
            f" (min {min(per_step):6.1f}, max {max(per_step):6.1f})"
            f"   {commits:5.1f} commits/step   WAL {kb}/step"
        )
    server_wal = _lsn_diff(before.lsn, after.lsn) / total / 1024
    print(
        f"  Parley ÷ LangGraph: median of {pairs} pairs {statistics.median(ratios):.2f}x"
        f" (min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
    )
    print(
        f"  the server's WAL over the pairs, all databases and everyone else's work: {server_wal:.1f} KB/step"
    )
    print(f"  (load average after: {_load()})")


def _parley_run(agent: Any, intent: Any, steps: int, watch: _RunWatch) -> float:
    """Start a run of ``agent`` on ``intent`` and wait for its end; its wall time in seconds.

    Fails (SystemExit) unless it ended ``done`` after exactly ``steps`` steps with the final text.
    """
    from django.utils import timezone

    from agents.services import runs

    started = timezone.now()
    run = runs.run_start(agent=agent, intent=intent, task=TASK)
    status, step_count, output, ended = watch.end(run.pk, timeout=60 + steps)
    if status != "done" or step_count != steps or output != FINAL_TEXT:
        raise SystemExit(f"run {run.pk} ended {status} after {step_count} steps: {output!r}")
    return (ended - started).total_seconds()


class _RunWatch:
    """Waits for runs to end by reading their rows in one READ COMMITTED transaction it rolls back
    at the end, so waiting adds no commit to the database's count."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> _RunWatch:
        import psycopg

        self.connection = psycopg.connect(self.url)
        return self

    def __exit__(self, *exc: object) -> None:
        self.connection.rollback()
        self.connection.close()

    def end(self, run_id: Any, *, timeout: float) -> tuple[str, int, str, datetime]:
        """The ended run's status, step count, output and last write (``updated_at``)."""
        found: list[Any] = []

        def ended() -> bool:
            row = self.connection.execute(
                "select status, step_count, output, updated_at from agents_run where id = %s", [run_id]
            ).fetchone()
            found[:] = row or ()
            return row is not None and row[0] in ("done", "failed", "cancelled", "max_steps")

        wait(ended, timeout=timeout)
        return found[0], found[1], found[2], found[3]


def _counters(databases: tuple[str, ...]) -> Counters:
    """Commits of ``databases`` and the WAL position, read from the ``postgres`` database (so the reading
    commits nothing in theirs)."""
    import psycopg

    with psycopg.connect(database_url("postgres"), autocommit=True) as connection:
        rows = connection.execute(
            "select datname, xact_commit from pg_stat_database where datname = any(%s)", [list(databases)]
        ).fetchall()
        (lsn,) = connection.execute("select pg_current_wal_lsn()::text").fetchone()
    return Counters(commits=dict(rows), lsn=lsn)


def _wal_by_database(url: str, start: str, end: str, databases: tuple[str, ...]) -> dict[str, int]:
    """Bytes of WAL written between ``start`` and ``end`` for each of ``databases`` (``pg_walinspect``):
    records naming a relation of the database, and the other records (commits) of transactions that wrote
    such records. Empty when the WAL is no longer there to read."""
    import psycopg

    query = """
        with records as (
            select nullif(xid::text, '0') as xid, record_length,
                   substring(block_ref from 'rel [0-9]+/([0-9]+)/')::oid as db
            from pg_get_wal_records_info(%(start)s, %(end)s)
        ), writers as (
            select distinct xid, db from records where db is not null and db <> 0 and xid is not null
        )
        select d.datname, sum(r.record_length)::bigint
        from records r
        left join writers w on r.db is null and w.xid = r.xid
        join pg_database d on d.oid = coalesce(r.db, w.db)
        where d.datname = any(%(databases)s)
        group by d.datname
    """
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            rows = connection.execute(query, {"start": start, "end": end, "databases": list(databases)})
            return dict(rows.fetchall())
    except psycopg.Error as exc:
        print(f"  (WAL by database not read: {exc})")
        return {}


def _lsn_diff(start: str, end: str) -> int:
    def position(lsn: str) -> int:
        high, low = lsn.split("/")
        return (int(high, 16) << 32) + int(low, 16)

    return position(end) - position(start)


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


# -- Parley under load ------------------------------------------------------------------------------------


def _configuration(env: dict[str, str], agent: Any, *, workers: int, steps: int, runs: int) -> None:
    """Start ``workers`` worker processes, warm them up, measure R runs at once, print, and stop them."""
    from parley import devstack

    print(
        f"Parley alone, {workers} worker process{'es' if workers > 1 else ''} of 1 thread (load: {_load()}):"
    )
    processes = [
        devstack.start_worker(env, subprocess.DEVNULL, threads=1, name=f"steps{workers}-{i}@%h")
        for i in range(workers)
    ]
    try:
        wait_for_workers(workers)
        _measure(agent, steps, max(2, workers))  # warm-up: imports, first connections
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
    ids = [runs.run_start(agent=agent, intent=intent, task=TASK).pk for intent in intents]
    pending = Run.objects.for_tenant(agent.tenant_id).filter(pk__in=ids).exclude(status__in=Run.ENDED)
    wait(lambda: not pending.exists(), timeout=60 + count * steps)

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
