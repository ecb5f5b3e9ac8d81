"""Benchmark: concurrent inbound turns on one web process, against a model that takes 1 s to answer.

The production shape on this machine: one uvicorn web process (``parley.asgi``)
on loopback, Postgres for the data, Redis for the caps' counters; no worker (an
inbound turn runs in the web process). The model is a chat-completions server
on loopback (``tests.chat_server``, in this process) that answers every request
after ``--model-seconds`` (1 s); it counts the requests in flight at once.

Two cases, each a JSON-RPC 1.0 ``SendMessage`` opening a new task (a
different counterparty or visitor each), sent 1 at a time and 20 at once:

* **visitor** — a visitor's plain-text question to the representative face of
  an agent with two grounding documents (``representative.answers``). The
  model answers text. Every answer is checked to be a COMPLETED task whose
  reply is exactly the model's text (not the try-again text, not the offline
  fallback the face gives when the model fails).
* **move** — a ``propose`` data part (€800 a day) to an agent with terms,
  decided by the agent's model (``negotiations.negotiator``): the model answers
  the one tool it is offered (the one whose parameters have an ``action``
  enum) with a ``counter`` (or ``propose``) at €1,000 a day. Every answer is
  checked to be an INPUT_REQUIRED task whose reply is that move.

Every request must have made exactly one model call. Both agents are on the
default ``max_concurrency`` and ``turn_timeout``; only the per-caller
``rate_limit`` and ``max_contexts`` are lifted (every request comes from the one
anonymous caller on 127.0.0.1). For each case and level: one unmeasured warm-up
round, then ``--rounds`` measured rounds. Reported per level: the median wall
time of a round (first request sent to last answer), p50 and p99 latency over
every request of the rounds (nearest rank), the most model calls the server
saw in flight at once, the median seconds from a round's first model call to
its last ("began": the gateway's work before the model, for all the requests),
the ideal (one model call) and the wall time over it. The client and the model
server (one Python process) run on the same cores as the web process and
Postgres, so the machine's load average is printed before and after.

With ``--profile PREFIX``, py-spy (``pip install py-spy``) samples the web
process's threads holding the GIL during every measured level of more than one
request at once, writing ``PREFIX-<case>-<level>.raw`` (collapsed stacks, one
line per stack and thread: where the process's CPU went).

    .venv/bin/python bench/inbound.py [--rounds 5] [--concurrency 1 20] [--cases visitor move]
        [--database-url postgres://postgres@127.0.0.1:5432/parley_bench_in]
        [--redis-url $BENCH_REDIS_URL] [--profile /tmp/inbound]

The database is dropped and created; the Redis database is emptied before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway import body, machine
from stack import REDIS_URL, ROOT, database_url, free_port, fresh_database, percentile, stop, wait

sys.path.insert(0, str(ROOT))

from tests.chat_server import ChatServer, Reply, text, tool_calls

DATABASE_URL = database_url("parley_bench_in")
TENANT, VISITED, SELLER = "bench", "studio", "seller"
# Lifted so that the load is served, not refused: every request comes from the one anonymous caller.
AGENT_CAPS = {"rate_limit": 1_000_000, "max_contexts": 1_000_000}
QUESTION = "When are you open?"
ANSWER = "We are open Monday to Friday, 9:00 to 17:00."
COUNTER_TERMS = {"amount": 1000, "currency": "EUR"}
COUNTER_MESSAGE = "I can do €1,000 a day."
Check = Callable[[Any], str | None]
"""Given an answer (an ``httpx.Response``): what is wrong with it, or None."""
DOCUMENTS = {
    "Opening hours": "We are open Monday to Friday, 9:00 to 17:00. On public holidays the studio is closed.",
    "Services and prices": "A logo costs 1,200 EUR; a full brand identity costs 4,500 EUR.",
}


class SlowModel:
    """The loopback model's policy: answer after ``seconds``, counting the calls in flight.

    A request offering a tool whose parameters have an ``action`` enum is a negotiation
    decision, answered with that tool: ``counter`` (``propose`` if the enum lacks it) at
    :data:`COUNTER_TERMS`. Any other request is a visitor's question, answered :data:`ANSWER`.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.server = ChatServer(self.answer)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.arrivals: list[float] = []  # perf_counter() of each call's arrival

    def answer(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.arrivals.append(time.perf_counter())
        try:
            # The server's own thread for this request; the server's closing cuts the wait short.
            self.server.closing.wait(self.seconds)
        finally:
            with self._lock:
                self.in_flight -= 1
        decision = _decision_tool(request)
        if decision is None:
            return text(ANSWER)
        name, actions = decision
        action = "counter" if "counter" in actions else "propose"
        arguments = {"action": action, "message": COUNTER_MESSAGE, "terms": COUNTER_TERMS}
        return tool_calls((f"call-{uuid.uuid4().hex[:8]}", name, json.dumps(arguments)))

    def round_end(self, requests: int) -> tuple[int, float]:
        """Since the last call (between rounds, when none is in flight): the most calls in flight
        at once, and the seconds from the first call's arrival to the last's. Exits unless the
        round's ``requests`` made one call each (a reply handed back to the model makes two)."""
        with self._lock:
            peak, self.peak = self.peak, self.in_flight
            arrivals, self.arrivals = self.arrivals, []
        if len(arrivals) != requests:
            raise SystemExit(f"{requests} requests made {len(arrivals)} model calls, not one each")
        return peak, max(arrivals) - min(arrivals)


def _decision_tool(request: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The name and the actions of the offered tool whose parameters have an ``action`` enum."""
    for tool in request.get("tools") or []:
        function = tool.get("function", {})
        action = function.get("parameters", {}).get("properties", {}).get("action", {})
        if isinstance(action.get("enum"), list):
            return function["name"], action["enum"]
    return None


@dataclass(frozen=True)
class Round:
    """One round: ``wall`` seconds from the first request sent to the last answer, and each
    request's latency in seconds."""

    wall: float
    latencies: list[float]


async def burst(url: str, headers: dict[str, str], bodies: list[bytes], check: Check) -> Round:
    """POST every one of ``bodies`` at once, each on a connection of its own; exits at the first
    answer ``check`` finds wrong."""
    import httpx

    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as http:

        async def one(content: bytes) -> float:
            started = time.perf_counter()
            response = await http.post(url, content=content)
            latency = time.perf_counter() - started
            if (wrong := check(response)) is not None:
                said = f"{response.status_code} {response.text[:300]}"
                raise SystemExit(f"unexpected answer from {url} ({wrong}): {said}")
            return latency

        started = time.perf_counter()
        latencies = await asyncio.gather(*(one(b) for b in bodies))
        return Round(time.perf_counter() - started, list(latencies))


def question_body(*, request_id: int) -> bytes:
    """A JSON-RPC 1.0 SendMessage opening a new task with a visitor's text question."""
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": QUESTION}]}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": {"message": message}}
    ).encode()


def _task(response: Any) -> dict[str, Any] | None:
    try:
        task = response.json()["result"]["task"]
    except (KeyError, TypeError, ValueError):
        return None
    return task if isinstance(task, dict) else None


def visitor_check(response: Any) -> str | None:
    """A COMPLETED task whose reply (its last history entry) is exactly the model's answer."""
    task = _task(response)
    if task is None:
        return "not a task"
    state = task["status"]["state"]
    try:
        said = task["history"][-1]["parts"][0]["text"]
    except (KeyError, IndexError):
        said = None
    if state != "TASK_STATE_COMPLETED" or said != ANSWER:
        return f"the task is {state}, answered {said!r}, not the model's answer"
    return None


def move_check(response: Any) -> str | None:
    """An INPUT_REQUIRED task whose reply is the model's move at :data:`COUNTER_TERMS`."""
    task = _task(response)
    if task is None:
        return "not a task"
    state = task["status"]["state"]
    try:
        move = task["history"][-1]["parts"][0]["data"]
        decided = (move["action"], move["terms"])
    except (KeyError, IndexError, TypeError):
        decided = None
    if state != "TASK_STATE_INPUT_REQUIRED" or decided not in (
        ("counter", COUNTER_TERMS),
        ("propose", COUNTER_TERMS),
    ):
        return f"the task is {state}, replied {task['history'][-1]['parts']!r}, not the model's move"
    return None


def profiler(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid``'s threads while they hold the GIL, into ``out`` (raw collapsed stacks)
    once stopped by :func:`stop_profiler`."""
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    command = [spy, "record", "--pid", str(pid), "--format", "raw", "--output", out, "--threads", "--gil"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the first request
    return process


def stop_profiler(process: subprocess.Popen[bytes]) -> None:
    """Stop py-spy as Ctrl-C does, so that it writes its samples."""
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per case and level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--cases", nargs="+", choices=["visitor", "move"], default=["visitor", "move"])
    parser.add_argument("--model-seconds", type=float, default=1.0, help="how long the model takes")
    parser.add_argument("--database-url", default=DATABASE_URL, help="a Postgres database to drop and create")
    parser.add_argument("--redis-url", default=REDIS_URL, help="a Redis database to empty")
    parser.add_argument(
        "--profile", metavar="PREFIX", help="py-spy the web process into PREFIX-<case>-<level>.raw"
    )
    args = parser.parse_args()
    if args.rounds < 1 or min(args.concurrency) < 1 or args.model_seconds < 0:
        parser.error("--rounds and --concurrency must be at least 1, --model-seconds at least 0")

    database_url, redis_url = args.database_url, args.redis_url
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "PUBLIC_BASE_URL": base,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "LOG_LEVEL": "ERROR",
        "OUTBOUND_ALLOW_PRIVATE": "true",  # the model server is on loopback
    }
    fresh_database(env, urlsplit(database_url).path.lstrip("/"))
    import httpx
    import redis
    from django.conf import settings

    from agents.addresses import agent_url
    from agents.models import Agent, ModelEndpoint
    from parley import devstack
    from parley.models import Tenant
    from representative.documents import grounding_document_create

    model = SlowModel(args.model_seconds)
    redis.Redis.from_url(redis_url).flushdb()
    tenant = Tenant.objects.create(slug=TENANT, name="Bench", model_budget=None)
    ModelEndpoint.objects.create(
        tenant=tenant, name="slow-model", base_url=model.server.url, upstream_model="slow-1", attempts=1
    )
    visited = Agent.objects.create(
        tenant=tenant, slug=VISITED, name="Studio", model="slow-model", **AGENT_CAPS
    )
    for title, words in DOCUMENTS.items():
        grounding_document_create(agent=visited, title=title, text=words)
    seller = Agent.objects.create(
        tenant=tenant,
        slug=SELLER,
        name="Seller",
        model="slow-model",
        terms="amount (number, EUR per day), currency",
        term_guards=[{"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}],
        **AGENT_CAPS,
    )
    cases: dict[str, tuple[str, Any, Check]] = {
        "visitor": (agent_url(visited), question_body, visitor_check),
        "move": (agent_url(seller), body, move_check),
    }
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}

    print(machine())
    print(
        f"server:  parley.asgi under uvicorn, one process (devstack.start_web); Postgres "
        f"(CONN_MAX_AGE={settings.DATABASES['default']['CONN_MAX_AGE']}), Redis, no worker; "
        f"A2A_TURN_THREADS={settings.A2A_TURN_THREADS}; the client (httpx) shares the cores\n"
        f"model:   chat-completions on loopback answering after {args.model_seconds:g} s "
        f"(tests.chat_server, threads)\n"
        f"agents:  max_concurrency={visited.max_concurrency}, turn_timeout={visited.turn_timeout:g} s "
        f"(defaults), {', '.join(f'{k}={v}' for k, v in AGENT_CAPS.items())}; visitor: "
        f"{len(DOCUMENTS)} grounding documents; move: propose €800, the model counters €1,000\n"
        f"load:    1 warm-up + {args.rounds} measured rounds per case and level, a new task per request\n"
        f"loadavg: {_loadavg()} before"
    )
    results: dict[tuple[str, int], tuple[list[Round], int, float]] = {}
    with model.server:
        web = devstack.start_web(port, env, None)
        try:
            wait(lambda: httpx.get(f"{base}/login/", timeout=1).status_code == 200)
            for case in args.cases:
                url, make, check = cases[case]
                for concurrency in args.concurrency:
                    rounds, ends = [], []
                    spy = None
                    for i in range(1 + args.rounds):  # the first is the warm-up
                        if i == 1 and args.profile and concurrency > 1:
                            spy = profiler(web.pid, f"{args.profile}-{case}-{concurrency}.raw")
                        bodies = [make(request_id=i) for i in range(concurrency)]
                        rounds.append(asyncio.run(burst(url, headers, bodies, check)))
                        ends.append(model.round_end(concurrency))
                    if spy is not None:
                        stop_profiler(spy)
                    peak = max(p for p, _ in ends[1:])
                    spread = statistics.median(s for _, s in ends[1:])
                    results[case, concurrency] = (rounds[1:], peak, spread)
        finally:
            stop([web])
            redis.Redis.from_url(redis_url).flushdb()

    ideal = args.model_seconds
    print(f"loadavg: {_loadavg()} after")
    print()
    print(
        f"{'case':<8} {'at once':>7} {'wall s':>7} {'p50 s':>7} {'p99 s':>7} {'in flight':>9} "
        f"{'began s':>7} {'ideal s':>7} {'x ideal':>7}"
    )
    for case in args.cases:
        for concurrency in args.concurrency:
            rounds, peak, spread = results[case, concurrency]
            wall = statistics.median(r.wall for r in rounds)
            latencies = [x for r in rounds for x in r.latencies]
            p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
            print(
                f"{case:<8} {concurrency:>7} {wall:>7.2f} {p50:>7.2f} {p99:>7.2f} {peak:>9} "
                f"{spread:>7.2f} {ideal:>7.2f} {wall / ideal if ideal else float('inf'):>7.2f}"
            )


def _loadavg() -> str:
    """The machine's load average over 1, 5 and 15 minutes (other work shares the cores)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
