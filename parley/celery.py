"""The Celery application and its queues: the one place worker wiring lives.

In the embedded default (no ``REDIS_URL``) the broker is ``memory://`` and
:func:`start_embedded_worker` serves it from a daemon thread of the current
process, so ``make demo`` needs nothing but Python.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from amqp.exceptions import AMQPError
from celery import Celery, Task, beat
from celery.exceptions import SecurityWarning
from celery.signals import worker_init, worker_process_shutdown
from django.db import connections, models, transaction
from django.utils import timezone
from kombu import Queue
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

from parley import outbound, telemetry
from parley.locks import SessionLock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "parley.settings.base")

logger = logging.getLogger(__name__)


class TaskQueue(enum.StrEnum):
    """Queue names, named in one place (docs/design.md#processes)."""

    AGENT = "agent"
    NEGOTIATION = "negotiation"
    EVENTS = "events"


# Seconds between two checks of a worker's idle pooled database connections (_pool_check_forever).
POOL_CHECK_SECONDS = 2.0
# The lock only one beat of a deployment holds; the others are standbys.
BEAT_LOCK = "parley:beat"
# Seconds a standby beat waits before it asks for the lock again.
BEAT_STANDBY_SECONDS = 5.0


class ScheduleFileScheduler(beat.PersistentScheduler):
    """Celery's scheduler that keeps its schedule in a file (``CELERY_BEAT_SCHEDULE_FILENAME``), which
    first makes the file's directory, and sends periodic tasks only while it holds :data:`BEAT_LOCK`.

    Where the directory cannot be made, beat stops at start-up with one line naming the setting
    (``SystemExit``), instead of the schedule library's traceback about a missing file.

    One beat per deployment sends the periodic tasks; a second one started by mistake, or as a
    standby, sends nothing. Each tick first asks :class:`parley.locks.SessionLock` (a Postgres
    advisory lock held by the active beat's session); a beat without it asks again every
    :data:`BEAT_STANDBY_SECONDS`, and takes over within that long once the active beat's session
    ends (it died, or Postgres restarted).
    """

    schedule_filename: str  # set by PersistentScheduler.__init__ (celery-types leaves it out)

    def setup_schedule(self) -> None:
        directory = Path(self.schedule_filename).parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SystemExit(
                f"CELERY_BEAT_SCHEDULE_FILENAME={self.schedule_filename}: cannot create its directory "
                f"{directory} ({exc.strerror}). Create it, writable by this user, or set another path."
            ) from None
        self.lock = SessionLock(BEAT_LOCK)
        super().setup_schedule()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Send what is due and return the seconds until the next tick, as Celery's scheduler does;
        without the lock, send nothing and return :data:`BEAT_STANDBY_SECONDS`."""
        if not self.lock.held():
            return BEAT_STANDBY_SECONDS
        return super().tick(*args, **kwargs)


app = Celery("parley")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = [Queue(q.value) for q in TaskQueue]
app.conf.task_default_queue = TaskQueue.AGENT.value
app.conf.beat_scheduler = f"{__name__}:{ScheduleFileScheduler.__name__}"
app.autodiscover_tasks()


@worker_init.connect
def _telemetry_setup(**_: object) -> None:
    # Once, in the worker's main process: forked pool children inherit the provider, and the SDK
    # restarts its export thread in each of them.
    telemetry.setup()


@worker_init.connect
def _pool_checks_start(**_: object) -> None:
    # A worker with DATABASE_POOL_SIZE: see _pool_check_forever.
    if connections["default"].settings_dict["OPTIONS"].get("pool"):
        threading.Thread(target=_pool_check_forever, name="pool-check", daemon=True).start()


def _pool_check_forever() -> None:
    """Every :data:`POOL_CHECK_SECONDS`, replace the idle pooled connections Postgres has dropped
    (psycopg_pool's ``check()``).

    The pool checks a connection only as it lends it, and after a failed check waits 1 s, then 2,
    4, 8… before the next (psycopg_pool 3.2.1, psycopg/psycopg#709). After a Postgres restart every
    idle connection is dead, so a task behind six of them waited more than the pool's 30 s and
    failed. psycopg's documentation suggests calling ``check()`` when connections may have been
    lost; done here, a dropped pool is replaced within seconds.
    """
    pool = connections["default"].pool  # type: ignore[attr-defined]  # the postgresql backend's
    while True:
        time.sleep(POOL_CHECK_SECONDS)
        if pool.closed:  # opened at the first task's connection
            continue
        try:
            pool.check()
        except Exception:  # the next check tries again; a task's own connection check still applies
            logger.warning("could not check the database connection pool", exc_info=True)


@worker_process_shutdown.connect
def _telemetry_flush(**_: object) -> None:
    # A pool child may end without running atexit handlers, and so without the SDK's flush.
    telemetry.shutdown()


@worker_process_shutdown.connect
def _close_outbound(**_: object) -> None:
    # The kept-alive connections to model endpoints and host operations (parley.outbound).
    outbound.close_shared_client()


# What a broker that cannot be reached raises: kombu's OperationalError once its publish retries are
# spent, or a connection error it did not wrap. Anything else (a task given the wrong arguments) is
# a bug, and is raised.
BROKER_ERRORS = (KombuError, AMQPError, OSError, RedisError)
# Items of one kind a sweep of stalled work sends again at most, stalled longest first; the rest wait
# for the next sweep.
SWEEP_BATCH = 500
# What a sweep finds: a task's arguments, the swept row's pk first.
Found = TypeVar("Found", bound=tuple[Any, ...])


def enqueue(task: Task[Any, Any], *args: Any, countdown: float = 0.0) -> bool:
    """Send ``task(*args)`` to the broker now, to run after ``countdown`` seconds; whether the
    broker took it.

    A broker that cannot be reached (:data:`BROKER_ERRORS`; Redis refusing connections gives up
    within a second) is logged, never raised: the work is in Postgres, and the periodic sweeps
    (``SWEEP_INTERVAL``, docs/settings.md) send it again once it has not moved for
    ``SWEEP_STALLED_AFTER`` seconds. Anything else ``apply_async`` raises is raised.
    """
    try:
        task.apply_async(args, countdown=countdown)
    except BROKER_ERRORS:
        logger.warning(
            "the broker did not take %s%r; the sweep sends it again", task.name, args, exc_info=True
        )
        return False
    return True


def enqueue_each(task: Task[Any, Any], items: Iterable[tuple[Any, ...]]) -> list[Any]:
    """:func:`enqueue` ``task(*args)`` for each ``args`` of ``items``, in order, stopping at the first
    the broker refuses (it is down: the rest would wait on it too); the first argument of each sent."""
    sent = []
    for args in items:
        if not enqueue(task, *args):
            break
        sent.append(args[0])
    return sent


def stalled_resend(
    *,
    find: Callable[[datetime], list[Found]],
    task: Task[Any, Any],
    model: type[models.Model],
    what: str,
) -> list[Found]:
    """One sweep of lost work of one kind (Celery beat, every ``SWEEP_INTERVAL`` seconds): send
    ``task(*args)`` again for each ``args`` that ``find(before)`` returns — work of ``model`` (its
    pk first in ``args``) that has not moved since ``before``, ``SWEEP_STALLED_AFTER`` seconds ago,
    its rows locked with ``SKIP LOCKED`` so two sweeps never take the same — and stamp each sent
    row's ``updated_at``, so the next sweep waits another bound before sending it again.

    A broker still down refuses the first and the rest are not tried (:func:`enqueue_each`);
    nothing unsent is stamped, so the next sweep tries it again. The send happens inside the
    transaction that holds the rows: a task that starts before it commits waits on those locks,
    and one sent for a stamp that then rolls back does nothing the second time (every swept task
    is applied once). Returns what ``find`` found; ``what`` names it in the log.
    """
    from django.conf import settings

    now = timezone.now()
    with transaction.atomic():
        found = find(now - timedelta(seconds=settings.SWEEP_STALLED_AFTER))
        sent = enqueue_each(task, found)
        model._default_manager.filter(pk__in=sent).update(updated_at=now)
    if found:
        logger.warning(
            "the sweep found %d %s whose message was lost, and sent %d again", len(found), what, len(sent)
        )
    return found


def enqueue_on_commit(task: Task[Any, Any], *args: Any, countdown: float = 0.0) -> None:
    """:func:`enqueue` ``task(*args)`` once the current transaction commits (at once outside one).

    How every service hands work to a worker: what committed stands whatever the broker does, so a
    request whose write committed answers success, and a broker that is down delays the work
    until the sweep finds it.
    """
    transaction.on_commit(partial(enqueue, task, *args, countdown=countdown))


_embedded_lock = threading.Lock()
_embedded_started = False


def start_embedded_worker() -> None:
    """Start a thread-pool worker, and beat for the periodic tasks, inside this process, once.

    Only meaningful on the in-memory broker: a worker in another process could
    not see it. Raises ``RuntimeError`` when the broker is anything else.
    """
    global _embedded_started
    from django.conf import settings

    if not settings.EMBEDDED:
        raise RuntimeError("The embedded worker serves only the in-memory broker (REDIS_URL unset).")
    with _embedded_lock:
        if _embedded_started:
            return
        threading.Thread(target=_run_embedded_worker, name="parley-embedded-worker", daemon=True).start()
        # Beat in a thread of this process, with its schedule in memory: a beat process could
        # not reach the in-memory broker.
        service = beat.EmbeddedService(app, thread=True, scheduler_cls="celery.beat:Scheduler")
        service.start()  # type: ignore[union-attr]  # thread=True returns the threaded service
        _embedded_started = True


def _run_embedded_worker() -> None:
    """Build and run the worker in its own thread: its start-up touches the database, which
    Django forbids from the event loop that calls :func:`start_embedded_worker`."""
    from django.conf import settings

    # Running as root is the norm in containers; the worker's warning about it is noise here.
    warnings.filterwarnings("ignore", category=SecurityWarning)
    app.Worker(
        hostname="embedded@parley",
        quiet=True,
        pool="threads",
        concurrency=settings.PARLEY_EMBEDDED_WORKER_THREADS,
        queues=[q.value for q in TaskQueue],
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        # The host process owns stdout and logging; the worker must not take them over.
        redirect_stdouts=False,
        hijack_root_logger=False,
    ).start()
