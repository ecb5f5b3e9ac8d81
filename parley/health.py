"""Health checks, one per process kind, for load balancers and container orchestrators.

* web — ``GET /health``: 200 ``{"process": "web", "status": "ok", "database": "ok"}``
  when the process can query Postgres, else 503 with ``"status": "failing"`` and
  the database's error in ``"database"``. It is a Django view, so the probe's
  Host header must be one of ``ALLOWED_HOSTS`` (send it explicitly when probing
  a pod's IP). ``python -m parley.health web [--timeout 2]`` asks it of the web
  process on this machine (``WEB_PORT``, as :mod:`parley.processes` serves it),
  with the first of ``ALLOWED_HOSTS`` as its Host: a container's HEALTHCHECK.
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
* beat — ``python -m parley.health beat`` exits 0 when some beat of the deployment
  holds the beat lock (:data:`parley.celery.BEAT_LOCK`, seen in Postgres's
  ``pg_locks``: so it sends the periodic tasks) and the broker answers; a standby
  beat is healthy while the active one is. On Postgres only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

import httpx
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe
from kombu.exceptions import OperationalError

from parley.celery import app
from parley.locks import holder_exists

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


def web_check(*, port: str, host: str, timeout: float) -> str:
    """``"ok"`` when ``GET /health`` on 127.0.0.1:``port`` with Host ``host`` answers 200, else
    what it answered, in one line."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/health", headers={"Host": host}, timeout=timeout)
    except httpx.HTTPError as exc:
        return f"the web process does not answer: {type(exc).__name__}: {exc}".splitlines()[0]
    if response.status_code != 200:
        return f"GET /health answered {response.status_code}: {response.text[:200]}".splitlines()[0]
    return OK


def beat_check() -> str:
    """``"ok"`` when some session holds the beat lock, else that none does."""
    from parley.celery import BEAT_LOCK

    try:
        held = holder_exists(BEAT_LOCK)
    except DatabaseError as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return OK if held else "no beat holds the beat lock: none is sending the periodic tasks"


def broker_check() -> str:
    """``"ok"`` when the broker takes a connection, else why not, in one line."""
    with app.connection_for_write() as broker:
        try:
            broker.ensure_connection(max_retries=1)
        except OperationalError as exc:
            return f"the broker cannot be reached: {exc}"
    return OK


def _report(process: str, **checks: str) -> dict[str, Any]:
    status = OK if all(value == OK for value in checks.values()) else "failing"
    return {"process": process, "status": status, **checks}


def main(argv: list[str] | None = None) -> int:
    """``python -m parley.health web|worker|beat``: a process's health check (see the module); the
    exit status."""
    parser = argparse.ArgumentParser(prog="python -m parley.health", description=__doc__)
    parser.add_argument("process", choices=["web", "worker", "beat"])
    parser.add_argument("--name", default=f"celery@{socket.gethostname()}", help="the worker's node name")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for its answer")
    arguments = parser.parse_args(argv)

    import django
    from django.conf import settings

    django.setup()
    if arguments.process == "web":
        # A pattern of ALLOWED_HOSTS (".example.com", "*") stands for a name it matches.
        host = (settings.ALLOWED_HOSTS or ["localhost"])[0].lstrip(".").replace("*", "localhost")
        port = os.environ.get("WEB_PORT", "8000")
        checks = {"web": web_check(port=port, host=host, timeout=arguments.timeout)}
    elif settings.EMBEDDED:
        print("The embedded worker and beat run inside the web process: check GET /health.", file=sys.stderr)
        return 1
    elif arguments.process == "worker":
        checks = {
            "worker": worker_check(name=arguments.name, timeout=arguments.timeout),
            "database": database_check(),
        }
    else:
        checks = {"beat": beat_check(), "broker": broker_check()}
    report = _report(arguments.process, **checks)
    print(json.dumps(report))
    return 0 if report["status"] == OK else 1


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "parley.settings.base")
    sys.exit(main())
