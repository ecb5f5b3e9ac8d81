"""An approval in Debian's Chromium, on the live stack: it arrives live, the party approves, the tool runs.

The agent's model is the scripted chat-completions server on loopback
(``tests.chat_server``): it calls ``place_order``, a host operation that needs
the party's approval, served by the order desk on loopback. The live stack's
worker calls both over real sockets; the pages (one at desktop width, one at
a phone's) follow over the WebSocket.
"""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.models import Agent, Intent, Question, Run, Tool
from agents.services import runs
from tests.chat_server import ChatServer, text, tool_calls
from tests.conftest import PASSWORD, LiveStack, on_chat_model
from tests.e2e.conftest import WAIT, OrderDesk, not_reloaded, off_loop, wait_finished, wait_live
from tests.e2e.pages import PHONE, axe_violations, fits, log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

ORDER = {"order": "PO-4471", "supplier": "Brightparts", "amount": 1840}
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order": {"type": "string"},
        "supplier": {"type": "string"},
        "amount": {"type": "number"},
    },
    "required": ["order", "supplier", "amount"],
}
PLACED = "Order PO-4471 placed with Brightparts."
DONE = "PO-4471 is placed with Brightparts."


def agent_placing_orders(agent: Agent, chat: ChatServer, desk: OrderDesk) -> Agent:
    """``agent`` on ``chat``'s model with one tool, ``place_order`` at ``desk``, that needs approval."""
    tool = Tool.objects.create(
        tenant=agent.tenant,
        name="place_order",
        description="Place a purchase order with a supplier.",
        parameters=ORDER_SCHEMA,
        kind=Tool.Kind.HOST,
        url=f"{desk.origin}/place-order",
        secret="s3cret",
        timeout=5,
        requires_approval=True,
    )
    agent.tools.add(tool)
    return on_chat_model(agent, chat)


def test_an_approval_arrives_live_and_approving_runs_the_tool_and_leaves_every_tab(
    live_stack: LiveStack,
    agent: Agent,
    intent: Intent,
    principal: AbstractUser,
    chat: ChatServer,
    order_desk: OrderDesk,
    browser: Browser,  # last: ORM fixtures cannot run once Playwright's loop does
) -> None:
    off_loop(lambda: agent_placing_orders(agent, chat, order_desk))
    chat.script(tool_calls(("c1", "place_order", json.dumps(ORDER))), text(DONE))
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    desk = context.new_page()
    log_in(desk, live_stack.url, principal.get_username(), PASSWORD)
    other = context.new_page()
    other.set_viewport_size(PHONE)
    other.goto(desk.url)
    wait_live(other)
    for page in (desk, other):
        expect(page.get_by_text("No open questions.")).to_be_visible()

    run = off_loop(lambda: runs.run_start(agent=agent, intent=intent, task="Order the gripper parts."))

    for page in (desk, other):
        approval = page.locator("li.question.approval")
        expect(approval).to_be_visible(timeout=WAIT)
        expect(approval.get_by_text("May your agent call place_order?")).to_be_visible()
        shown = json.loads(approval.locator("pre.arguments").inner_text())
        assert shown == ORDER
        expect(page.get_by_role("button", name="Approve")).to_be_visible()
        assert not_reloaded(page)
        assert axe_violations(page) == []
    assert fits(other)
    assert order_desk.placed == []

    desk.get_by_role("button", name="Approve").click()

    expect(
        desk.get_by_role("status").filter(has_text="Approved. Your agent calls place_order.")
    ).to_be_visible()
    for page in (desk, other):
        expect(page.locator("li.question.approval")).to_be_hidden()
        expect(page.get_by_text("No open questions.")).to_be_visible()
        assert not_reloaded(page)

    # The tool ran with the arguments shown, and the run carried on to its end.
    other.get_by_role("link", name=intent.statement).first.click()
    expect(other).to_have_url(re.compile(rf"/t/acme/runs/{run.pk}/$"))
    wait_live(other)
    expect(other.locator("#main [data-status]")).to_have_text("Done", timeout=120_000)
    expect(other.locator("pre.tool-result")).to_have_text(PLACED)
    expect(other.get_by_text(re.compile(r"^Approved by tomas, "))).to_be_visible()
    expect(other.locator("pre.output")).to_have_text(DONE)
    assert order_desk.placed == [ORDER]
    assert wait_finished(run).status == Run.Status.DONE
    decided = off_loop(lambda: Question.across_tenants.select_related("answered_by").get(run=run))
    assert (decided.kind, decided.approved, decided.answered_by.get_username()) == ("approval", True, "tomas")
    # The model's second call carried the tool's result.
    assert chat.requests[-1].body["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": PLACED}
    context.close()
