"""A lost Redis strands no run, applies nothing twice, and never turns a committed write into a 500.

The production shape on a Redis server of this test's own: the uvicorn web process, two Celery
workers and beat, against the test database. Runs on the ``offline`` model negotiate with Parley
counterparties on the same stack or ask their party; runs on the loopback chat model take several
steps. Twice, with work in flight, Redis loses every message it holds: (a) FLUSHDB, (b) SIGKILL,
down for ~10 s, restarted empty. During (b) the party answers and starts runs through the host API
and through the dashboard's forms. Afterwards every run reaches an end or waits on its party, the
sweep (beat, every ``SWEEP_INTERVAL`` s, for work untouched for ``SWEEP_STALLED_AFTER`` s) having
sent again what was lost; no step, batch, negotiation or turn is applied twice; the processes are
the ones started, never restarted.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from websockets.asyncio.client import connect

from agents.addresses import agent_url
from agents.models import Agent, Message, Question, Run
from negotiations.models import Batch, Negotiation, Turn
from parley import devstack
from parley.models import Membership, Tenant
from parley.services import api_key_create
from tests.chat_server import ChatServer, Reply
from tests.conftest import database_url, free_port, make_user, on_chat_model, wait_until, wait_web

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# The sweep's bound, small here: a chat step takes STEP_DELAY, a negotiation's turn well under a
# second, so work in flight is never taken for lost.
SWEEP_INTERVAL = 1.0
STALLED_AFTER = 12.0
STEP_DELAY = 0.5
CHAT_STEPS = 4
OUTAGE = 10.0
# Every run must have settled within this (seconds): the sweep's bound and interval, the work itself,
# and a slow machine's margin. Reaching it is a stranded run.
SETTLE = 180.0
BUYER_CEILING = 1100
SELLER_FLOOR = 950


class OwnRedis:
    """A ``redis-server`` of this test's own on a free port, without persistence: it can be killed
    and restarted empty."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url, socket_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(answers, timeout=20, what="the test's redis-server")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def flush(self) -> None:
        redis.Redis.from_url(self.url).flushdb()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


@dataclass
class Stack:
    url: str
    processes: dict[str, subprocess.Popen[bytes]]
    logs: Path

    def alive(self) -> dict[str, bool]:
        return {name: process.poll() is None for name, process in self.processes.items()}


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def stack(transactional_db: None, own_redis: OwnRedis, tmp_path: Path, settings: Any) -> Iterator[Stack]:
    """Web, two workers of four threads, and beat, on ``own_redis``, with the sweep's bound small."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "parley.settings.test",
        "TEST_DATABASE_URL": database_url(),
        "TEST_REDIS_URL": own_redis.url,
        "PUBLIC_BASE_URL": url,
        "A2A_SEND_TIMEOUT": "30",
        "SWEEP_INTERVAL": str(SWEEP_INTERVAL),
        "SWEEP_STALLED_AFTER": str(STALLED_AFTER),
        "CELERY_BEAT_SCHEDULE_FILENAME": str(tmp_path / "beat" / "schedule"),
        "LOG_LEVEL": "WARNING",
    }
    logs = devstack.ROOT / ".pytest_cache"
    logs.mkdir(exist_ok=True)
    outputs = {
        name: (logs / f"lost-redis-{name}-{port}.log").open("w") for name in ("web", "w1", "w2", "beat")
    }
    processes = {
        "web": devstack.start_web(port, env, outputs["web"]),
        "w1": devstack.start_worker(env, outputs["w1"], threads=4, name="lost-redis-1@%h"),
        "w2": devstack.start_worker(env, outputs["w2"], threads=4, name="lost-redis-2@%h"),
        "beat": devstack.start_beat(env, outputs["beat"]),
    }
    settings.PUBLIC_BASE_URL = url  # the counterparties' URLs the runs are given

    wait_web(processes["web"], url, outputs["web"].name, timeout=60)
    try:
        yield Stack(url=url, processes=processes, logs=logs)
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for output in outputs.values():
            output.close()


def chat_reply(body: dict[str, Any]) -> Reply:
    """The chat model: a call of a tool the agent lacks (its error is the result, and the run goes
    on) until the thread holds ``CHAT_STEPS - 1`` replies, then a final answer; each after
    ``STEP_DELAY``, so steps are in flight when Redis goes."""
    replies = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if replies < CHAT_STEPS - 1:
        return Reply(delay=STEP_DELAY, tool_calls=((f"note-{replies}", "note", "{}"),))
    return Reply(delay=STEP_DELAY, content=f"Done after {replies + 1} steps.")


@dataclass
class Parties:
    """Who works in the test: the buyer's tenant and party, its agents, the sellers' URLs, and the
    ways in — an API key of the buyer's tenant and a dashboard session of its party."""

    tenant: Tenant
    party: AbstractUser
    buyer: Agent
    chatty: Agent
    sellers: list[str]
    api: httpx.Client
    browser: httpx.Client
    started: list[str] = field(default_factory=list)

    def start(self, agent: Agent, task: str) -> httpx.Response:
        """Start a run through the host API; remember it when it started."""
        response = self.api.post("/runs", json={"agent": str(agent.pk), "statement": task[:80], "task": task})
        if response.status_code == 201:
            self.started.append(response.json()["id"])
        return response

    def negotiate(self, n: int) -> None:
        urls = f"{self.sellers[n % 3]} {self.sellers[(n + 1) % 3]}"
        assert (
            self.start(
                self.buyer, f"Negotiation {n}: a CFO at most {BUYER_CEILING} a day with {urls}"
            ).status_code
            == 201
        )

    def ask(self, n: int) -> None:
        assert self.start(self.buyer, f"Asking run {n}: find us a fractional CFO.").status_code == 201

    def chat(self, n: int) -> None:
        assert self.start(self.chatty, f"Chat run {n}: think it through.").status_code == 201

    def open_questions(self) -> list[Question]:
        return list(
            Question.across_tenants.filter(
                run__agent=self.buyer, answered_at=None, run__status=Run.Status.NEEDS_INPUT
            )
        )

    def answer_text(self, n: int) -> str:
        return f"Talk to {self.sellers[n % 3]}"


@pytest.fixture
def parties(
    stack: Stack, tenant: Tenant, other_tenant: Tenant, principal: AbstractUser, chat: ChatServer
) -> Iterator[Parties]:
    chat.responder = chat_reply
    terms = "amount (number, EUR per day), currency"
    buyer = Agent.objects.create(
        tenant=tenant,
        slug="buyer",
        name="Buyer",
        terms=terms,
        principal=principal,
        term_guards=[{"term": "amount", "op": "<=", "value": BUYER_CEILING, "currency": "EUR"}],
    )
    chatty = on_chat_model(
        Agent.objects.create(tenant=tenant, slug="thinker", name="Thinker", principal=principal), chat
    )
    sellers = [
        Agent.objects.create(
            tenant=other_tenant,
            slug=f"seller-{i}",
            name=f"Seller {i}",
            terms=terms,
            rate_limit=10_000,
            term_guards=[{"term": "amount", "op": ">=", "value": SELLER_FLOOR, "currency": "EUR"}],
        )
        for i in range(3)
    ]
    owner = make_user("ona")
    Membership.objects.create(user=owner, tenant=tenant, role=Membership.Role.OWNER)
    key = api_key_create(tenant=tenant, name="backend", scopes=("read", "write"), user=owner)[1]
    session = Client()
    session.force_login(principal)
    cookie = session.cookies[settings.SESSION_COOKIE_NAME].value
    with (
        httpx.Client(
            base_url=f"{stack.url}/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as api,
        httpx.Client(
            base_url=stack.url, cookies={settings.SESSION_COOKIE_NAME: cookie}, timeout=30
        ) as browser,
    ):
        yield Parties(tenant, principal, buyer, chatty, [agent_url(s) for s in sellers], api, browser)


def in_flight(parties: Parties) -> bool:
    """Work is under way: a negotiation open and a chat run past its first step."""
    return (
        Negotiation.across_tenants.filter(agent=parties.buyer, status=Negotiation.Status.OPEN).exists()
        and Run.across_tenants.filter(
            agent=parties.chatty, status=Run.Status.RUNNING, step_count__gte=1
        ).exists()
    )


def unsettled(run_ids: list[str]) -> list[str]:
    """The runs that neither ended nor wait on their party (an open question), each as "id status"."""
    runs = Run.across_tenants.filter(pk__in=run_ids).exclude(status__in=(*Run.ENDED, Run.Status.NEEDS_INPUT))
    return [f"{pk} {status}" for pk, status in runs.values_list("pk", "status")]


def settle(run_ids: list[str]) -> float:
    """Seconds until every run of ``run_ids`` ended or waits on its party, looking for at most
    :data:`SETTLE` seconds (then the rest are stranded: the caller says which)."""
    started = time.monotonic()
    while unsettled(run_ids) and time.monotonic() - started < SETTLE:
        time.sleep(0.5)
    return round(time.monotonic() - started, 1)


def queued(server: OwnRedis) -> int:
    """Messages the broker holds: waiting in the queues, or out with a worker and not yet acked."""
    client = redis.Redis.from_url(server.url)
    return sum(client.llen(q) for q in ("agent", "negotiation", "events")) + client.hlen("unacked")


def applied_twice(run_ids: list[str]) -> list[str]:
    """What was applied more than once, each named: a step, a run's task, a batch for one call, a
    second Task opened with a counterparty, or a turn one side recorded and the other did not."""
    found = []
    for run in Run.across_tenants.filter(pk__in=run_ids):
        steps = sorted(
            Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).values_list("step", flat=True)
        )
        if steps != list(range(1, run.step_count + 1)):
            found.append(f"run {run.pk}: steps {steps}, step_count {run.step_count}")
        tasks = Message.across_tenants.filter(run=run, role=Message.Role.USER, content=run.task).count()
        if tasks != 1:
            found.append(f"run {run.pk}: its task entered the thread {tasks} times")
        calls = [
            c["id"]
            for calls in Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).values_list(
                "tool_calls", flat=True
            )
            for c in calls
            if c["name"] in ("negotiate", "answer")
        ]
        batches = list(Batch.across_tenants.filter(run=run).values_list("tool_call_id", flat=True))
        if sorted(batches) != sorted(calls):
            found.append(f"run {run.pk}: batches {batches} for negotiation calls {calls}")
    ours = Negotiation.across_tenants.filter(direction=Negotiation.Direction.OUTBOUND, batch__run__in=run_ids)
    theirs = Negotiation.across_tenants.filter(
        direction=Negotiation.Direction.INBOUND, agent__slug__startswith="seller-"
    )
    reached = ours.exclude(task_id="").count()
    if theirs.count() != reached:
        found.append(f"{theirs.count()} Tasks opened with the sellers for {reached} negotiations")
    for negotiation in ours.exclude(task_id=""):
        mirror = theirs.filter(task_id=negotiation.task_id).first()
        if mirror is None:
            found.append(
                f"negotiation {negotiation.pk}: the seller has no record of task {negotiation.task_id}"
            )
            continue
        ours_record = list(negotiation.turns.order_by("seq").values_list("action", "offer_id", "side"))
        their_record = [
            (action, offer, Turn.Side.THEIRS if side == Turn.Side.OURS else Turn.Side.OURS)
            for action, offer, side in mirror.turns.order_by("seq").values_list("action", "offer_id", "side")
        ]
        if ours_record != their_record:
            found.append(f"negotiation {negotiation.pk}: our record {ours_record} and theirs {their_record}")
    return found


def duplicate_model_calls(chat: ChatServer, run_ids: list[str]) -> int:
    """Model calls the chat runs made beyond one per step they took: messages the sweep sent again
    for steps in flight (each applied once, but paid for)."""
    asked = Counter(
        next(m["content"] for m in r.body["messages"] if m["role"] == "user") for r in chat.requests
    )
    taken = dict(
        Run.across_tenants.filter(pk__in=run_ids, agent__slug="thinker").values_list("task", "step_count")
    )
    return sum(max(asked[task] - steps, 0) for task, steps in taken.items())


def heard_live(stack: Stack, parties: Parties, cookie: str) -> str:
    """A dashboard socket opened now hears the question a new asking run opens: the web process's
    socket and the workers' publishing work again. The frame's event, or what went wrong."""

    async def listen() -> str:
        headers = {"Cookie": cookie, "Origin": stack.url}
        async with (
            asyncio.timeout(60),
            connect(f"{stack.url.replace('http', 'ws', 1)}/ws/live/", additional_headers=headers) as socket,
        ):
            await asyncio.to_thread(parties.ask, 99)
            while (frame := json.loads(await socket.recv()))["event"] != "question.opened":
                pass
            return str(frame["event"])

    try:
        return asyncio.run(listen())
    except (TimeoutError, OSError) as exc:
        return f"nothing ({type(exc).__name__})"


def csrf(browser: httpx.Client, path: str) -> str:
    """Open ``path`` as the party does (a dashboard page, which must answer 200) and the CSRF token
    its form posts."""
    page = browser.get(path)
    assert page.status_code == 200, (path, page.status_code)
    return browser.cookies["csrftoken"]


def test_a_lost_redis_strands_no_run_and_applies_nothing_twice(
    stack: Stack, own_redis: OwnRedis, parties: Parties, chat: ChatServer
) -> None:
    tenant = parties.tenant.slug
    report: dict[str, Any] = {}

    # (a) FLUSHDB with work in flight: two runs resuming on an answer, and runs negotiating and
    # stepping.
    parties.ask(0)
    parties.ask(1)
    wait_until(lambda: len(parties.open_questions()) == 2, timeout=SETTLE, what="the asking runs to ask")
    for n in range(3):
        parties.negotiate(n)
        parties.chat(n)
    for n, question in enumerate(parties.open_questions()):
        answered = parties.api.post(
            f"/questions/{question.pk}/answer", json={"answer": parties.answer_text(n)}
        )
        assert answered.status_code == 200, answered.text
    wait_until(lambda: in_flight(parties), timeout=60, what="negotiations and chat steps in flight")
    flushed = queued(own_redis)
    own_redis.flush()
    report["(a) FLUSHDB"] = {"messages flushed": flushed, "settled in (s)": settle(parties.started)}

    # (b) Redis SIGKILLed with work in flight, down ~10 s, restarted empty; (c) the party works on
    # through the API and the dashboard meanwhile.
    for n in range(2, 6):
        parties.ask(n)
    wait_until(lambda: len(parties.open_questions()) == 4, timeout=SETTLE, what="the asking runs to ask")
    for n in range(3, 6):
        parties.negotiate(n)
        parties.chat(n)
    wait_until(lambda: in_flight(parties), timeout=60, what="negotiations and chat steps in flight")
    held = queued(own_redis)
    own_redis.kill()
    down = time.monotonic()
    questions = parties.open_questions()
    during: dict[str, int] = {}

    started_by_api = parties.start(parties.buyer, f"Outage run: a CFO with {parties.sellers[0]}")
    during["API: start a run"] = started_by_api.status_code
    answered = parties.api.post(
        f"/questions/{questions[0].pk}/answer", json={"answer": parties.answer_text(0)}
    )
    during["API: answer a question"] = answered.status_code
    during["API: list runs"] = parties.api.get("/runs").status_code

    agent_page = reverse("agents:agent", kwargs={"tenant": tenant, "pk": parties.buyer.pk})
    form = {
        "csrfmiddlewaretoken": csrf(parties.browser, agent_page),
        "intent": "",
        "statement": "Outage run from the dashboard",
        "task": f"Outage form run: a CFO with {parties.sellers[1]}",
    }
    started_by_form = parties.browser.post(
        reverse("agents:run-start", kwargs={"tenant": tenant, "pk": parties.buyer.pk}), data=form
    )
    during["dashboard: start a run"] = started_by_form.status_code
    run_page = reverse("agents:run", kwargs={"tenant": tenant, "pk": questions[1].run_id})
    answer_form = {"csrfmiddlewaretoken": csrf(parties.browser, run_page), "answer": parties.answer_text(1)}
    answered_by_form = parties.browser.post(
        reverse("agents:question-answer", kwargs={"tenant": tenant, "pk": questions[1].pk}), data=answer_form
    )
    during["dashboard: answer a question"] = answered_by_form.status_code
    during["dashboard: run list"] = parties.browser.get(
        reverse("agents:run-list", kwargs={"tenant": tenant})
    ).status_code

    time.sleep(max(OUTAGE - (time.monotonic() - down), 0))
    own_redis.start()
    report["outage (s)"] = round(time.monotonic() - down, 1)
    report["during the outage (HTTP status)"] = during

    assert started_by_form.status_code == 302, started_by_form.text[:500]
    form_run = started_by_form.headers["location"].rstrip("/").rsplit("/", 1)[-1]
    parties.started.append(form_run)
    for n, question in enumerate(questions[2:], start=2):
        reply = parties.api.post(f"/questions/{question.pk}/answer", json={"answer": parties.answer_text(n)})
        assert reply.status_code == 200, reply.text
    report["(b) SIGKILL"] = {"messages held when killed": held, "settled in (s)": settle(parties.started)}

    report["a socket opened after the restart hears"] = heard_live(
        stack,
        parties,
        f"{settings.SESSION_COOKIE_NAME}={parties.browser.cookies[settings.SESSION_COOKIE_NAME]}",
    )
    runs = Run.across_tenants.filter(pk__in=parties.started)
    stranded = unsettled(parties.started)
    twice = applied_twice(parties.started)
    report["runs tried"] = len(parties.started)
    report["runs ended"] = runs.filter(status__in=Run.ENDED).count()
    report["runs waiting on their party"] = runs.filter(status=Run.Status.NEEDS_INPUT).count()
    report["runs stranded"] = stranded
    report["runs by status"] = dict(Counter(runs.values_list("status", flat=True)))
    report["negotiations"] = dict(
        Counter(
            Negotiation.across_tenants.filter(direction=Negotiation.Direction.OUTBOUND).values_list(
                "status", flat=True
            )
        )
    )
    report["applied twice"] = twice
    failed = Negotiation.across_tenants.filter(status=Negotiation.Status.FAILED)
    report["negotiations failed"] = [f"{pk}: {error}" for pk, error in failed.values_list("pk", "error")]
    report["model calls beyond one per step (sent again, applied once)"] = duplicate_model_calls(
        chat, parties.started
    )
    report["processes alive, never restarted"] = stack.alive()
    print("\nLost Redis:", report)

    assert all(code < 500 for code in during.values()), during
    assert (started_by_api.status_code, answered.status_code, answered_by_form.status_code) == (201, 200, 302)
    assert Question.across_tenants.get(pk=questions[1].pk).answer == parties.answer_text(1)
    assert stranded == []
    assert twice == []
    outage_runs = [started_by_api.json()["id"], form_run, str(questions[0].run_id), str(questions[1].run_id)]
    assert set(Run.across_tenants.filter(pk__in=outage_runs).values_list("status", flat=True)) == {
        Run.Status.DONE
    }
    assert report["a socket opened after the restart hears"] == "question.opened"
    assert all(stack.alive().values()), stack.alive()
