"""An operator configures an agent in Debian's Chromium, on the live stack, and previews what changed.

The previews are built by the web process from what the editor saved: the
system message a run would get, and the AgentCard as counterparties fetch it.
Term guards and guardrails are edited row by row, with and without JavaScript;
a form too large to send is refused in the browser (with JavaScript) or
answered with the form and a message (without).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, Page, expect

from agents.models import Agent, Intent
from tests.conftest import PASSWORD, LiveStack
from tests.e2e.conftest import WAIT, off_loop
from tests.e2e.pages import log_in, tab_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

NEW_PROMPT = "Act for Tomas Berg. Never agree to more than two days a month without asking him."


def open_editor(page: Page, agent: Agent) -> None:
    """From the agents list, the editor of ``agent`` (its "Edit" link names the agent)."""
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    page.get_by_role("link", name=f"Edit {agent.name}").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Edit {agent.name}")


def save(page: Page, name: str) -> None:
    """Save the editor; it lands on the agent's page saying so."""
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("status").filter(has_text=f"Saved {name}.")).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_contain_text(name)


def previewed_card(page: Page) -> dict[str, Any]:
    """The AgentCard shown on the card preview page the browser is on."""
    card: dict[str, Any] = json.loads(page.locator("#card-json").inner_text())
    return card


def test_a_changed_system_prompt_shows_in_the_system_message_preview(
    live_stack: LiveStack, agent: Agent, intent: Intent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    page.goto(f"{live_stack.url}/t/acme/agents/{agent.pk}/system-message/")
    message = page.locator("pre.system-message")
    expect(message).to_contain_text(agent.system_prompt)
    open_editor(page, agent)
    prompt = page.get_by_label("System prompt:", exact=True)
    expect(prompt).to_have_value(agent.system_prompt)

    prompt.fill(NEW_PROMPT)
    save(page, agent.name)

    page.get_by_role("link", name="Preview its system message").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"System message of {agent.name}")
    expect(page.get_by_role("heading", level=2)).to_contain_text(intent.statement)
    expect(message).to_contain_text(NEW_PROMPT)
    expect(message).not_to_contain_text(agent.system_prompt)


def test_the_card_preview_follows_the_name_and_description_and_is_what_counterparties_fetch(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    page.goto(f"{live_stack.url}/t/acme/agents/{agent.pk}/card/")
    before = previewed_card(page)
    assert before["name"] == "Tomas's agent"

    open_editor(page, agent)
    identity = page.get_by_role("group", name="Identity")
    identity.get_by_label("Name:", exact=True).fill("Tomas Berg's agent")
    identity.get_by_label("Description:", exact=True).fill("Hires for Acme Robotics on Tomas Berg's behalf.")
    save(page, "Tomas Berg's agent")
    page.get_by_role("link", name="Card preview").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("AgentCard of Tomas Berg's agent")
    after = previewed_card(page)
    assert (after["name"], after["description"]) == (
        "Tomas Berg's agent",
        "Hires for Acme Robotics on Tomas Berg's behalf.",
    )
    assert {k: v for k, v in after.items() if k not in ("name", "description")} == {
        k: v for k, v in before.items() if k not in ("name", "description")
    }
    # The public endpoint serves the same card (signatures, when there are any, differ per fetch).
    fetched = page.request.get(page.locator("#card-url").get_attribute("href") or "")
    assert fetched.status == 200
    served = fetched.json()
    assert {k: v for k, v in served.items() if k != "signatures"} == {
        k: v for k, v in after.items() if k != "signatures"
    }


def stored(agent: Agent) -> Agent:
    return off_loop(lambda: Agent.across_tenants.get(pk=agent.pk))


def test_term_guards_and_guardrails_are_edited_row_by_row_and_a_bad_pattern_is_shown_at_its_row(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    open_editor(page, agent)
    guards = page.get_by_role("group", name="Term guards", exact=True)
    first = guards.get_by_role("group", name="Term guard 1 (new)")
    first.get_by_label("Term:", exact=True).fill("amount")
    first.get_by_label("Operator:").select_option("<=")
    first.get_by_label("Value:", exact=True).fill("1200")
    first.get_by_label("Currency:").fill("EUR")
    # Two blank rows are there; a third is added from the keyboard, its first cell focused.
    add = guards.get_by_role("button", name="Add a term guard")
    guards.get_by_role("group", name="Term guard 2 (new)").get_by_label("Delete:").focus()
    tab_to(page, add)
    page.keyboard.press("Enter")
    third = guards.get_by_role("group", name="Term guard 3 (new)")
    expect(third.get_by_label("Term:", exact=True)).to_be_focused()
    page.keyboard.type("currency")
    page.keyboard.press("Tab")
    expect(third.get_by_label("Operator:")).to_be_focused()
    third.get_by_label("Operator:").select_option("in")
    third.get_by_label("Value:", exact=True).fill("EUR, USD")
    rails = page.get_by_role("group", name="Guardrails", exact=True)
    rail = rails.get_by_role("group", name="Guardrail 1 (new)")
    rail.get_by_label("Name:", exact=True).fill("no-order-ids")
    rail.get_by_label("Stage:").select_option("output")
    rail.get_by_label("Action:").select_option("block")
    rail.get_by_label("Match:").select_option("regex")
    rail.get_by_label("Pattern:").fill("(ORD-")

    page.get_by_role("button", name="Save changes").click()

    expect(page.get_by_role("alert")).to_contain_text("Not saved: correct the fields marked below.")
    rail = page.get_by_role("group", name="Guardrails", exact=True).get_by_role(
        "group", name="Guardrail 1 (new)"
    )
    pattern = rail.get_by_label("Pattern:")
    expect(pattern).to_have_attribute("aria-invalid", "true")
    expect(rail).to_contain_text(
        "Pattern: does not compile (missing ), unterminated subpattern at position 0)."
    )
    expect(
        page.get_by_role("group", name="Term guard 3 (new)").get_by_label("Value:", exact=True)
    ).to_have_value("EUR, USD")
    assert stored(agent).guardrails == []

    pattern.fill(r"ORD-\d+")
    save(page, agent.name)

    saved = stored(agent)
    assert saved.term_guards == [
        {"term": "amount", "op": "<=", "value": 1200, "currency": "EUR"},
        {"term": "currency", "op": "in", "value": ["EUR", "USD"]},
    ]
    assert saved.guardrails == [
        {
            "name": "no-order-ids",
            "stage": "output",
            "action": "block",
            "match": "regex",
            "pattern": r"ORD-\d+",
        }
    ]
    open_editor(page, agent)
    expect(
        page.get_by_role("group", name="Term guard 2", exact=True).get_by_label("Value:", exact=True)
    ).to_have_value("EUR, USD")


def test_the_last_term_guard_and_guardrail_are_deleted(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    agent.term_guards = [{"term": "amount", "op": "<=", "value": 1200}]
    agent.guardrails = [{"name": "no-email", "stage": "output", "action": "redact", "match": "email"}]
    off_loop(agent.save)
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    open_editor(page, agent)
    guards = page.get_by_role("group", name="Term guards", exact=True)
    guards.get_by_role("group", name="Term guard 1", exact=True).get_by_label("Delete:").check()
    rails = page.get_by_role("group", name="Guardrails", exact=True)
    rails.get_by_role("group", name="Guardrail 1", exact=True).get_by_label("Delete:").check()

    save(page, agent.name)

    saved = stored(agent)
    assert (saved.term_guards, saved.guardrails) == ([], [])
    open_editor(page, agent)
    expect(guards.get_by_role("group", name="Term guard 1 (new)")).to_be_visible()
    expect(guards.get_by_role("group", name="Term guard 1", exact=True)).to_have_count(0)
    expect(rails.get_by_role("group", name="Guardrail 1", exact=True)).to_have_count(0)


def without_javascript(browser: Browser, page: Page) -> Page:
    """A page of a new context with ``page``'s session and JavaScript off."""
    context = browser.new_context(storage_state=page.context.storage_state(), java_script_enabled=False)
    quiet = context.new_page()
    quiet.set_default_timeout(WAIT)
    return quiet


def test_without_javascript_a_guard_is_added_in_a_blank_row(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    page = without_javascript(browser, page)
    page.goto(f"{live_stack.url}/t/acme/agents/{agent.pk}/edit/")
    guards = page.get_by_role("group", name="Term guards", exact=True)
    expect(guards.get_by_role("button", name="Add a term guard")).to_be_hidden()
    row = guards.get_by_role("group", name="Term guard 2 (new)")
    row.get_by_label("Term:", exact=True).fill("amount")
    row.get_by_label("Operator:").select_option(">=")
    row.get_by_label("Value:", exact=True).fill("900")

    page.get_by_role("button", name="Save changes").click()

    expect(page.get_by_role("heading", level=1)).to_have_text(agent.name)
    assert stored(agent).term_guards == [{"term": "amount", "op": ">=", "value": 900}]


def test_a_system_prompt_too_large_to_send_is_refused_in_the_browser_keeping_it(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    open_editor(page, agent)
    prompt = page.get_by_label("System prompt:", exact=True)
    prompt.fill("x" * 3_000_000)
    description = page.get_by_role("group", name="Identity").get_by_label("Description:", exact=True)
    description.fill("Hires for Acme.")

    page.get_by_role("button", name="Save changes").click()

    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(
        "Not sent: this form is 2.9\u00a0MB, more than the 2.5\u00a0MB a form may send."
    )
    expect(alert).to_contain_text(
        "The largest field is System prompt (2.9\u00a0MB): shorten it and save again."
    )
    expect(prompt).to_be_focused()
    assert prompt.evaluate("el => el.value.length") == 3_000_000
    expect(description).to_have_value("Hires for Acme.")
    assert page.url.endswith(f"/agents/{agent.pk}/edit/")
    assert stored(agent).system_prompt == agent.system_prompt


def test_without_javascript_a_system_prompt_too_large_to_read_gets_the_form_back_with_a_message(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    page = without_javascript(browser, page)
    page.goto(f"{live_stack.url}/t/acme/agents/{agent.pk}/edit/")
    page.get_by_label("System prompt:", exact=True).fill("x" * 3_000_000)

    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Save changes").click()

    assert posted.value.status == 413
    expect(page.get_by_role("alert")).to_contain_text("more than the 2.5\u00a0MB a form may send")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Edit {agent.name}")
    expect(page.get_by_label("System prompt:", exact=True)).to_have_value(agent.system_prompt)
    assert stored(agent).system_prompt == agent.system_prompt


def test_the_system_message_preview_has_the_agents_sub_navigation(
    live_stack: LiveStack, agent: Agent, operator: AbstractUser, browser: Browser
) -> None:
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)
    page.goto(f"{live_stack.url}/t/acme/agents/{agent.pk}/system-message/")
    expect(page.get_by_role("link", name="System message")).to_have_attribute("aria-current", "page")

    page.get_by_role("link", name="Card preview").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"AgentCard of {agent.name}")
    page.get_by_role("link", name="System message").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"System message of {agent.name}")
