"""The processes of a deployment, by role: what the container image runs, and what the tests start.

``python -m parley.processes <role>`` replaces itself (``exec``) with the role's command, so the
process manager's signals reach uvicorn or Celery directly:

=========  ==================================================================================
role       command
=========  ==================================================================================
migrate    ``manage.py migrate --noinput``: one-shot, before a new version's web and workers
web        uvicorn serving :mod:`parley.asgi` on ``WEB_HOST``:``WEB_PORT`` (``0.0.0.0:8000``);
           on SIGTERM it stops taking connections and gives those open ``WEB_GRACEFUL_SECONDS``
worker     a Celery worker of ``WORKER_CONCURRENCY`` threads (8) on every queue, named
           ``WORKER_NAME`` (Celery's default, ``celery@<hostname>``, when unset); its tasks take
           Postgres connections from a pool of that many + 1 unless ``DATABASE_POOL_SIZE`` says
beat       Celery beat, which sends the periodic tasks; a second beat waits as a standby
           (:class:`parley.celery.ScheduleFileScheduler`)
=========  ==================================================================================

Each reads the Django settings from the environment as every process does
(``DJANGO_SETTINGS_MODULE``, ``DATABASE_URL``, ``REDIS_URL``, …; docs/settings.md),
and ``LOG_LEVEL`` (``WARNING``) for uvicorn's and Celery's own logs.
:mod:`parley.devstack` starts the same commands for the tests and benchmarks;
``docker/Dockerfile`` makes this module its entrypoint.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUEUES = "agent,negotiation,events"
ROLES = ("migrate", "web", "worker", "beat")


def command(role: str) -> list[str]:
    """The argv (starting with this Python) that runs ``role``, configured by this process's
    environment; for ``worker`` it also sets ``DATABASE_POOL_SIZE`` there when unset.

    Raises ``ValueError`` for a role not in :data:`ROLES`.
    """
    level = os.environ.get("LOG_LEVEL", "WARNING")
    if role == "migrate":
        arguments = [str(ROOT / "manage.py"), "migrate", "--noinput"]
    elif role == "web":
        arguments = ["-m", "uvicorn", "parley.asgi:application"]
        arguments += ["--host", os.environ.get("WEB_HOST", "0.0.0.0")]
        arguments += ["--port", os.environ.get("WEB_PORT", "8000")]
        arguments += ["--timeout-graceful-shutdown", os.environ.get("WEB_GRACEFUL_SECONDS", "20")]
        arguments += ["--log-level", level.lower()]
    elif role == "worker":
        threads = os.environ.get("WORKER_CONCURRENCY", "8")
        # Celery closes a task's connection when the task ends; a pool keeps it open for the next
        # task, which would otherwise pay a new connection (about 5 ms a task on Postgres).
        os.environ.setdefault("DATABASE_POOL_SIZE", str(int(threads) + 1))
        arguments = ["-m", "celery", "-A", "parley", "worker", "--pool", "threads", "--concurrency", threads]
        # No heartbeats, gossip or mingle: nothing here reads them, and each costs broker traffic.
        arguments += ["-Q", QUEUES, "--without-heartbeat", "--without-gossip", "--without-mingle"]
        arguments += ["--loglevel", level]
        if name := os.environ.get("WORKER_NAME", ""):
            arguments += ["-n", name]
    elif role == "beat":
        arguments = ["-m", "celery", "-A", "parley", "beat", "--loglevel", level]
    else:
        raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")
    return [sys.executable, *arguments]


def main(argv: list[str] | None = None) -> None:
    """``python -m parley.processes <role>``: exec the role's command in the checkout; a usage line
    and exit status 2 for anything else."""
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1 or arguments[0] not in ROLES:
        print(f"usage: python -m parley.processes {{{','.join(ROLES)}}}", file=sys.stderr)
        raise SystemExit(2)
    argv_ = command(arguments[0])
    os.chdir(ROOT)
    os.execv(argv_[0], argv_)


if __name__ == "__main__":
    main()
