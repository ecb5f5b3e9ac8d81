"""Launch the production shape on this machine: the web process, Celery worker processes and beat.

Each is started as the container image starts it, ``python -m parley.processes <role>``.

Used by the test suite's live stack (``tests/conftest.py``) and the benchmark
(``bench/negotiate.py``). Both pass the environment the processes run in —
``DJANGO_SETTINGS_MODULE``, ``DATABASE_URL``, ``REDIS_URL``, ``PUBLIC_BASE_URL``
and ``LOG_LEVEL`` (default ``WARNING``), which sets the processes' own log level
too. The caller owns the processes: it waits for them to be up, and stops them (:func:`stop`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import IO, Any

from parley import processes

ROOT = processes.ROOT

Output = IO[Any] | int | None
"""Where a process's stdout and stderr go: an open file, ``subprocess.DEVNULL``, or None to inherit ours."""


def start_web(port: int, env: Mapping[str, str], out: Output) -> subprocess.Popen[bytes]:
    """Start the ``web`` role (``parley.asgi`` under uvicorn) on 127.0.0.1:``port``."""
    return start("web", {**env, "WEB_HOST": "127.0.0.1", "WEB_PORT": str(port)}, out)


def start_worker(
    env: Mapping[str, str], out: Output, *, threads: int, name: str | None = None
) -> subprocess.Popen[bytes]:
    """Start the ``worker`` role: ``threads`` threads on every queue, named ``name`` (``-n``) when
    several run; its Postgres connection pool is ``threads`` + 1 unless ``env`` sets
    ``DATABASE_POOL_SIZE``."""
    return start("worker", {**env, "WORKER_CONCURRENCY": str(threads), "WORKER_NAME": name or ""}, out)


def start_beat(env: Mapping[str, str], out: Output) -> subprocess.Popen[bytes]:
    """Start the ``beat`` role, which sends the periodic tasks (``CELERY_BEAT_SCHEDULE``); it keeps its
    schedule where ``CELERY_BEAT_SCHEDULE_FILENAME`` in ``env`` says."""
    return start("beat", env, out)


def start(role: str, env: Mapping[str, str], out: Output) -> subprocess.Popen[bytes]:
    """Start ``python -m parley.processes <role>`` in the checkout, as the container image does."""
    return subprocess.Popen(
        [sys.executable, "-m", "parley.processes", role],
        cwd=ROOT,
        env=dict(env),
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """Ask each of ``processes`` still running to stop (SIGTERM: a warm shutdown), then kill any that
    has not within 20 s, and reap it."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
