"""A chat model that asks its party on an outbound turn, answered in Debian's Chromium, on the live stack.

Tomas's agent runs on a chat model (the loopback server of :mod:`tests.chat_server`,
answered by :class:`tests.negotiating_policy.AgentLoopPolicy`) and has no limit
of its own: after its opening offer and the seller's counter, its model asks
what it may agree to. The negotiation parks, the loop asks Tomas, the question
reaches his open inbox over the WebSocket with the negotiation waiting on him,
he types the answer, the loop calls ``answer`` and the negotiation goes on with
that guidance to a settlement. The seller, Idris in ``globex``, answers at its
public endpoint over real A2A on a chat model of its own tenant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.addresses import agent_url
from agents.models import Agent, Intent, Message, Question, Run
from agents.services import runs
from negotiations.model_negotiator import MOVE_TOOL
from negotiations.models import Negotiation, Settlement
from tests.chat_server import ChatServer, tool_calls
from tests.conftest import PASSWORD, LiveStack, on_chat_model, runs_settle
from tests.e2e.conftest import WAIT, not_reloaded, off_loop, wait_finished, wait_live
from tests.e2e.pages import log_in
from tests.negotiating_policy import AgentLoopPolicy, NegotiatingPolicy, asks_for_a_move

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

OPENING = {
    "action": "propose",
    "message": "I can do 700 EUR a day.",
    "terms": {"amount": 700, "currency": "EUR"},
}
ASKED = "What is the most (or least) I may agree to per day?"
ANSWER = "Up to €1,100 a day."


@pytest.fixture
def policy() -> AgentLoopPolicy:
    # The first move is the test's, so the model asks once the seller has countered.
    return AgentLoopPolicy(instead={1: tool_calls(("open_1", MOVE_TOOL, json.dumps(OPENING)))})


@pytest.fixture
def buyer_chat(policy: AgentLoopPolicy) -> Iterator[ChatServer]:
    with ChatServer(responder=policy) as server:
        yield server


@pytest.fixture
def seller_chat() -> Iterator[ChatServer]:
    with ChatServer(responder=NegotiatingPolicy()) as server:
        yield server


def test_a_model_that_asks_on_an_outbound_turn_gets_the_partys_answer_from_the_inbox(
    live_stack: LiveStack,
    agent: Agent,
    intent: Intent,
    seller: Agent,
    principal: AbstractUser,
    buyer_chat: ChatServer,
    seller_chat: ChatServer,
    browser: Browser,  # last: ORM fixtures cannot run once Playwright's loop does
) -> None:
    off_loop(
        lambda: (on_chat_model(agent, buyer_chat), on_chat_model(seller, seller_chat, name="guild-model"))
    )
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    log_in(page, live_stack.url, principal.get_username(), PASSWORD)
    expect(page.get_by_text("No open questions.")).to_be_visible()
    task = f"Find me a fractional CFO for two days a month. Talk to {agent_url(seller)}"

    run = off_loop(lambda: runs.run_start(agent=agent, intent=intent, task=task))

    # The question arrives live, with the negotiation that waits on it and the seller's counter.
    question = page.locator("li.question")
    expect(question.get_by_text(ASKED, exact=True)).to_be_visible(timeout=WAIT)
    waiting = question.locator(".waiting-list li")
    expect(waiting).to_have_count(1)
    expect(waiting.get_by_role("link", name="With Idris Haddad")).to_be_visible()
    expect(waiting).to_contain_text("(we contacted them)")
    expect(waiting.locator(".last-move .action")).to_have_text("counter")
    expect(waiting.locator("blockquote.said")).to_have_text("I can do 1330 EUR a day.")
    expect(waiting.locator("dl.terms")).to_contain_text("1330")
    assert not_reloaded(page)
    parked = off_loop(lambda: Negotiation.across_tenants.get(agent=agent))
    assert (parked.status, parked.parked_question, parked.turn_count) == (
        Negotiation.Status.WAITING,
        ASKED,
        1,
    )

    page.get_by_label("Your answer").fill(ANSWER)
    page.get_by_role("button", name="Send answer").click()

    expect(page.get_by_role("status").filter(has_text="Answer sent. Your agent carries on.")).to_be_visible()
    expect(page.get_by_text(ASKED)).to_be_hidden()
    assert not_reloaded(page)
    page.goto(f"{live_stack.url}/t/acme/runs/{run.pk}/")
    wait_live(page)
    expect(page.locator("#main [data-status]")).to_have_text("Done", timeout=120_000)
    output = page.locator("pre.output")
    expect(output).to_contain_text("Settled (1):")
    expect(output).to_contain_text("Idris Haddad")
    expect(output).to_contain_text(re.compile(r"agreed: \{\"amount\":\d+"))

    ended = wait_finished(run)
    assert ended.status == Run.Status.DONE, ended.end_reason

    def recorded() -> tuple[Question, Negotiation, Settlement, Settlement, list[Message]]:
        negotiation = Negotiation.across_tenants.get(agent=agent)
        return (
            Question.across_tenants.select_related("answered_by").get(run=run),
            negotiation,
            Settlement.across_tenants.get(negotiation=negotiation),
            Settlement.across_tenants.get(negotiation__agent=seller),
            list(Message.across_tenants.filter(run=run, role=Message.Role.ASSISTANT).order_by("seq")),
        )

    asked, negotiation, ours, theirs, said = off_loop(recorded)
    assert (asked.question, asked.answer, asked.answered_by.get_username()) == (ASKED, ANSWER, "tomas")
    # The loop asked once, then gave the answer to the negotiation that waited on it.
    assert [[c["name"] for c in m.tool_calls] for m in said] == [["negotiate"], ["ask_user"], ["answer"], []]
    assert json.loads(said[2].tool_calls[0]["arguments"]) == {
        "ids": [str(negotiation.pk)],
        "guidance": ANSWER,
    }
    assert negotiation.guidance == [ANSWER]
    assert (negotiation.status, negotiation.parked_question) == (Negotiation.Status.SETTLED, "")
    # Every decision after the answer was made with it as standing guidance, beside the question.
    later = [r.body["messages"][0]["content"] for r in buyer_chat.requests if asks_for_a_move(r.body)][2:]
    assert later
    answered = f'Guidance from the party you act for:\n- You asked: "{ASKED}" They answered: {ANSWER}'
    assert all(answered in system for system in later)
    assert ours.outcome == theirs.outcome == Settlement.Outcome.AGREED
    assert ours.terms == theirs.terms
    assert ours.terms is not None
    assert 950 <= ours.terms["amount"] <= 1100
    off_loop(runs_settle)
