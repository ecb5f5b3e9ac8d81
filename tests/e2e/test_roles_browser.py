"""Who may see and do what, in Debian's Chromium on the live stack: a viewer reads but cannot answer,
and another tenant's pages are not found.

The refusals are checked where a user meets them: on the page (no form), and
against a request forged from the page itself with its own CSRF token, so
that only the role or the tenant can be what refuses it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, Page, expect

from agents.models import Agent, Intent, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES
from agents.services import runs
from negotiations.models import Negotiation, Turn
from parley.models import Membership, Tenant
from tests.conftest import PASSWORD, LiveStack, make_user, wait_until
from tests.e2e.conftest import WAIT, off_loop
from tests.e2e.pages import log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

# Posts a form from the page the browser is on, with the CSRF token htmx sends from it; gives back
# the answer's status and the text of its <main>.
FORGE = """async ([url, fields]) => {
    const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
    const response = await fetch(url, {
        method: "POST",
        headers: {"X-CSRFToken": token},
        body: new URLSearchParams(fields),
    });
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    return {status: response.status, text: page.querySelector("main").textContent};
}"""


def forge(page: Page, url: str, fields: dict[str, str]) -> dict[str, Any]:
    """POST ``fields`` to ``url`` from ``page``'s own script, as a tampered page would."""
    answer: dict[str, Any] = page.evaluate(FORGE, [url, fields])
    return answer


@pytest.fixture
def viewer(tenant: Tenant) -> AbstractUser:
    user = make_user("vera")
    Membership.objects.create(user=user, tenant=tenant, role=Membership.Role.VIEWER)
    return user


def test_a_viewer_sees_the_question_but_cannot_answer_it_even_by_a_forged_post(
    live_stack: LiveStack, agent: Agent, intent: Intent, viewer: AbstractUser, browser: Browser
) -> None:
    run = off_loop(lambda: runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    question = off_loop(
        lambda: wait_until(
            lambda: Question.across_tenants.filter(run=run).first(), timeout=60, what="the question"
        )
    )
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, viewer.get_username(), PASSWORD)

    expect(page.get_by_role("heading", name="Questions from the agents (1)")).to_be_visible()
    expect(page.get_by_text(ASK_FOR_COUNTERPARTIES, exact=True)).to_be_visible()
    expect(
        page.get_by_text("You are a viewer: you see every open question, but viewers cannot answer.")
    ).to_be_visible()
    expect(page.get_by_text("Waiting for the agent's party to answer.")).to_be_visible()
    expect(page.get_by_label("Your answer")).to_have_count(0)
    expect(page.get_by_role("button", name="Send answer")).to_have_count(0)

    refused = forge(page, f"/t/acme/questions/{question.pk}/answer/", {"answer": "Idris and Noor."})

    assert refused["status"] == 403
    # Refused for the role, not for the token: the page says why.
    assert "Only the agent's party, an owner or an operator can answer its questions." in refused["text"]
    fresh = off_loop(lambda: Question.across_tenants.get(pk=question.pk))
    assert (fresh.answered_at, fresh.answer, fresh.answered_by_id) == (None, "", None)
    assert off_loop(lambda: Run.across_tenants.get(pk=run.pk)).status == Run.Status.NEEDS_INPUT
    page.reload()
    expect(page.get_by_text(ASK_FOR_COUNTERPARTIES, exact=True)).to_be_visible()

    # The run's page shows the question read-only too.
    page.get_by_role("link", name=intent.statement).first.click()
    expect(page.get_by_role("heading", name="Waiting on the party")).to_be_visible()
    expect(page.get_by_text(ASK_FOR_COUNTERPARTIES, exact=True)).to_be_visible()
    expect(page.get_by_label("Your answer")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)


# What the other tenant's pages would give away: its name, its agent's, prompt, run output and counterparty.
SECRETS = ("Globex", "Idris Haddad", "Never go below 950", "floor is 950", "buyer desk")


@pytest.fixture
def globex_rows(seller: Agent) -> dict[str, Any]:
    """Another tenant's agent (with a secret prompt), its run, and a negotiation with one turn."""
    seller.system_prompt = "Never go below 950 EUR a day."
    seller.save()
    intent = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell CFO days.")
    run = Run.objects.create(
        tenant=seller.tenant, agent=seller, intent=intent, status=Run.Status.DONE, output="My floor is 950."
    )
    negotiation = Negotiation.objects.create(
        tenant=seller.tenant,
        agent=seller,
        intent=intent,
        direction=Negotiation.Direction.INBOUND,
        counterparty_name="Globex buyer desk",
    )
    Turn.objects.create(
        tenant=seller.tenant, negotiation=negotiation, seq=1, side=Turn.Side.THEIRS, action="propose"
    )
    return {"agent": seller, "run": run, "negotiation": negotiation}


def test_another_tenants_pages_are_not_found_and_show_nothing_of_theirs(
    live_stack: LiveStack, operator: AbstractUser, globex_rows: dict[str, Any], browser: Browser
) -> None:
    agent, run, negotiation = globex_rows["agent"], globex_rows["run"], globex_rows["negotiation"]
    paths = [
        f"runs/{run.pk}/",
        f"agents/{agent.pk}/",
        f"agents/{agent.pk}/edit/",
        f"agents/{agent.pk}/system-message/",
        f"agents/{agent.pk}/card/",
        f"negotiations/{negotiation.pk}/",
    ]
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    # An operator of acme: every page above is open to their role in their own tenant.
    log_in(page, live_stack.url, operator.get_username(), PASSWORD)

    # Under their own tenant's address, and under the other tenant's (of which they are no member).
    for url in [f"/t/{slug}/{path}" for slug in ("acme", "globex") for path in paths] + ["/t/globex/"]:
        response = page.goto(f"{live_stack.url}{url}")
        assert response is not None
        assert response.status == 404, url
        expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
        shown = page.content()
        assert [s for s in SECRETS if s in shown] == [], url

    # Nor can they change it by posting to its editor from a page of their own.
    page.goto(f"{live_stack.url}/t/acme/")
    refused = forge(page, f"/t/acme/agents/{agent.pk}/edit/", {"name": "Hijacked", "slug": "hijacked"})
    assert refused["status"] == 404
    fresh = off_loop(lambda: Agent.across_tenants.get(pk=agent.pk))
    assert (fresh.name, fresh.slug, fresh.system_prompt) == ("Idris Haddad", "idris", agent.system_prompt)
