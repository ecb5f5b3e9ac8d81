"""A worker killed in the middle of a step: the step runs again on another worker and is applied once."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator

import pytest
import redis
from django.conf import settings

from agents.models import Agent, Intent, Message, ModelEndpoint, Run
from agents.tasks import run_step
from parley import devstack
from parley.celery import app
from tests.chat_server import ChatServer, hang, text
from tests.conftest import database_url, wait_until

# Redis itself: left out of the embedded default's run.
pytestmark = pytest.mark.redis

# A broker of its own: the session's live stack must not take this test's task.
BROKER = settings.TEST_SPARE_REDIS_URL


@pytest.fixture
def start_worker() -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start Celery worker processes on this test's broker; a task out for 2 s is handed out again."""
    redis.Redis.from_url(BROKER).flushdb()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "parley.settings.test",
        "TEST_DATABASE_URL": database_url(),
        "TEST_REDIS_URL": BROKER,
        "CELERY_VISIBILITY_TIMEOUT": "2",
        "CELERY_RESTORE_INTERVAL": "0.5",
        "LOG_LEVEL": "WARNING",
    }
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        worker = devstack.start_worker(env, subprocess.DEVNULL, threads=1, name=f"{name}@%h")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=20)


@pytest.mark.django_db(transaction=True)
def test_a_step_in_flight_on_a_killed_worker_runs_again_and_is_applied_once(
    agent: Agent, intent: Intent, start_worker: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    with ChatServer() as chat:
        ModelEndpoint.objects.create(
            tenant=agent.tenant, name="house-model", base_url=chat.url, upstream_model="house-1", timeout=60
        )
        agent.model = "house-model"
        agent.save()
        chat.script(hang(60), text("Recovered."))
        run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.QUEUED)
        Message.objects.create(
            tenant=agent.tenant, intent=intent, run=run, seq=1, role=Message.Role.USER, content="Answer."
        )
        doomed = start_worker("doomed")
        with app.connection_for_write(BROKER) as connection:
            run_step.apply_async((str(run.pk), run.tenant_id), connection=connection)
        wait_until(lambda: chat.requests, timeout=60, what="the first worker's model call")

        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        start_worker("survivor")

        wait_until(
            lambda: Run.across_tenants.get(pk=run.pk).status == Run.Status.DONE,
            timeout=60,
            what="the step to run again on the surviving worker",
        )

    run.refresh_from_db()
    assert (run.output, run.step_count) == ("Recovered.", 1)
    assert Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).count() == 1
    assert len(chat.requests) == 2
