"""A web process SIGKILLed in the middle of an inbound turn, a message sent again to another web
process while its turn runs, and Postgres dropping every connection of the running processes, as a
restart does (issue 20).

The deployment of ``tests/parley/conftest.py``: two web processes, two workers and beat.

* The seller's model holds its answer while the first web process runs the turn; that process is
  SIGKILLed, and the counterparty, whose connection dropped, sends the same message (the same
  ``messageId``) to the other. The move is applied once and answered. A first message's Task that
  the killed process began, which no process is left to answer, is answered by the sweep
  (:mod:`a2a_gateway.abandoned`) with the try-again text.
* The same message sent again to the other web process while the first still runs its turn (a
  counterparty that gave up waiting) waits for the first answer and gets it: applied once, on one
  Task, whether a first message or a follow-up.
* Postgres terminates every backend of the deployment (``pg_terminate_backend``, as a restart or a
  failover does; restarting the machine's own Postgres would end the test session too). The processes
  carry on without a restart: a counterparty's next move is answered on each web process, ``/health``
  answers 200, the host API reads, and a run started afterwards negotiates to done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from a2a.types import Role, TaskState
from django.conf import settings
from django.db import connection
from django.utils import timezone

from a2a_gateway.abandoned import ABANDONED_GRACE_SECONDS, abandoned_tasks_answer
from a2a_gateway.executor import try_again_text
from a2a_gateway.models import A2ATask
from a2a_gateway.store import stored_task
from agents.addresses import agent_url
from agents.models import Agent, ModelEndpoint, Run
from negotiations.models import Negotiation, Turn
from parley.models import Tenant
from tests.a2a_gateway.conftest import proposal
from tests.a2a_gateway.rpc import call, message_params, task_of
from tests.chat_server import ChatServer, Reply, hang
from tests.conftest import on_chat_model, run_python, wait_until
from tests.negotiating_policy import NegotiatingPolicy
from tests.negotiations.test_worker_kills import DAY_RATE, buyers, eur, record, sellers, verdict
from tests.parley.conftest import DEPLOYMENT_APPLICATION, Deployment
from tests.parley.test_many_processes import api_key, run_ended

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Seconds the seller's model holds the turn the test kills: far beyond the kill, which comes as soon
# as the model has the request; the server's closing ends the hold.
HELD = 600.0
WORKING = "TASK_STATE_WORKING"
# Seconds the message sent again is given to be answered while the first turn still waits on its
# model: answered within them, it did not wait for the first answer.
CLAIM_WAITS_SECONDS = 3.0


@pytest.fixture
def model() -> Iterator[ChatServer]:
    """A chat model that negotiates (:class:`tests.negotiating_policy.NegotiatingPolicy`)."""
    with ChatServer(responder=NegotiatingPolicy()) as server:
        yield server


def chat_seller(model: ChatServer) -> Agent:
    """A seller with a floor of €950 a day, on ``model``, its model call allowed a minute."""
    tenant = Tenant.objects.create(slug="solo", name="Solo")
    seller = Agent.objects.create(
        tenant=tenant,
        slug="seller",
        name="Seller",
        terms=DAY_RATE,
        term_guards=[eur(">=", 950, aspiration=1250)],
    )
    on_chat_model(seller, model)
    ModelEndpoint.objects.for_tenant(tenant).filter().update(timeout=60)
    return seller


def send_then_lose(url: str, params: dict[str, Any]) -> threading.Thread:
    """Send ``params`` to ``url`` from a thread whose answer nobody reads: the counterparty whose
    connection drops."""

    def send() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the web process dies under it
            call(url, "SendMessage", params)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def applied(seller: Agent, message_id: str) -> int:
    """How many of the seller's inbound turns hold the message ``message_id``."""
    return Turn.across_tenants.filter(
        negotiation__agent=seller, side=Turn.Side.THEIRS, raw__messageId=message_id
    ).count()


def kill_mid_turn(deployment: Deployment, model: ChatServer, params: dict[str, Any]) -> None:
    """Send ``params`` to the first web process, wait until its turn waits on the seller's model,
    which holds it, then SIGKILL that process."""
    asked = len(model.requests)
    model.script(hang(HELD))
    seller_path = params.pop("path")
    sender = send_then_lose(f"{deployment.webs[0]}{seller_path}", params)
    wait_until(lambda: len(model.requests) > asked, timeout=60, what="the turn to ask the seller's model")
    web = deployment.web_processes[0]
    web.send_signal(signal.SIGKILL)
    web.wait(timeout=20)
    sender.join(timeout=60)


def answered_on_the_other(deployment: Deployment, path: str, params: dict[str, Any]) -> dict[str, Any]:
    """The Task the second web process answers ``params`` with."""
    return task_of(call(f"{deployment.webs[1]}{path}", "SendMessage", params))


@pytest.mark.parametrize("which", ["first message", "follow-up"])
def test_a_web_process_killed_mid_turn_loses_nothing_and_applies_nothing_twice(
    deployment: Deployment, model: ChatServer, which: str
) -> None:
    seller = chat_seller(model)
    path = agent_url(seller).removeprefix(deployment.webs[0])
    task = None
    if which == "follow-up":
        task = answered_on_the_other(deployment, path, message_params(proposal(800)))
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    params = message_params(proposal(900), task=task)
    message_id = params["message"]["messageId"]

    kill_mid_turn(deployment, model, {**params, "path": path})
    assert applied(seller, message_id) == 0  # the turn died with its process, before anything was written

    # The counterparty sends the same message again, to the web process that is left.
    answer = answered_on_the_other(deployment, path, params)

    assert applied(seller, message_id) == 1
    assert answer["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", answer
    assert answer["history"][-1]["role"] == "ROLE_AGENT"
    assert answer["history"][-2]["messageId"] == message_id
    assert "data" in answer["history"][-1]["parts"][0]
    if task is not None:
        assert answer["id"] == task["id"]
    # Sent yet again, it is answered with the same Task and applied no second time.
    again = answered_on_the_other(deployment, path, params)
    assert (again["id"], again["history"]) == (answer["id"], answer["history"])
    assert applied(seller, message_id) == 1
    [negotiation] = Negotiation.across_tenants.filter(agent=seller)
    assert negotiation.task_id == answer["id"]
    turns = record(negotiation)
    assert len(turns) == len(answer["history"])
    assert [t[0] for t in turns] == [m["messageId"] for m in answer["history"]]
    if task is not None:  # the killed process's Task is the one the follow-up was answered on
        assert not A2ATask.across_tenants.filter(agent=seller, state=WORKING).exists()


def test_a_task_begun_by_a_web_process_killed_mid_turn_is_answered_by_the_sweep(
    deployment: Deployment, model: ChatServer
) -> None:
    seller = chat_seller(model)
    path = agent_url(seller).removeprefix(deployment.webs[0])
    params = message_params(proposal(900))
    kill_mid_turn(deployment, model, {**params, "path": path})
    answer = answered_on_the_other(deployment, path, params)
    assert answer["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", answer
    [left] = A2ATask.across_tenants.filter(agent=seller, state=WORKING)
    assert left.task_id != answer["id"]  # the killed process's Task, which no process answers

    # While a live process could still be answering it, the sweep leaves it alone.
    assert abandoned_tasks_answer() == []
    later = timezone.now() + timedelta(seconds=seller.turn_timeout + ABANDONED_GRACE_SECONDS + 1)
    assert abandoned_tasks_answer(now=later) == [left.task_id]

    task = stored_task(A2ATask.across_tenants.get(task_id=left.task_id))
    assert TaskState.Name(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
    reply = task.history[-1]
    assert (reply.role, reply.parts[0].text) == (Role.ROLE_AGENT, try_again_text(seller))
    assert task.history[-2].message_id == params["message"]["messageId"]
    assert [a.parts[0].text for a in task.artifacts] == [try_again_text(seller)]
    assert applied(seller, params["message"]["messageId"]) == 1  # on the Task the other process answered
    assert abandoned_tasks_answer(now=later) == []


class Held:
    """A responder that holds its first call until ``release`` is set, then answers every call as
    ``then`` does; ``held`` is set once the first call is in."""

    def __init__(self, then: Callable[[dict[str, Any]], Reply]) -> None:
        self.then = then
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            first = not self.held.is_set()
            self.held.set()
        if first:
            self.release.wait(timeout=120)
        return self.then(body)


@pytest.mark.parametrize("which", ["first message", "follow-up"])
def test_a_message_sent_again_to_another_web_process_while_its_turn_runs_is_applied_once(
    deployment: Deployment, model: ChatServer, which: str
) -> None:
    seller = chat_seller(model)
    path = agent_url(seller).removeprefix(deployment.webs[0])
    task = None
    if which == "follow-up":
        task = answered_on_the_other(deployment, path, message_params(proposal(800)))
    held = Held(model.responder)
    model.responder = held
    params = message_params(proposal(900), task=task)
    answers: dict[str, httpx.Response] = {}

    def send(web: str) -> Callable[[], None]:
        def sending() -> None:
            answers[web] = call(f"{web}{path}", "SendMessage", params)

        return sending

    first = threading.Thread(target=send(deployment.webs[0]), daemon=True)
    first.start()
    wait_until(held.held.is_set, timeout=60, what="the first turn to wait on the model")
    # The counterparty gave up waiting and sends the same message again; the other process takes
    # it, and waits for the first process's answer rather than answer it a second time.
    again = threading.Thread(target=send(deployment.webs[1]), daemon=True)
    again.start()
    again.join(timeout=CLAIM_WAITS_SECONDS)
    assert again.is_alive(), "the message sent again was answered while its first turn still ran"
    held.release.set()
    first.join(timeout=120)
    again.join(timeout=120)

    assert applied(seller, params["message"]["messageId"]) == 1
    assert Negotiation.across_tenants.filter(agent=seller).count() == 1
    tasks = [task_of(answers[web]) for web in deployment.webs]
    assert [t["status"]["state"] for t in tasks] == ["TASK_STATE_INPUT_REQUIRED"] * 2
    assert tasks[0]["id"] == tasks[1]["id"]
    assert tasks[1]["history"] == tasks[0]["history"]
    assert [t.state for t in A2ATask.across_tenants.filter(agent=seller)] == ["TASK_STATE_INPUT_REQUIRED"]


def backends() -> list[tuple[int, str]]:
    """The Postgres backends of the deployment's processes on the test database: (pid,
    application_name). The session's other processes (the live stack's) are left alone: their
    fixtures outlive this test."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND application_name = %s",
            [DEPLOYMENT_APPLICATION],
        )
        return [(int(pid), str(name)) for pid, name in cursor.fetchall()]


def terminate(pids: list[int]) -> None:
    """``pg_terminate_backend`` each of ``pids``, from a connection of its own to the server."""
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as own:
        for pid in pids:
            own.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_processes_carry_on_when_postgres_drops_every_connection(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    [seller] = sellers(1)
    tenant, [(buyer, intent), (second, second_intent)] = buyers(2)
    headers = {"Authorization": f"Bearer {api_key(tenant)}"}
    path = agent_url(seller).removeprefix(deployment.webs[0])

    def start(web: str, agent: Agent, about: Any) -> str:
        answer = httpx.post(
            f"{web}/api/v1/runs",
            json={"agent": str(agent.pk), "intent": str(about.pk), "task": f"Talk to {agent_url(seller)}"},
            headers=headers,
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    # Every process at work first, so each holds connections: a run negotiated through both webs.
    first_run = start(deployment.webs[1], buyer, intent)
    wait_until(lambda: run_ended(first_run), timeout=120, what="the first run to end")
    for web in deployment.webs:
        assert httpx.get(f"{web}/health", timeout=30).status_code == 200
        task_of(call(f"{web}{path}", "SendMessage", message_params(proposal(800))))

    dropped = backends()
    assert dropped, "the processes hold no connection to drop"
    terminate([pid for pid, _ in dropped])
    wait_until(
        lambda: not {pid for pid, _ in dropped} & {pid for pid, _ in backends()},
        timeout=30,
        what="Postgres to end the dropped backends",
    )

    # A run started at once: its first move meets the first web process's gateway (the public URL)
    # before anything else has; then what a counterparty meets first on the other, and the reads.
    run_id = start(deployment.webs[0], second, second_intent)
    run = wait_until(lambda: run_ended(run_id), timeout=180, what="the run started after the drop to end")
    moves = [
        call(f"{web}{path}", "SendMessage", message_params(proposal(800))) for web in deployment.webs[1:]
    ]
    health = [httpx.get(f"{web}/health", timeout=30) for web in deployment.webs]
    reads = [
        httpx.get(f"{web}/api/v1/runs/{first_run}", headers=headers, timeout=30) for web in deployment.webs
    ]
    with capsys.disabled():
        print(
            f"\npostgres drop: {len(dropped)} backends ({sorted({n for _, n in dropped})}); first moves "
            f"{[(m.status_code, m.text[:120]) for m in moves]}; health {[h.status_code for h in health]}; "
            f"reads {[r.status_code for r in reads]}; run {run.status}, negotiation "
            f"{list(Negotiation.across_tenants.filter(agent=second).values_list('status', 'error'))}"
        )

    ours = Negotiation.across_tenants.get(agent=second)
    assert (run.status, ours.status, ours.error) == (Run.Status.DONE, Negotiation.Status.SETTLED, "")
    theirs = Negotiation.across_tenants.get(task_id=ours.task_id, agent=seller)
    assert record(ours) == record(theirs) != []
    assert verdict(ours) == verdict(theirs)
    assert [h.status_code for h in health] == [200, 200]
    assert [r.status_code for r in reads] == [200, 200]
    assert [task_of(m)["status"]["state"] for m in moves] == ["TASK_STATE_INPUT_REQUIRED"]
    # Beat's lock went with its session: beat takes it again on a new connection and sends again.
    wait_until(
        lambda: run_python("-m", "parley.health", "beat", env=deployment.env).returncode == 0,
        timeout=180,
        interval=1,
        what="beat to hold its lock again (it asks at its next tick: SWEEP_INTERVAL, 60 s)",
    )
