"""Fixtures of the tenancy tests: a viewer of ``acme`` (its owner is in tests/conftest.py); and the
production shape of several processes (:func:`deployment`), which test_many_processes.py and
test_process_faults.py share."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import AbstractUser

from parley import devstack
from parley.models import Membership, Tenant
from tests.conftest import database_url, free_port, wait_web
from tests.parley.tenancy import member

# The deployment's broker and cache: a Redis database of its own.
BROKER = settings.TEST_SPARE_REDIS_URL


@pytest.fixture
def viewer(tenant: Tenant) -> AbstractUser:
    return member(tenant, "vera", Membership.Role.VIEWER)


# The application_name of every Postgres session of the deployment's processes.
DEPLOYMENT_APPLICATION = "parley-test-deployment"


@dataclass
class Deployment:
    """Two web processes (``webs``, their origins; the first is the public URL; ``web_processes``,
    theirs, in the same order) and their workers."""

    webs: list[str]
    env: dict[str, str]
    web_processes: list[subprocess.Popen[bytes]]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """Two web processes, two workers of four threads and beat, on the test database and a Redis
    database of their own; counterparties reach agents at the first web process's origin."""
    redis.Redis.from_url(BROKER).flushdb()
    ports = [free_port(), free_port()]
    webs = [f"http://127.0.0.1:{port}" for port in ports]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "parley.settings.test",
        "TEST_DATABASE_URL": database_url(),
        "TEST_REDIS_URL": BROKER,
        "PUBLIC_BASE_URL": webs[0],
        "A2A_SEND_TIMEOUT": "30",
        "A2A_PUSH_ALLOW_PRIVATE": "true",
        "CELERY_BEAT_SCHEDULE_FILENAME": str(tmp_path / "beat" / "schedule"),
        "LOG_LEVEL": "WARNING",
        # Names the deployment's Postgres sessions (libpq reads it), so a test can tell them apart.
        "PGAPPNAME": DEPLOYMENT_APPLICATION,
    }
    logs = devstack.ROOT / ".pytest_cache"
    logs.mkdir(exist_ok=True)
    log = (logs / f"many-processes-{ports[0]}.log").open("w")
    processes = [devstack.start_web(port, env, log) for port in ports]
    processes += [devstack.start_worker(env, log, threads=4, name=f"many{i}-{ports[0]}@%h") for i in (1, 2)]
    processes.append(devstack.start_beat(env, log))
    previous_base = settings.PUBLIC_BASE_URL
    settings.PUBLIC_BASE_URL = webs[0]
    try:
        for process, url in zip(processes, webs, strict=False):
            wait_web(process, url, log.name)
        yield Deployment(webs=webs, env=env, web_processes=processes[: len(webs)])
    finally:
        settings.PUBLIC_BASE_URL = previous_base
        devstack.stop(processes)
        log.close()
        redis.Redis.from_url(BROKER).flushdb()
