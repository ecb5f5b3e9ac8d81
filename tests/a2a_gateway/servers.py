"""Servers the operation tests run beside the live stack, all real and on loopback.

* :class:`HeldHook` — an agent's evaluation hook that holds every call until the test
  releases it: an inbound turn then runs, committed but unanswered, for as long as the
  test needs (to subscribe to it, or cancel it, mid-turn).
* :class:`PushReceiver` — a webhook that keeps the push notifications it is sent.
* :func:`web_process` — another uvicorn web process of ``parley.asgi`` on the live
  stack's database, with its own settings.
* :class:`InProcessGateway` — ``a2a_gateway.app.build_app()`` under uvicorn in this
  process, for a handler setting no environment variable reaches.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from a2a.types import AgentCard
from asgiref.sync import sync_to_async
from django.db import connections
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a_gateway.app import build_app
from parley import devstack
from tests.conftest import LiveStack, free_port, wait_web
from tests.loopback import LoopbackServer

# Seconds a held hook call waits for its release at most (the hook client gives up after 10).
HOLD_LIMIT = 30.0


class HeldHook(LoopbackServer):
    """An evaluation hook at :attr:`url` whose calls wait for :attr:`release`; :attr:`entered` is
    set by the first call, :attr:`answered` counts the calls answered. Each call answers
    ``{"artifact": {"seen": <n>}}``."""

    what = "the held evaluation hook"

    def __init__(self) -> None:
        super().__init__()
        self.url = f"{self.origin}/evaluate"
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[dict[str, Any]] = []
        self.answered = 0
        self.listen(Starlette(routes=[Route("/evaluate", self._evaluate, methods=["POST"])]))

    async def _evaluate(self, request: Request) -> Response:
        self.calls.append(await request.json())
        self.entered.set()
        await asyncio.to_thread(self.release.wait, HOLD_LIMIT)
        self.answered += 1
        return JSONResponse({"artifact": {"seen": len(self.calls)}})

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        super().__exit__(*exc)


class PushReceiver(LoopbackServer):
    """A webhook at :attr:`url`; :attr:`received` holds each POST's headers and JSON body, in order."""

    what = "the push receiver"

    def __init__(self) -> None:
        super().__init__()
        self.url = f"{self.origin}/push"
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.listen(Starlette(routes=[Route("/push", self._push, methods=["POST"])]))

    async def _push(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.json()))
        return Response(status_code=204)

    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, body in self.received]


@contextmanager
def web_process(live_stack: LiveStack, **settings: str) -> Iterator[str]:
    """Another web process on the live stack's database and Redis, with ``settings`` as environment
    variables; yields its origin (also its ``PUBLIC_BASE_URL``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**live_stack.env, "PUBLIC_BASE_URL": url, **settings}
    logs = devstack.ROOT / ".pytest_cache"
    logs.mkdir(exist_ok=True)
    with (logs / f"live-web-{port}.log").open("w") as log:
        process = devstack.start_web(port, env, log)

        try:
            wait_web(process, url, log.name)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


class InProcessGateway(LoopbackServer):
    """The gateway app (``build_app()``) at :attr:`origin`, served from this process.

    Built on entry, so a handler setting changed before then applies. On exit it
    waits for the server to stop and closes the database connection of asgiref's
    thread, which the gateway's ORM calls ran in (or the test database could not
    be dropped).
    """

    what = "the in-process gateway"

    def __init__(self) -> None:
        super().__init__()
        self.stopped = threading.Event()

    def _run(self) -> None:
        try:
            super()._run()
        finally:
            self.stopped.set()

    def __enter__(self) -> InProcessGateway:
        self.listen(build_app())
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.stopped.wait(HOLD_LIMIT)
        asyncio.run(sync_to_async(connections.close_all)())


def on_wire(card: AgentCard, wire: str) -> AgentCard:
    """``card`` with only its ``wire`` ("1.0" or "0.3") interface: a2a-sdk's client then speaks that
    version (at 0.3 through its compat transport: ``message/send``, ``tasks/get``, …)."""
    narrowed = AgentCard()
    narrowed.CopyFrom(card)
    del narrowed.supported_interfaces[:]
    narrowed.supported_interfaces.extend(i for i in card.supported_interfaces if i.protocol_version == wire)
    return narrowed
