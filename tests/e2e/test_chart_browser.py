"""A settled negotiation's chart in Debian's Chromium on the live stack: both sides' offers, our limit
and aspiration, the settlement point, its text alternative, with and without JavaScript, axe-core at
desktop and phone width. Saves the chart's picture to docs/screenshots/negotiation-chart.png."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.models import Agent, Intent
from negotiations.models import Negotiation, Settlement, Turn
from tests.conftest import PASSWORD, LiveStack
from tests.e2e.conftest import WAIT
from tests.e2e.pages import DESKTOP, PHONE, axe_violations, fits, log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "negotiation-chart.png"
# Tomas's agent buys (it opens at 770, 70% of its ceiling) and Idris sells; Idris accepts 1,000.
OFFERS = [("ours", 770), ("theirs", 1330), ("ours", 826), ("theirs", 1240), ("ours", 905), ("theirs", 1120)]
OFFERS += [("ours", 1000)]


@pytest.fixture
def settled(agent: Agent, intent: Intent) -> Negotiation:
    """Tomas's agent's outbound negotiation with Idris Haddad, agreed at €1,000 by reference on turn 8;
    Tomas's limit is his standing guidance, as the demo's, "Up to €1,100 a day."."""
    n = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="https://example.org/a2a/idris",
        counterparty_name="Idris Haddad",
        task_id="task-idris",
        status=Negotiation.Status.SETTLED,
        task_state="completed",
        turn_count=4,
        guidance=["Up to €1,100 a day."],
    )

    def turn(seq: int, side: str, action: str, amount: int, **more: Any) -> None:
        Turn.objects.create(
            tenant=n.tenant,
            negotiation=n,
            seq=seq,
            side=side,
            action=action,
            message=f"€{amount:,} a day.",
            terms={"amount": amount, "currency": "EUR"},
            **more,
        )

    for seq, (side, amount) in enumerate(OFFERS, start=1):
        turn(seq, side, "propose" if seq == 1 else "counter", amount, offer_id=f"offer-{seq}")
    turn(8, "theirs", "accept", 1000, accepts_offer_id="offer-7", task_state="completed")
    Settlement.objects.create(
        tenant=n.tenant,
        negotiation=n,
        outcome=Settlement.Outcome.AGREED,
        basis=Settlement.Basis.REFERENCE,
        terms={"amount": 1000, "currency": "EUR"},
        reason="Closing move accepts offer-7.",
        ended_by="theirs",
    )
    return n


def test_the_settled_negotiations_chart_shows_the_exchange_and_says_it_in_words(
    live_stack: LiveStack, principal: AbstractUser, settled: Negotiation, browser: Browser
) -> None:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, "tomas", PASSWORD)
    url = f"{live_stack.url}/t/acme/negotiations/{settled.pk}/"

    page.goto(url)

    chart = page.locator("figure.chart")
    expect(chart).to_be_visible()
    drawing = page.get_by_role(
        "img", name=re.compile(r"^Offers over the turns: Tomas's agent and Idris Haddad")
    )
    expect(drawing).to_be_visible()
    for mark in ("ours", "theirs", "limit", "aspiration", "settlement"):
        expect(chart.locator(f'[data-mark="{mark}"]')).to_have_count(1)
    expect(chart.locator('[data-mark="ours"] circle')).to_have_count(4)
    expect(chart.locator('[data-mark="theirs"] rect')).to_have_count(4)
    expect(chart.locator("desc")).to_have_text(
        "Tomas's agent made 4 offers, from 770 to 1,000 EUR. Idris Haddad made 4 offers, from 1,330 to "
        "1,000 EUR. Our limit: 1,100 EUR. Our aspiration: 770 EUR. Settled at 1,000 EUR on turn 8."
    )
    expect(chart.get_by_text("Our limit (the most we pay): 1,100")).to_be_visible()
    expect(chart.get_by_text("Settled at 1,000 on turn 8")).to_be_visible()
    offers = page.get_by_role("table", name="Offers on amount (EUR), by turn")
    expect(offers.locator("tbody tr")).to_have_count(8)
    expect(offers.locator("tbody tr").nth(1)).to_have_text(re.compile(r"2\s*Idris Haddad \(theirs\)\s*1,330"))
    expect(page.locator('[data-score="surplus"]')).to_have_text(
        "100 EUR inside our limit · 30% of the way from our limit to our aspiration"
    )
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    chart.screenshot(path=str(SCREENSHOT))
    assert axe_violations(page) == []
    page.set_viewport_size(PHONE)
    page.goto(url)
    expect(drawing).to_be_visible()
    assert axe_violations(page) == []
    assert fits(page)

    # Drawn by the server: a browser without JavaScript gets the same chart and its words.
    plain = browser.new_context(
        viewport=DESKTOP, java_script_enabled=False, storage_state=context.storage_state()
    )
    bare = plain.new_page()
    bare.goto(url)
    expect(bare.get_by_role("img", name=re.compile(r"^Offers over the turns"))).to_be_visible()
    expect(bare.locator('figure.chart [data-mark="settlement"]')).to_have_count(1)
    expect(
        bare.get_by_role("table", name="Offers on amount (EUR), by turn").locator("tbody tr")
    ).to_have_count(8)
