"""Launch the production shape on this machine: the uvicorn web process, Celery worker processes and beat.

Used by the test suite's live stack (``tests/conftest.py``) and the benchmark
(``bench/negotiate.py``). Both pass the environment the processes run in —
``DJANGO_SETTINGS_MODULE``, ``DATABASE_URL``, ``REDIS_URL``, ``PUBLIC_BASE_URL``
and ``LOG_LEVEL`` (default ``WARNING``), which sets the processes' own log level
too. The caller owns the processes: it waits for them to be up, and terminates them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
QUEUES = "agent,negotiation,events"

Output = IO[Any] | int | None
"""Where a process's stdout and stderr go: an open file, ``subprocess.DEVNULL``, or None to inherit ours."""


def start_web(port: int, env: Mapping[str, str], out: Output) -> subprocess.Popen[bytes]:
    """Start ``parley.asgi`` under uvicorn on 127.0.0.1:``port``."""
    level = env.get("LOG_LEVEL", "WARNING").lower()
    command = ["-m", "uvicorn", "parley.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    return _start([*command, "--log-level", level], env, out)


def start_worker(
    env: Mapping[str, str], out: Output, *, threads: int, name: str | None = None
) -> subprocess.Popen[bytes]:
    """Start a Celery worker of ``threads`` threads on every queue; ``name`` (``-n``) when several run.

    On Postgres its tasks take their connections from a pool of ``threads`` + 1 (``DATABASE_POOL_SIZE``,
    unless ``env`` sets it): Celery closes a task's connection when the task ends, and a new one costs
    its connect and Postgres's first look at each table it reads (about 5 ms a task on this machine).
    """
    env = {"DATABASE_POOL_SIZE": str(threads + 1), **env}
    command = ["-m", "celery", "-A", "parley", "worker", "--pool", "threads", "--concurrency", str(threads)]
    command += ["-Q", QUEUES, "--without-heartbeat", "--without-gossip", "--without-mingle"]
    command += ["--loglevel", env.get("LOG_LEVEL", "WARNING")]
    if name is not None:
        command += ["-n", name]
    return _start(command, env, out)


def start_beat(env: Mapping[str, str], out: Output) -> subprocess.Popen[bytes]:
    """Start Celery beat, which sends the periodic tasks (``CELERY_BEAT_SCHEDULE``); it keeps its
    schedule where ``CELERY_BEAT_SCHEDULE_FILENAME`` in ``env`` says."""
    return _start(
        ["-m", "celery", "-A", "parley", "beat", "--loglevel", env.get("LOG_LEVEL", "WARNING")], env, out
    )


def _start(arguments: list[str], env: Mapping[str, str], out: Output) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *arguments], cwd=ROOT, env=dict(env), stdout=out, stderr=subprocess.STDOUT
    )
