"""What browser tests do and check on any dashboard page: log in, fit a phone, pass axe-core, show focus,
break no rule of the content security policy."""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext, ConsoleMessage, Locator, Page, ViewportSize, expect

from tests.e2e.conftest import wait_live

DESKTOP: ViewportSize = {"width": 1280, "height": 900}
PHONE: ViewportSize = {"width": 375, "height": 740}
_AXE = Axe()


def log_in(
    page: Page, base_url: str, username: str, password: str, *, tenant_name: str = "Acme Robotics"
) -> None:
    """Log in through the form; the member lands on their first tenant's inbox with the live socket up."""
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name=tenant_name, level=1)).to_be_visible()
    wait_live(page)


def fits(page: Page) -> bool:
    """Nothing on the page is wider than the viewport (no sideways scrolling)."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def axe_violations(page: Page) -> list[str]:
    """axe-core's violations on the page as it is now, one line each: rule, impact, the elements
    (CSS targets) and what the rule asks; empty when there are none."""
    found: list[dict[str, Any]] = _AXE.run(page).response["violations"]
    return [
        f"{v['id']} ({v['impact']}): {', '.join(' '.join(n['target']) for n in v['nodes'])} — {v['help']}"
        for v in found
    ]


def watch_csp(context: BrowserContext) -> list[str]:
    """A list that fills, one line each, with what the content security policy blocks on every page of
    ``context`` from now on: each ``securitypolicyviolation`` event (the page, the directive broken,
    what was blocked, where from) and each console message about the policy. The listener is added
    by Playwright before any script of the page's runs, so the policy does not block it."""
    found: list[str] = []

    def violation(line: str) -> None:
        found.append(line)

    context.expose_function("parleyCspViolation", violation)
    context.add_init_script(
        """document.addEventListener("securitypolicyviolation", (e) => window.parleyCspViolation(
            `${location.pathname}: ${e.violatedDirective} blocked ${e.blockedURI}`
            + ` (${e.sourceFile}:${e.lineNumber})`
        ));"""
    )

    def console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            found.append(f"console: {message.text}")

    context.on("console", console)
    return found


def focus_shown(page: Page) -> bool:
    """Whether the focused element is in ``:focus-visible`` and drawn with an outline (not ``none``,
    not zero wide): a keyboard user can see where they are."""
    return bool(
        page.evaluate(
            """() => {
                const el = document.activeElement;
                if (!el || el === document.body || !el.matches(':focus-visible')) return false;
                const style = getComputedStyle(el);
                return style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
            }"""
        )
    )


def tab_to(page: Page, target: Locator, *, limit: int = 60) -> None:
    """Press Tab until ``target`` has the focus, checking that every element the focus stops at on the
    way shows it (:func:`focus_shown`); fail after ``limit`` presses."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        assert focus_shown(page), f"no visible focus on {page.evaluate('document.activeElement.outerHTML')}"
        if target.evaluate("el => el === document.activeElement"):
            return
    raise AssertionError(f"{limit} presses of Tab never reached {target}")
