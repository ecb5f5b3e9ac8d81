"""An inbound ask in Debian's Chromium, on the live stack: a counterparty's move makes Tomas's agent
ask him for his limit; the question arrives in his inbox live, he answers it there, and the
counterparty's next message is answered with what he said.

The counterparty is a2a-sdk's client calling the agent's public endpoint over loopback; the page
follows over the WebSocket, never by a reload.
"""

from __future__ import annotations

import pytest
from a2a.helpers import get_data_parts, get_message_text
from a2a.types import Task
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.models import Agent, Intent
from negotiations.models import Negotiation
from negotiations.services import inbound
from tests.a2a_gateway.conftest import endpoint_of, proposal, user_message
from tests.conftest import PASSWORD, LiveStack
from tests.e2e.conftest import WAIT, not_reloaded, off_loop
from tests.e2e.pages import axe_violations, log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

QUESTION = "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
ANSWER = "At least €1,000 a day."


def test_the_party_answers_an_inbound_ask_in_the_inbox_and_the_next_reply_carries_it(
    live_stack: LiveStack,
    agent: Agent,
    intent: Intent,
    principal: AbstractUser,
    browser: Browser,  # last: ORM fixtures cannot run once Playwright's loop does
) -> None:
    endpoint = endpoint_of(live_stack, agent)
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, principal.get_username(), PASSWORD)
    expect(page.get_by_text("No open questions.")).to_be_visible()

    held: Task = off_loop(lambda: endpoint.send(user_message(proposal(800))))

    assert get_message_text(held.history[-1]) == inbound.HOLDING_TEXT
    item = page.locator("li.negotiation")
    expect(item.locator(".question-text")).to_have_text(QUESTION)
    expect(item.locator("blockquote.said")).to_have_text("I can pay €800 a day.")
    expect(page.get_by_role("heading", name="Questions from your agents (1)")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("1 open question")
    assert not_reloaded(page)
    assert axe_violations(page) == []

    item.get_by_label("Your answer").fill(ANSWER)
    item.get_by_role("button", name="Send answer").click()

    said = (
        "Understood: at least 1,000 EUR per day for amount. Your agent answers them with it when they "
        "next write, or at once if they asked to be notified."
    )
    expect(page.get_by_role("status").filter(has_text=said)).to_be_visible()
    expect(item).to_be_hidden()
    expect(page.get_by_text("No open questions.")).to_be_visible()
    assert not_reloaded(page)
    negotiation = off_loop(lambda: Negotiation.across_tenants.get(agent=agent, task_id=held.id))
    assert (negotiation.status, negotiation.guidance) == (Negotiation.Status.OPEN, [ANSWER])

    answered: Task = off_loop(lambda: endpoint.send(user_message(proposal(850), task=held)))

    # A seller's opening at 140% of the floor Tomas gave.
    [data] = get_data_parts(answered.history[-1].parts)
    assert (data["action"], data["terms"]) == ("propose", {"amount": 1429, "currency": "EUR"})
