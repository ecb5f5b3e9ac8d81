"""The party's whole flow by keyboard alone in Debian's Chromium, on the live stack: log in, reach the
question, answer it; wherever the focus is, it can be seen."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.models import Agent, Intent, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES, NO_COUNTERPARTIES
from agents.services import run_start
from tests.conftest import PASSWORD, LiveStack, wait_until
from tests.e2e.conftest import WAIT, off_loop, wait_finished, wait_live
from tests.e2e.pages import focus_shown, tab_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

ANSWER = "Nobody yet: find some first."


def test_a_question_answered_by_keyboard_alone_with_the_focus_always_visible(
    live_stack: LiveStack, agent: Agent, intent: Intent, principal: AbstractUser, browser: Browser
) -> None:
    run = off_loop(lambda: run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    off_loop(
        lambda: wait_until(lambda: Question.objects.filter(run=run).exists(), timeout=60, what="the question")
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
    answered = off_loop(lambda: Question.objects.get(run=run))
    assert answered.answer == ANSWER
