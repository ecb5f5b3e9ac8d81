"""Text a party writes (an intent with a pasted link) wraps at phone width instead of widening the page."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse
from playwright.sync_api import Browser

from agents.models import Agent, Intent
from tests.agents.pages import waiting_question
from tests.e2e.conftest import off_loop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

# A shared-document link, as a party pastes it into an intent.
LONG_URL = (
    "https://drive.example.com/file/d/1AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEf/view?usp=sharing_eip_m"
)


def test_a_run_page_whose_intent_holds_a_long_link_fits_375px(
    live_server: Any, principal: AbstractUser, agent: Agent, browser: Browser
) -> None:
    def run_and_session() -> tuple[str, str]:
        statement = f"Review the offer at {LONG_URL}"
        intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement=statement)
        run = waiting_question(agent, intent).run
        client = Client()
        client.force_login(principal)
        return str(run.pk), client.cookies[django_settings.SESSION_COOKIE_NAME].value

    run_id, cookie = off_loop(run_and_session)
    url = live_server.url + reverse("agents:run", kwargs={"tenant": "acme", "pk": run_id})

    context = browser.new_context(viewport={"width": 375, "height": 740})
    context.add_cookies([{"name": django_settings.SESSION_COOKIE_NAME, "value": cookie, "url": url}])
    page = context.new_page()
    page.goto(url)
    width, viewport = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")

    assert page.get_by_text(LONG_URL).count() >= 1
    assert width <= viewport, f"page is {width} px wide in a {viewport} px viewport"
