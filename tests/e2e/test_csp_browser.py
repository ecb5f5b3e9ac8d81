"""The dashboard under its content security policy in Debian's Chromium, on the live stack, with nothing
relaxed (no ``bypass_csp``): the live socket, htmx and our own scripts do their work and the policy
blocks nothing; and what it would block is seen.

The policy is django-csp's (``CONTENT_SECURITY_POLICY`` in parley/settings/base.py): scripts, styles and
connections of the page's own origin only, no inline script or style. htmx would add an inline
<style> for its indicators but for the ``htmx-config`` meta of templates/base.html.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.addresses import agent_url
from agents.models import Run
from agents.services import runs
from negotiations import demo
from negotiations.models import Negotiation, Settlement
from tests.conftest import LiveStack
from tests.e2e.conftest import WAIT, not_reloaded, off_loop, wait_finished, wait_live
from tests.e2e.pages import log_in, watch_csp
from tests.e2e.scenes import DEMO_ANSWER, DEMO_QUESTION

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def reported(page: Page) -> None:
    """Return once the page has reported what its policy blocked so far: a violation's event is a
    task queued when it happens, so it has run (and called out to the test) before a later task."""
    page.evaluate("() => new Promise((done) => setTimeout(done, 0))")


def test_the_dashboard_works_under_its_policy_and_the_policy_blocks_nothing(
    live_stack: LiveStack, browser: Browser
) -> None:
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    blocked = watch_csp(context)
    page = context.new_page()
    world = off_loop(demo.demo_seed)

    login = page.goto(f"{live_stack.url}/login/")
    assert login is not None
    assert "script-src 'self';" in login.headers["content-security-policy"] + ";"
    log_in(page, live_stack.url, "tomas", demo.TOMAS_PASSWORD)
    task = demo.demo_task([agent_url(a) for a in world.cfo_agents])
    run = off_loop(lambda: runs.run_start(agent=world.tomas_agent, intent=world.intent, task=task))

    # The question arrives over the socket (live.js fetches the region and hands it to htmx), and the
    # answer goes with htmx and swaps in place: no reload.
    expect(page.get_by_text(DEMO_QUESTION)).to_be_visible(timeout=WAIT)
    page.get_by_label("Your answer").fill(DEMO_ANSWER)
    page.get_by_role("button", name="Send answer").click()
    expect(page.get_by_role("status").filter(has_text="Answer sent. Your agent carries on.")).to_be_visible()
    expect(page.get_by_text(DEMO_QUESTION)).to_be_hidden()
    assert not_reloaded(page)

    # The run's page follows the run to its end live.
    page.goto(f"{live_stack.url}/t/acme/runs/{run.pk}/")
    wait_live(page)
    expect(page.locator("#main [data-status]")).to_have_text("Done", timeout=120_000)
    assert not_reloaded(page)
    assert wait_finished(run).status == Run.Status.DONE
    settled = off_loop(
        lambda: Negotiation.across_tenants.filter(
            agent=world.tomas_agent, settlement__outcome=Settlement.Outcome.AGREED
        ).first()
    )
    assert settled is not None
    for path, shows in [
        ("/t/acme/runs/", "newest first"),
        ("/t/acme/negotiations/", "Idris Haddad"),
        (f"/t/acme/negotiations/{settled.pk}/", "basis: reference"),  # the offers' chart (SVG)
    ]:
        page.goto(f"{live_stack.url}{path}")
        wait_live(page)
        expect(page.locator("main").get_by_text(shows).first).to_be_visible()

    # The operator's editor adds a row with forms.js.
    page.get_by_role("button", name="Log out tomas").click()
    log_in(page, live_stack.url, demo.OPERATOR_USERNAME, demo.OPERATOR_PASSWORD)
    page.goto(f"{live_stack.url}/t/acme/agents/{world.tomas_agent.pk}/edit/")
    rows = page.get_by_role("group", name=re.compile(r"^Term guard \d+ \(new\)$"))
    before = rows.count()
    page.get_by_role("button", name="Add a term guard").click()
    expect(rows).to_have_count(before + 1)

    reported(page)
    assert blocked == []
    context.close()


def test_what_the_policy_blocks_is_seen(live_stack: LiveStack, browser: Browser) -> None:
    """The watch of the test above can fail: an inline style attribute and an inline script on a
    dashboard page are blocked, and reported."""
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    blocked = watch_csp(context)
    page = context.new_page()
    page.goto(f"{live_stack.url}/login/")
    assert blocked == []

    page.evaluate(
        """() => {
            const main = document.querySelector("main");
            main.insertAdjacentHTML("beforeend", '<p id="styled" style="width: 600px">wide</p>');
            const script = document.createElement("script");
            script.textContent = "window.ranInline = true";
            main.append(script);
        }"""
    )

    reported(page)
    expect(page.locator("#styled")).not_to_have_css("width", "600px")
    assert page.evaluate("window.ranInline") is None
    events = [line for line in blocked if not line.startswith("console: ")]
    assert {line.split(": ", 1)[1].split(" ", 1)[0] for line in events} == {
        "style-src-attr",
        "script-src-elem",
    }
    context.close()


def test_the_api_documentation_page_works_under_its_own_wider_policy(
    live_stack: LiveStack, browser: Browser
) -> None:
    """Redoc renders the host API's schema and searches it: its inline styles and its blob: search
    worker are allowed there; Redocly's logo, from their CDN, is all the policy keeps out."""
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    blocked = watch_csp(context)
    page = context.new_page()

    page.goto(f"{live_stack.url}/api/v1/docs")
    expect(page.get_by_role("heading", name="Parley host API (1.0.0)")).to_be_visible(timeout=WAIT)
    page.get_by_placeholder("Search...").fill("webhook")
    results = page.locator('[data-role="search:results"]')
    expect(results.get_by_text("Make a webhook endpoint")).to_be_visible(timeout=WAIT)

    reported(page)
    events = [line for line in blocked if not line.startswith("console: ")]
    assert [line.split(" (", 1)[0] for line in events] == [
        "/api/v1/docs: img-src blocked https://cdn.redoc.ly/redoc/logo-mini.svg"
    ], blocked
    context.close()
