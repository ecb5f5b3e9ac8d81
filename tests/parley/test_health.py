"""Health per process: ``GET /health`` of the web process, ``python -m parley.health worker`` of a worker."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.test import Client

from parley import devstack
from tests.conftest import LiveStack, free_port, run_python, wait_until


def worker_check(live_stack: LiveStack, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parley.health", "worker", *arguments],
        cwd=devstack.ROOT,
        env=live_stack.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db
def test_the_web_process_is_healthy_while_it_reaches_the_database(client: Client) -> None:
    response = client.get("/health")

    assert response.status_code == 200
    assert response.json() == {"process": "web", "status": "ok", "database": "ok"}


@pytest.mark.django_db
def test_health_answers_get_only(client: Client) -> None:
    assert client.post("/health").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_the_live_web_process_answers_health(live_stack: LiveStack) -> None:
    response = httpx.get(f"{live_stack.url}/health", timeout=10)

    assert response.status_code == 200
    assert response.json() == {"process": "web", "status": "ok", "database": "ok"}


@pytest.fixture
def web_without_database(live_stack: LiveStack) -> Iterator[str]:
    """A web process whose database is a port where nothing listens."""
    port = free_port()
    env = {**live_stack.env, "TEST_DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/parley"}
    web = devstack.start_web(port, env, subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code > 0
        except httpx.HTTPError:
            return False

    try:
        wait_until(answering, what="the web process without a database")
        yield url
    finally:
        web.terminate()
        web.wait(timeout=10)


@pytest.mark.django_db(transaction=True)
def test_the_web_process_is_unhealthy_without_its_database(web_without_database: str) -> None:
    response = httpx.get(f"{web_without_database}/health", timeout=10)

    assert response.status_code == 503
    body: dict[str, Any] = response.json()
    assert (body["process"], body["status"]) == ("web", "failing")
    assert body["database"].startswith("OperationalError: ")


@pytest.mark.django_db(transaction=True)
def test_the_worker_answers_its_health_check(live_stack: LiveStack) -> None:
    # The live stack waits for its web process only; the worker may still be starting.
    result = wait_until(
        lambda: (checked := worker_check(live_stack)).returncode == 0 and checked, what="the worker's ping"
    )

    assert json.loads(result.stdout) == {
        "process": "worker",
        "status": "ok",
        "worker": "ok",
        "database": "ok",
    }


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_does_not_answer_is_unhealthy(live_stack: LiveStack) -> None:
    result = worker_check(live_stack, "--name", "celery@nowhere", "--timeout", "0.5")

    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "process": "worker",
        "status": "failing",
        "worker": "celery@nowhere did not answer within 0.5 s",
        "database": "ok",
    }


@pytest.mark.django_db(transaction=True)
def test_a_worker_check_without_its_broker_fails(live_stack: LiveStack) -> None:
    env = {**live_stack.env, "TEST_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}

    result = worker_check(LiveStack(url=live_stack.url, env=env))

    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert (report["status"], report["database"]) == ("failing", "ok")
    assert report["worker"].startswith("the broker cannot be reached: ")


@pytest.mark.django_db(transaction=True)
def test_the_web_health_check_asks_the_web_process_on_its_port(live_stack: LiveStack) -> None:
    port = live_stack.url.rsplit(":", 1)[1]

    healthy = run_python("-m", "parley.health", "web", env={**live_stack.env, "WEB_PORT": port})
    nowhere = str(free_port())
    unreachable = run_python("-m", "parley.health", "web", env={**live_stack.env, "WEB_PORT": nowhere})

    assert healthy.returncode == 0
    assert json.loads(healthy.stdout) == {"process": "web", "status": "ok", "web": "ok"}
    assert unreachable.returncode == 1
    assert json.loads(unreachable.stdout)["web"].startswith("the web process does not answer: ConnectError")
