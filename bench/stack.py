"""What the benchmarks share: a fresh Postgres database for the production shape, waiting, ports, stopping
processes, percentiles.

Where the benchmarks run, from the environment (so two people, or a benchmark and the test suite, can share a
machine without emptying each other's Redis):

* ``BENCH_POSTGRES_URL`` — the Postgres server, without a database (default
  ``postgres://postgres@127.0.0.1:5432``); each benchmark drops and creates its own database there;
* ``BENCH_REDIS_URL`` — the Redis database every benchmark empties and uses (default DB 8 on 127.0.0.1).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from parley.devstack import stop as stop  # the benchmarks' way to stop what they started

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432").rstrip("/")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/8")


def database_url(name: str) -> str:
    """The URL of the database ``name`` on the benchmarks' Postgres server."""
    return f"{POSTGRES_URL}/{name}"


DATABASE_URL = database_url("parley_bench")


def fresh_database(env: dict[str, str], name: str = "parley_bench") -> None:
    """Drop and create the database ``name``, migrate it, and set up Django in this process on ``env``
    (whose ``DATABASE_URL`` names that database)."""
    os.environ.update(env)
    for sql in (f"drop database if exists {name}", f"create database {name}"):
        subprocess.run(["psql", database_url("postgres"), "-qc", sql], check=True)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    import django

    sys.path.insert(0, str(ROOT))
    django.setup()


def wait(predicate: Callable[[], object], timeout: float = 60) -> None:
    """Poll ``predicate`` until it is truthy (an exception counts as not yet); exit after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # the server may not be up yet
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_workers(count: int) -> None:
    """Wait until ``count`` workers answer a ping, so none joins in the middle of a measurement."""
    from parley.celery import app

    wait(lambda: len(app.control.ping(timeout=0.5) or []) >= count, timeout=60)


def percentile(values: list[float], percent: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * percent // 100))
    return ordered[int(rank) - 1]


def records_commit_times(database: str) -> bool:
    """Whether the Postgres server of ``database`` records when each transaction commits
    (``track_commit_timestamp``: ``ALTER SYSTEM SET track_commit_timestamp = on`` and a restart turn
    it on)."""
    import psycopg

    with psycopg.connect(database) as connection:
        return connection.execute("show track_commit_timestamp").fetchone() == ("on",)


def commit_times(database: str, table: str, ids: list[str]) -> dict[str, float] | None:
    """When each row of ``table`` whose id (as text) is in ``ids`` committed, in epoch s by the server's
    clock (``pg_xact_commit_timestamp(xmin)``); None when the server does not record it
    (:func:`records_commit_times`)."""
    import psycopg

    if not records_commit_times(database):
        return None
    with psycopg.connect(database) as connection:
        rows = connection.execute(
            f"select id::text, extract(epoch from pg_xact_commit_timestamp(xmin)) from {table}"
            " where id::text = any(%s)",
            [ids],
        )
        return {pk: float(stamp) for pk, stamp in rows}
