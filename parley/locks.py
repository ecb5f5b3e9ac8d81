"""Work that must not run twice at once, whoever asks for it twice.

A task's message can come twice: the sweep of lost work sends one again while the first still
waits in a busy queue, or the broker hands out again one whose worker it took for dead. Most
tasks do nothing the second time (they check what is done under a row lock); work that talks to
another party for minutes without holding a row lock — a negotiation's pump, an Agent Exchange
send — runs inside :func:`alone` instead, and a second copy that finds it running does nothing.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection

logger = logging.getLogger(__name__)

# The embedded default's names held by this process (one process: its worker is a thread pool).
_held: set[str] = set()
_held_lock = threading.Lock()


def advisory_key(name: str) -> int:
    """A Postgres advisory lock key (a signed 64-bit integer) for ``name``."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


def shared() -> bool:
    """Whether locks here span processes: on Postgres, yes; on other databases (the embedded
    default's SQLite, one process) they are this process's."""
    return connection.vendor == "postgresql"


def try_take(name: str) -> bool:
    """Take the lock ``name`` if nobody holds it; whether this caller now holds it.

    On Postgres a session advisory lock (``pg_try_advisory_lock`` on :func:`advisory_key`) on this
    thread's connection: it spans processes, and Postgres frees it when the connection ends, so a
    process that dies holding it leaks nothing. It needs the connection to stay the same session
    until :func:`give_back` (no transaction-mode connection pooler in between), and that session
    may take it again while it holds it: callers must not take a name twice from one thread. On
    other databases (the embedded default's SQLite, one process) a lock of this process.
    """
    if not shared():
        with _held_lock:
            if name in _held:
                return False
            _held.add(name)
            return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [advisory_key(name)])
        return bool(cursor.fetchone()[0])


def give_back(name: str) -> None:
    """Release the lock ``name`` that :func:`try_take` took, on the same thread. A Postgres
    connection that is gone took the lock with it: that is logged, not raised."""
    if not shared():
        with _held_lock:
            _held.discard(name)
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [advisory_key(name)])
    except DatabaseError:
        logger.warning("could not release %s: its connection is gone", name, exc_info=True)


@contextmanager
def alone(name: str) -> Iterator[bool]:
    """Hold ``name`` for the ``with`` block, if nobody holds it: yields True when this caller holds
    it, False when another holds it (the caller should then do nothing). :func:`try_take` and
    :func:`give_back`; do not nest two of the same name.
    """
    held = try_take(name)
    try:
        yield held
    finally:
        if held:
            give_back(name)


class SessionLock:
    """A lock held by one process for as long as its Postgres session lasts: which of several
    processes doing the same job is the active one (beat: :class:`parley.celery.ScheduleFileScheduler`).

    :meth:`held` takes a session advisory lock (``pg_try_advisory_lock``) on this thread's database
    connection when it is free, and then keeps it. Postgres frees it when the session ends: the
    process died, or Postgres restarted. A call that finds the session gone (the connection fails, or
    another backend answers) closes the connection and answers False; the next call reconnects and
    tries again, so after a Postgres restart one process takes the lock back. On other databases
    (the embedded default's SQLite, one process) it is always held.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.key = advisory_key(name)
        # The backend that took the lock: a connection to another backend holds nothing.
        self._backend: int | None = None

    def held(self) -> bool:
        """Whether this process holds the lock now, taking it if it is free."""
        if not shared():
            return True
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend = cursor.fetchone()[0]
                if backend != self._backend:
                    cursor.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                    self._backend = backend if cursor.fetchone()[0] else None
                    if self._backend is not None:
                        logger.info("took %s", self.name)
        except DatabaseError:
            logger.warning("lost %s with its database connection; trying again", self.name, exc_info=True)
            connection.close()
            self._backend = None
        return self._backend is not None


def holder_exists(name: str) -> bool:
    """Whether anyone holds the lock ``name`` now (:func:`try_take`, :class:`SessionLock`).

    On Postgres, any session, from ``pg_locks``: a bigint key shows as its high half in
    ``classid`` and its low half in ``objid``, with ``objsubid`` 1 (PostgreSQL documentation,
    "pg_locks"). On other databases, this process (:func:`try_take`'s own locks).
    """
    if not shared():
        with _held_lock:
            return name in _held
    key = advisory_key(name) & 0xFFFF_FFFF_FFFF_FFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 1)",
            [key >> 32, key & 0xFFFF_FFFF],
        )
        return bool(cursor.fetchone()[0])
