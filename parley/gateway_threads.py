"""The threads on which the gateways' database work runs: ``GATEWAY_THREADS`` of them per web process.

The A2A and MCP gateways are ASGI apps outside Django's request cycle. Their
ORM calls (Django's async ORM, and ``sync_to_async`` in its default,
thread-sensitive mode) would all go to asgiref's one shared thread, so the
statements of every request at once ran one after another: with 20 inbound
messages at once, each waiting on Postgres and then on the GIL in turn, the
gateway's work before and after the model calls stretched a 1 s model call to
2 to 4 s (bench/inbound.py). :class:`GatewayThreads` gives each gateway request
one of a fixed set of threads (a *lane*, the one with the least work waiting)
for all its thread-sensitive calls, so a request's calls still run in order
on one thread and one connection, while requests at once use several.

Each lane keeps its database connection between requests, as the shared thread
did (:func:`mend`, before each request, replaces one that is dead): a web
process holds at most ``GATEWAY_THREADS`` such connections, however many
requests come (docs/settings.md says how to count them against Postgres's
``max_connections``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import connections
from starlette.types import ASGIApp, Receive, Scope, Send


class Lane(ThreadPoolExecutor):
    """One thread, counting the calls given to it that have not finished (``waiting``)."""

    def __init__(self, name: str) -> None:
        super().__init__(max_workers=1, thread_name_prefix=name)
        self._count_lock = threading.Lock()
        self.waiting = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """ThreadPoolExecutor's ``submit``, counted in ``waiting`` until the call ends."""
        with self._count_lock:
            self.waiting += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._ended()
            raise
        future.add_done_callback(lambda _: self._ended())
        return future

    def _ended(self) -> None:
        with self._count_lock:
            self.waiting -= 1


@functools.cache
def lanes() -> tuple[Lane, ...]:
    """This process's ``settings.GATEWAY_THREADS`` lanes (made on first use; at least one)."""
    return tuple(Lane(f"gateway-{i}") for i in range(max(1, settings.GATEWAY_THREADS)))


def mend() -> None:
    """Close this thread's database connection if it can no longer be used, so that the request's
    first query opens a new one.

    A lane's connection outlives requests, so after a Postgres restart or failover (or
    ``pg_terminate_backend``) it is dead without having failed yet: only a query tells. So it is
    pinged (``is_usable``: ``SELECT 1``), as Django's ``CONN_HEALTH_CHECKS`` pings a persistent
    connection before a request's first query; checking only a connection that had already failed
    left the first request on each lane answered 500 (tests/parley/test_process_faults.py)."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.is_usable():
            connection.close()


class GatewayThreads:
    """ASGI middleware: the request's thread-sensitive calls, and tasks it starts, run on one lane.

    The lane is the one with the fewest calls waiting when the request arrives;
    its connection is mended first (:func:`mend`).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lane = min(lanes(), key=lambda lane: lane.waiting)
        # Entered, never exited: a2a-sdk's tasks started by this request (the agent's turn, the
        # event consumer, push sends) outlive it, and their calls must stay on this lane, where
        # leaving the context would make them raise. The context goes when the last task holding
        # it ends (asgiref keeps it in a weak mapping); this request's own task ends with it.
        await ThreadSensitiveContext(executor=lane).__aenter__()
        await sync_to_async(mend)()
        await self.app(scope, receive, send)
