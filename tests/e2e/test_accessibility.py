"""Every dashboard page, as the role that may see it, passes axe-core at desktop and phone width, fits a
375 px screen without sideways scrolling, and breaks no rule of its content security policy.

The data is the demo's, played once for the module on the live stack
(:func:`tests.e2e.scenes.dashboard_scene`): a finished run with three
settlements, a run waiting on Tomas's question with its negotiations parked,
and a member in every role. The tests only read, so they share it; the module
empties the database when it is done, as a transactional test would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, StorageState, expect
from pytest_django import DjangoDbBlocker

from negotiations import demo
from tests.conftest import PASSWORD, LiveStack
from tests.e2e.conftest import WAIT, off_loop, wait_live
from tests.e2e.pages import DESKTOP, PHONE, axe_violations, fits, log_in, watch_csp
from tests.e2e.scenes import DEMO_QUESTION, Scene, dashboard_scene

# The tests read nothing themselves; the (plain) django_db mark makes pytest-django create the test
# database, and each test's rollback leaves the module's committed scene alone.
pytestmark = [pytest.mark.django_db, pytest.mark.browser]


@pytest.fixture(scope="module")
def scene(live_stack: LiveStack, django_db_blocker: DjangoDbBlocker) -> Iterator[Scene]:
    with django_db_blocker.unblock():
        built = off_loop(dashboard_scene)
    yield built
    with django_db_blocker.unblock():
        off_loop(lambda: call_command("flush", interactive=False, verbosity=0))


@dataclass(frozen=True)
class Sweep:
    """A page to check: who looks (None: nobody logged in), its path, a text it must show (so the
    check runs on the page meant, with its data, not on an error page), and its status."""

    who: str | None
    path: Callable[[Scene], str]
    shows: str
    status: int = 200


def agent_page(suffix: str) -> Callable[[Scene], str]:
    return lambda s: f"/t/acme/agents/{s.world.tomas_agent.pk}/{suffix}"


PAGES = {
    "login": Sweep(None, lambda s: "/login/", "Log in"),
    "sign up": Sweep(None, lambda s: "/signup/", "Sign up"),
    "password reset": Sweep(None, lambda s: "/password/reset/", "Password Reset"),
    "invitation, visitor": Sweep(None, lambda s: s.invitation_path, "Join Acme Robotics"),
    "invitation, wrong account": Sweep("tomas", lambda s: s.invitation_path, "another account", 403),
    "organisations": Sweep("tomas", lambda s: "/organisations/", "Acme Robotics"),
    "create an organisation": Sweep("tomas", lambda s: "/organisations/new/", "Address"),
    "inbox": Sweep("tomas", lambda s: "/t/acme/", DEMO_QUESTION),
    "run waiting on a question": Sweep(
        "tomas", lambda s: f"/t/acme/runs/{s.waiting_run.pk}/", "Waiting on the party"
    ),
    "run finished": Sweep("tomas", lambda s: f"/t/acme/runs/{s.settled_run.pk}/", "Settled (3):"),
    "runs": Sweep("tomas", lambda s: "/t/acme/runs/", "runs, newest first"),
    "start work": Sweep("tomas", lambda s: "/t/acme/start/", "Start work"),
    "agents": Sweep("tomas", lambda s: "/t/acme/agents/", "Tomas's agent"),
    "agent": Sweep("tomas", agent_page(""), "Start a run"),
    "negotiations board": Sweep("tomas", lambda s: "/t/acme/negotiations/", "Idris Haddad"),
    "negotiation settled": Sweep(
        "tomas", lambda s: f"/t/acme/negotiations/{s.agreed.pk}/", "basis: reference"
    ),
    "inbox, operator": Sweep("olga", lambda s: "/t/acme/", DEMO_QUESTION),
    "agent editor": Sweep("olga", agent_page("edit/"), "Allowed actions"),
    "new agent": Sweep("olga", lambda s: "/t/acme/agents/new/", "New agent"),
    "system message preview": Sweep("olga", agent_page("system-message/"), "You act for Tomas Berg"),
    "card preview": Sweep("olga", agent_page("card/"), "AgentCard of Tomas's agent"),
    "grounding documents": Sweep("olga", agent_page("documents/"), "About Acme Robotics"),
    "inbound keys": Sweep("olga", agent_page("inbound-keys/"), "CFO Guild"),
    "agent exchange": Sweep("olga", agent_page("agent-exchange/"), "Agent Exchange is off"),
    "tools": Sweep("olga", lambda s: "/t/acme/tools/", "place_order"),
    "tool editor": Sweep("olga", lambda s: f"/t/acme/tools/{s.tool.pk}/edit/", "place_order"),
    "new tool": Sweep("olga", lambda s: "/t/acme/tools/new/", "New tool"),
    "models": Sweep("olga", lambda s: "/t/acme/models/", "house-model"),
    "model editor": Sweep("olga", lambda s: f"/t/acme/models/{s.endpoint.pk}/edit/", "house-model"),
    "new model": Sweep("olga", lambda s: "/t/acme/models/new/", "New model endpoint"),
    "intake": Sweep("olga", lambda s: "/t/acme/intake/", "Intake"),
    "members, operator": Sweep("olga", lambda s: "/t/acme/members/", "vera"),
    "members, owner": Sweep("owen", lambda s: "/t/acme/members/", "nia@example.com"),
    "hand over a placeholder": Sweep(
        "owen", lambda s: f"/t/acme/members/{s.placeholder.pk}/hand-over/", "Hand acme.petra over"
    ),
    "API keys": Sweep("owen", lambda s: "/t/acme/api-keys/", "Host backend"),
    "webhooks": Sweep("olga", lambda s: "/t/acme/webhooks/", "Add an endpoint"),
    "webhook deliveries": Sweep("olga", lambda s: "/t/acme/webhooks/deliveries/", "No deliveries yet."),
    "inbox, viewer": Sweep("vera", lambda s: "/t/acme/", "viewers cannot answer"),
    "run, viewer": Sweep(
        "vera", lambda s: f"/t/acme/runs/{s.waiting_run.pk}/", "Waiting for the agent's party"
    ),
}


@pytest.fixture(scope="module")
def sessions(scene: Scene) -> dict[str, StorageState]:
    """Each member's logged-in cookies, filled as members first log in. Each logs in through the form
    once per module: logging in afresh for each of forty pages would trip allauth's per-address login
    rate limit."""
    return {}


def open_as(
    browser: Browser, base_url: str, who: str | None, sessions: dict[str, StorageState]
) -> tuple[Page, list[str]]:
    """A page of a fresh browser context, logged in as ``who`` (None: not at all), and what the content
    security policy blocks in it (:func:`tests.e2e.pages.watch_csp`)."""
    context = browser.new_context(viewport=DESKTOP, storage_state=sessions.get(who or ""))
    blocked = watch_csp(context)
    page = context.new_page()
    page.set_default_timeout(WAIT)
    if who is not None and who not in sessions:
        log_in(page, base_url, who, demo.TOMAS_PASSWORD if who == "tomas" else PASSWORD)
        sessions[who] = context.storage_state()
    return page, blocked


def visit(page: Page, url: str, sweep: Sweep) -> None:
    """Load ``url`` afresh at the page's current width and wait until it shows what it should."""
    response = page.goto(url)
    assert response is not None
    assert response.status == sweep.status, url
    if sweep.who is not None:
        wait_live(page)  # the live refresh on connect has run: axe sees the page as it stays
    expect(page.locator("main").get_by_text(sweep.shows).first).to_be_visible()


def test_sign_up_from_an_invitation_passes_axe_and_fits_a_phone(
    live_stack: LiveStack, scene: Scene, browser: Browser, sessions: dict[str, StorageState]
) -> None:
    """The sign-up form with its e-mail fixed to the invited address, as a visitor who opened the link
    sees it."""
    sweep = Sweep(None, lambda s: "/signup/", "The invitation to Acme Robotics is for this address.")
    page, blocked = open_as(browser, live_stack.url, None, sessions)
    page.goto(f"{live_stack.url}{scene.invitation_path}")
    url = f"{live_stack.url}/signup/"
    found = {}

    visit(page, url, sweep)
    expect(page.get_by_label("E-mail:")).to_be_disabled()
    found["desktop"] = axe_violations(page)
    page.set_viewport_size(PHONE)
    visit(page, url, sweep)
    found["375 px"] = axe_violations(page)

    assert {width: v for width, v in found.items() if v} == {}
    assert fits(page)
    assert blocked == []


@pytest.mark.parametrize("name", PAGES)
def test_the_page_passes_axe_and_fits_a_phone(
    name: str, live_stack: LiveStack, scene: Scene, browser: Browser, sessions: dict[str, StorageState]
) -> None:
    sweep = PAGES[name]
    page, blocked = open_as(browser, live_stack.url, sweep.who, sessions)
    url = f"{live_stack.url}{sweep.path(scene)}"
    found = {}

    visit(page, url, sweep)
    found["desktop"] = axe_violations(page)
    page.set_viewport_size(PHONE)
    visit(page, url, sweep)
    found["375 px"] = axe_violations(page)
    wide = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")

    assert {width: v for width, v in found.items() if v} == {}, f"axe-core on {name} ({url})"
    assert fits(page), f"{name} is {wide[0]} px wide at {wide[1]} px"
    assert blocked == [], f"the content security policy on {name} ({url})"


def test_the_checks_report_what_they_look_for(
    live_stack: LiveStack, scene: Scene, browser: Browser, sessions: dict[str, StorageState]
) -> None:
    """The sweep can fail: an input without a label and a block wider than a phone are both caught."""
    page, _ = open_as(browser, live_stack.url, "tomas", sessions)
    page.set_viewport_size(PHONE)
    visit(page, f"{live_stack.url}/t/acme/", PAGES["inbox"])
    assert axe_violations(page) == []
    assert fits(page)

    # The width is set through the DOM: the policy blocks style attributes in markup.
    page.evaluate(
        """() => {
            document.querySelector("main").insertAdjacentHTML(
                "beforeend", '<input id="unlabelled"><div id="wide">wide</div>');
            document.getElementById("wide").style.width = "600px";
        }"""
    )

    assert [v.split(" ", 1)[0] for v in axe_violations(page)] == ["label"]
    assert "#unlabelled" in axe_violations(page)[0]
    assert not fits(page)
