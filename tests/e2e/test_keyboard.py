"""The party's whole flow by keyboard alone in Debian's Chromium, on the live stack: log in, reach the
question, answer it; wherever the focus is, it can be seen."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.models import Agent, Intent, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES, NO_COUNTERPARTIES
from agents.services import runs
from tests.conftest import PASSWORD, LiveStack, wait_until
from tests.e2e.conftest import WAIT, off_loop, publish_run_updated, wait_finished, wait_live
from tests.e2e.pages import focus_shown, log_in, tab_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

ANSWER = "Nobody yet: find some first."


def test_a_question_answered_by_keyboard_alone_with_the_focus_always_visible(
    live_stack: LiveStack, agent: Agent, intent: Intent, principal: AbstractUser, browser: Browser
) -> None:
    run = off_loop(lambda: runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    off_loop(
        lambda: wait_until(
            lambda: Question.across_tenants.filter(run=run).exists(), timeout=60, what="the question"
        )
    )
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    page.goto(f"{live_stack.url}/login/")

    # The login form starts in its first field.
    expect(page.get_by_label("Username")).to_be_focused()
    assert focus_shown(page)
    page.keyboard.type(principal.get_username())
    page.keyboard.press("Tab")
    expect(page.get_by_label("Password")).to_be_focused()
    assert focus_shown(page)
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Acme Robotics", level=1)).to_be_visible()
    wait_live(page)
    expect(page.get_by_text(ASK_FOR_COUNTERPARTIES, exact=True)).to_be_visible()

    # The first stop is the skip link, shown when focused; it jumps past the navigation.
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    assert focus_shown(page)
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()

    field = page.get_by_label("Your answer")
    tab_to(page, field)
    expect(field).to_be_focused()
    assert focus_shown(page)
    page.keyboard.type(ANSWER)
    page.keyboard.press("Tab")
    send = page.get_by_role("button", name="Send answer")
    expect(send).to_be_focused()
    assert focus_shown(page)
    page.keyboard.press("Enter")

    expect(page.get_by_role("status").filter(has_text="Answer sent. Your agent carries on.")).to_be_visible()
    expect(page.get_by_text(ASK_FOR_COUNTERPARTIES, exact=True)).to_be_hidden()
    finished = wait_finished(run)
    assert (finished.status, finished.output) == (Run.Status.DONE, NO_COUNTERPARTIES)
    answered = off_loop(lambda: Question.across_tenants.get(run=run))
    assert answered.answer == ANSWER


def test_a_live_refresh_leaves_the_focus_where_it_was(
    live_stack: LiveStack, agent: Agent, intent: Intent, principal: AbstractUser, browser: Browser
) -> None:
    """A region the live socket re-renders takes the focus from an element it replaces to that
    element's fresh copy: a keyboard user is never sent back to the top of the page."""
    run = off_loop(lambda: runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    off_loop(
        lambda: wait_until(
            lambda: Question.across_tenants.filter(run=run).exists(), timeout=60, what="the question"
        )
    )
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, principal.get_username(), PASSWORD)
    page.goto(f"{live_stack.url}/t/acme/runs/{run.pk}/")
    wait_live(page)
    # A link of the run's region that no data-key keeps across a refresh; the region is marked so
    # that the fresh copy differs from it and replaces it.
    link = page.locator('[data-live="run"] a[href]').first
    href = link.get_attribute("href")
    link.focus()
    page.evaluate("document.querySelector('[data-live=\"run\"]').dataset.stale = 'yes'")

    with page.expect_response(lambda r: "fragment=1" in r.url):
        off_loop(lambda: publish_run_updated(run))

    expect(page.locator('[data-live="run"][data-stale]')).to_have_count(0)  # the region was replaced
    expect(page.locator(f'[data-live="run"] a[href="{href}"]').first).to_be_focused()
