"""A worker's tasks take their Postgres connections from its pool and give them back open
(``DATABASE_POOL_SIZE``, docs/settings.md): the next task does not connect again; and when Postgres
drops them all, as a restart does, the worker's next tasks get new ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from agents.models import Agent, Intent, Message, Run
from agents.services import threads
from agents.tasks import run_step
from parley import devstack
from parley.celery import app
from tests.chat_server import ChatServer, hang, text
from tests.conftest import database_url, on_chat_model, run_python, wait_until

# Redis itself: left out of the embedded default's run.
pytestmark = pytest.mark.redis

# A broker of its own: the session's live stack must not take this test's tasks.
BROKER = settings.TEST_SPARE_REDIS_URL
# The worker's connections carry this name (libpq reads PGAPPNAME), so the test can tell them apart.
WORKER = "parley-pool-test"


def worker_env() -> dict[str, str]:
    """The environment of a worker on the test database and :data:`BROKER`, its connections named
    :data:`WORKER`."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "parley.settings.test",
        "TEST_DATABASE_URL": database_url(),
        "TEST_REDIS_URL": BROKER,
        "PGAPPNAME": WORKER,
        "LOG_LEVEL": "WARNING",
    }


def step_run(agent: Agent, intent: Intent) -> Run:
    """A queued run of ``agent`` whose first step is sent to :data:`BROKER`'s worker. Made by hand,
    not by run_start: its enqueued step would go to the live stack's worker."""
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.QUEUED)
    threads.append(run, role=Message.Role.USER, content="Go.", step=0)
    with app.connection_for_write(BROKER) as broker:
        run_step.apply_async((str(run.pk), run.tenant_id), connection=broker)
    return run


def run_done(run: Run) -> bool:
    return Run.across_tenants.get(pk=run.pk).status == Run.Status.DONE


def worker_backends() -> set[int]:
    """The Postgres backends (pids) of the worker's open connections to the test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select pid from pg_stat_activity where datname = current_database() and application_name = %s",
            [WORKER],
        )
        return {pid for (pid,) in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_connections_open_between_tasks(
    agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    redis.Redis.from_url(BROKER).flushdb()
    worker = devstack.start_worker(worker_env(), subprocess.DEVNULL, threads=1, name="pool@%h")
    try:
        on_chat_model(agent, chat)
        after_each: list[set[int]] = []
        for n in range(3):
            chat.script(text(f"Answer {n}."))
            run = step_run(agent, intent)
            wait_until(lambda run=run: run_done(run), timeout=60, what=f"run {n + 1} to end")
            # Without a pool Celery closes the task's connection once the task ends, after its writes.
            wait_until(lambda: bool(worker_backends()), timeout=10, what="a connection of the worker")
            after_each.append(worker_backends())
    finally:
        worker.terminate()
        worker.wait(timeout=20)

    assert after_each[0], "the worker kept no connection open after its first task"
    assert after_each[0] == after_each[1] == after_each[2]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_replaces_the_pooled_connections_postgres_dropped(
    agent: Agent, intent: Intent, chat: ChatServer, tmp_path: Path
) -> None:
    redis.Redis.from_url(BROKER).flushdb()
    log = (tmp_path / "worker.log").open("wb")
    # The worker's default: 8 threads, 9 pooled connections.
    worker = devstack.start_worker(worker_env(), log, threads=8, name="dropped@%h")
    try:
        on_chat_model(agent, chat)
        # Eight steps at once, each holding its connection while its model answers: the pool grows
        # to eight connections, idle once the steps end.
        chat.script(*[hang(2, text(f"Answer {n}.")) for n in range(8)])
        tenant = agent.tenant
        intents = [Intent.objects.create(tenant=tenant, agent=agent, statement=f"{n}") for n in range(8)]
        runs = [step_run(agent, about) for about in intents]
        wait_until(lambda: all(run_done(run) for run in runs), timeout=120, what="eight runs to end")
        dropped = worker_backends()
        assert len(dropped) >= 6, f"the pool kept {len(dropped)} connections; the drop needs six or more"
        with connection.cursor() as cursor:
            for pid in dropped:
                cursor.execute("select pg_terminate_backend(%s)", [pid])
        wait_until(lambda: not dropped & worker_backends(), timeout=30, what="Postgres to end them")

        # Before the periodic checks, the first task behind six dead connections waited out the
        # pool's 30 s and failed, its run left running.
        for n in range(3):
            chat.script(text(f"After the drop {n}."))
            run = step_run(agent, intent)
            wait_until(lambda run=run: run_done(run), timeout=60, what=f"run {n + 1} after the drop to end")
        replaced = worker_backends()
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        log.close()

    assert replaced, "the worker holds no connection after the drop"
    assert replaced.isdisjoint(dropped)
    assert "couldn't get a connection" not in (tmp_path / "worker.log").read_text()


def test_the_web_process_refuses_a_connection_pool() -> None:
    """Its gateway threads keep their connections for good: a pool would run dry and requests wait 30 s."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "parley.settings.base",
        "DATABASE_URL": database_url(),
        "DATABASE_POOL_SIZE": "3",
    }
    started = run_python("-c", "import parley.asgi", env=env)

    assert started.returncode != 0
    assert "ImproperlyConfigured: DATABASE_POOL_SIZE is for worker processes" in started.stderr
