"""Browser-test fixtures: Debian's Chromium under Playwright, and getting ORM work off Playwright's loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, expect, sync_playwright

from agents.models import Run
from parley import live
from tests.conftest import wait_until

CHROMIUM = "/usr/bin/chromium"
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
        event="run.updated", tenant_id=run.tenant_id, payload={"run": str(run.pk), "status": run.status}
    )


def wait_finished(run: Run) -> Run:
    def finished() -> Run | None:
        fresh = Run.objects.get(pk=run.pk)
        return fresh if fresh.status not in Run.ACTIVE else None

    return off_loop(lambda: wait_until(finished, timeout=120, what="the run to finish"))
