"""An operator configures an agent in Debian's Chromium, on the live stack, and previews what changed.

The previews are built by the web process from what the editor saved: the
system message a run would get, and the AgentCard as counterparties fetch it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, Page, expect

from agents.models import Agent, Intent
from tests.conftest import PASSWORD, LiveStack
from tests.e2e.conftest import WAIT
from tests.e2e.pages import log_in

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
