"""Health checks, one per process kind, for load balancers and container orchestrators.

* web — ``GET /health``: 200 ``{"process": "web", "status": "ok", "database": "ok"}``
  when the process can query Postgres, else 503 with ``"status": "failing"`` and
  the database's error in ``"database"``. It is a Django view, so the probe's
  Host header must be one of ``ALLOWED_HOSTS`` (send it explicitly when probing
  a pod's IP).
* worker — ``python -m parley.health worker [--name celery@host] [--timeout 2]``
  exits 0 when the named Celery worker (default: the one named after this
  machine, ``celery@<hostname>``, Celery's own default) answers a ping over the
  broker and the database answers from here, 1 otherwise; it prints the same
  JSON shape with ``"process": "worker"``. Run it where the worker runs (a
  container's HEALTHCHECK). The ping is Celery's remote control
  (``celery -A parley inspect ping`` does the same), answered by the worker's
  consumer, so it proves the worker is connected to the broker and taking
  messages; no result backend is needed. The embedded default has no broker
  another process could reach: its worker is a thread of the web process.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe
from kombu.exceptions import OperationalError

from parley.celery import app

OK = "ok"


def database_check() -> str:
    """``"ok"`` when a query reaches the database, else the error, in one line."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return OK


@require_safe
def health(request: HttpRequest) -> JsonResponse:
    """The web process's health: 200 while it can reach the database, else 503 (see the module)."""
    report = _report("web", database=database_check())
    return JsonResponse(report, status=200 if report["status"] == OK else 503)


def worker_check(*, name: str, timeout: float) -> str:
    """``"ok"`` when the Celery worker ``name`` answers a remote-control ping within ``timeout``
    seconds, else why not, in one line."""
    with app.connection_for_write() as broker:
        try:
            # Once, not Celery's default of retrying for as long as it takes.
            broker.ensure_connection(max_retries=1)
            replies = app.control.ping(destination=[name], timeout=timeout, connection=broker)
        except OperationalError as exc:
            return f"the broker cannot be reached: {exc}"
    if any(name in reply for reply in replies or []):
        return OK
    return f"{name} did not answer within {timeout:g} s"


def _report(process: str, **checks: str) -> dict[str, Any]:
    status = OK if all(value == OK for value in checks.values()) else "failing"
    return {"process": process, "status": status, **checks}


def main(argv: list[str] | None = None) -> int:
    """``python -m parley.health worker``: the worker's health check (see the module); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m parley.health", description=__doc__)
    parser.add_argument("process", choices=["worker"])
    parser.add_argument("--name", default=f"celery@{socket.gethostname()}", help="the worker's node name")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for its answer")
    arguments = parser.parse_args(argv)

    import django
    from django.conf import settings

    django.setup()
    if settings.EMBEDDED:
        print("The embedded worker runs inside the web process: check GET /health.", file=sys.stderr)
        return 1
    report = _report(
        "worker",
        worker=worker_check(name=arguments.name, timeout=arguments.timeout),
        database=database_check(),
    )
    print(json.dumps(report))
    return 0 if report["status"] == OK else 1


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "parley.settings.base")
    sys.exit(main())
