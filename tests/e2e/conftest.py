"""Browser-test fixtures: Debian's Chromium under Playwright, getting ORM work off Playwright's loop, and a
host on loopback whose one operation needs the party's approval."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, expect, sync_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.models import Run
from parley import live
from tests.conftest import wait_until
from tests.loopback import LoopbackServer

# The browser `make test` made sure of (scripts/ensure-chromium): CHROMIUM, or chromium on the PATH.
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
WAIT = 60_000  # ms: the offline model asks within seconds; a loaded machine may be slow
T = TypeVar("T")


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Chromium for one test. Function-scoped: Playwright's sync API marks an event loop as
    running on this thread until it stops, which later async tests would trip over."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def wait_live(page: Page) -> None:
    expect(page.locator("body")).to_have_attribute("data-live", "connected")
    # A mark that only survives if the page is never reloaded.
    page.evaluate("window.notReloaded = true")


def not_reloaded(page: Page) -> bool:
    return bool(page.evaluate("window.notReloaded === true"))


def off_loop(fn: Callable[[], T]) -> T:
    """Call ``fn`` in a thread of its own and return its result.

    While Playwright runs, its event loop counts as running on the test's
    thread, and under a running loop Django refuses ORM calls and
    ``parley.live`` cannot publish (``async_to_sync``). The data is committed
    (transactional test), so every thread and process sees it.
    """

    def call() -> T:
        try:
            return fn()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def publish_run_updated(run: Run) -> None:
    """Tell the run's tenant that it changed (it did not): every open page of the tenant refreshes."""
    live.publish_on_commit(
        event="run.updated",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={"run": str(run.pk), "status": run.status},
    )


def wait_finished(run: Run) -> Run:
    def finished() -> Run | None:
        fresh = Run.across_tenants.get(pk=run.pk)
        return fresh if fresh.status not in Run.ACTIVE else None

    return off_loop(lambda: wait_until(finished, timeout=120, what="the run to finish"))


class OrderDesk(LoopbackServer):
    """A supplier's order desk on loopback: the host operation ``/place-order`` places the order it is
    given at once, and ``placed`` keeps the arguments of every order placed, in order."""

    what = "the order desk"

    def __init__(self) -> None:
        super().__init__()
        self.placed: list[dict[str, Any]] = []
        self.listen(Starlette(routes=[Route("/place-order", self.place_order, methods=["POST"])]))

    async def place_order(self, request: Request) -> JSONResponse:
        arguments = (await request.json())["arguments"]
        self.placed.append(arguments)
        return JSONResponse({"result": f"Order {arguments['order']} placed with {arguments['supplier']}."})


@pytest.fixture
def order_desk() -> Iterator[OrderDesk]:
    with OrderDesk() as desk:
        yield desk
