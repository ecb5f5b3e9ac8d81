"""The party's dashboard in Debian's Chromium, on the live stack: questions arrive and leave live.

Chromium is driven through Playwright's sync API and logs in through the real
login form. The run is started in the test process, exactly as the host API
would; the web and worker processes of ``live_stack`` do the rest, and every
change reaches the open pages over the WebSocket, never by a reload.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.addresses import agent_url
from agents.models import Question, Run
from agents.services import runs
from negotiations import demo
from tests.conftest import LiveStack
from tests.e2e.conftest import WAIT, not_reloaded, off_loop, publish_run_updated, wait_finished, wait_live
from tests.e2e.pages import PHONE, fits, log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

QUESTION = "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
ANSWER = "Up to €1,100 a day."


def log_in_as_tomas(page: Page, base_url: str) -> None:
    """Log in as Tomas through the form; he lands on his inbox with the live socket connected."""
    log_in(page, base_url, "tomas", demo.TOMAS_PASSWORD)


def start_demo_run(world: demo.DemoWorld) -> Run:
    """Give Tomas's agent the demo task; its offline model asks for his limit within seconds."""
    urls = [agent_url(a) for a in world.cfo_agents]
    return runs.run_start(agent=world.tomas_agent, intent=world.intent, task=demo.demo_task(urls))


def test_a_question_arrives_live_and_the_answer_finishes_the_run(
    live_stack: LiveStack, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    world = off_loop(demo.demo_seed)
    log_in_as_tomas(page, live_stack.url)
    expect(page.get_by_text("No open questions.")).to_be_visible()

    run = off_loop(lambda: start_demo_run(world))

    expect(page.get_by_text(QUESTION)).to_be_visible(timeout=WAIT)
    expect(page.get_by_role("heading", name="Questions from your agents (1)")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("1 open question")
    assert not_reloaded(page)

    # What the party is typing survives a live refresh of the list, and so does the focus.
    field = page.get_by_label("Your answer")
    field.press_sequentially("Up to ")
    with page.expect_response(lambda r: r.url.endswith("/t/acme/?fragment=1")):
        off_loop(lambda: publish_run_updated(run))
    field.press_sequentially("€1,100 a day.")
    expect(field).to_have_value(ANSWER)
    expect(field).to_be_focused()
    page.get_by_role("button", name="Send answer").click()

    # Answered in place (htmx): the inbox says so and the question leaves it, without a reload.
    expect(page.get_by_role("status").filter(has_text="Answer sent. Your agent carries on.")).to_be_visible()
    expect(page.get_by_text(QUESTION)).to_be_hidden()
    assert not_reloaded(page)
    page.goto(f"{live_stack.url}/t/acme/runs/{run.pk}/")
    expect(page.locator("q", has_text=ANSWER)).to_be_visible()
    wait_live(page)
    expect(page.locator("#main [data-status]")).to_have_text("Done", timeout=120_000)
    # The announcer only speaks when a live refresh changed the region: the page saw the run finish.
    expect(page.locator("#live-status")).to_have_text("Run status: Done")
    assert not_reloaded(page)
    output = page.locator("pre.output")
    expect(output).to_contain_text("Settled (3):")
    for name in ("Idris Haddad", "Noor Lindqvist", "Priya Raman"):
        expect(output).to_contain_text(name)

    assert wait_finished(run).status == Run.Status.DONE
    question = off_loop(lambda: Question.across_tenants.select_related("answered_by").get(run=run))
    assert (question.answer, question.answered_by.get_username()) == (ANSWER, "tomas")


def test_answering_in_one_tab_removes_the_question_from_the_other(
    live_stack: LiveStack, browser: Browser
) -> None:
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    desk = context.new_page()
    world = off_loop(demo.demo_seed)
    log_in_as_tomas(desk, live_stack.url)
    phone = context.new_page()
    phone.set_viewport_size(PHONE)
    phone.goto(desk.url)
    wait_live(phone)

    run = off_loop(lambda: start_demo_run(world))

    for page in (desk, phone):
        expect(page.get_by_text(QUESTION)).to_be_visible(timeout=WAIT)
    assert fits(phone)

    desk.get_by_label("Your answer").fill(ANSWER)
    desk.get_by_role("button", name="Send answer").click()

    expect(phone.get_by_text(QUESTION)).to_be_hidden()
    expect(phone.get_by_text("No open questions.")).to_be_visible()
    expect(phone.locator("#live-status")).to_have_text("No open questions")
    assert not_reloaded(phone)
    assert fits(phone)
    # Let the run finish before the test's data is flushed under the worker.
    assert wait_finished(run).status == Run.Status.DONE
    phone.goto(f"{live_stack.url}/t/acme/runs/{run.pk}/")
    expect(phone.locator("pre.output")).to_contain_text("Settled (3):")
    assert fits(phone)
    context.close()
