"""Starting a run from the dashboard in Debian's Chromium, on the live stack, and watching it live.

The run is started through the agent page's form; the web and worker
processes of ``live_stack`` do the rest, and the run page follows it over the
WebSocket, never by a reload: queued behind another run, then its question,
the model's text as it streams, withdrawn when its try failed, and the stored step that
replaces it.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Browser, expect

from agents.models import Agent, Intent, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES, NO_COUNTERPARTIES
from agents.services import questions, runs
from parley import live
from tests.conftest import PASSWORD, LiveStack
from tests.e2e.conftest import WAIT, not_reloaded, off_loop, publish_run_updated, wait_finished, wait_live

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

TASK = "Find me a fractional CFO for two days a week."


def push_delta(run: Run, step: int, text: str) -> None:
    """What the worker sends while the model writes step ``step`` of ``run``: pushed, never stored."""
    live.push_transient(
        event="run.delta",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={"run": str(run.pk), "step": step, "delta": text},
    )


def push_withdrawn(run: Run, step: int) -> None:
    """What the worker sends when the text streamed for step ``step`` will not be stored."""
    live.push_transient(
        event="run.withdrawn",
        tenant_id=run.tenant_id,
        party_id=run.agent.principal_id,
        payload={"run": str(run.pk), "step": step},
    )


def test_a_run_started_from_the_agent_page_shows_its_question_and_stream_live(
    live_stack: LiveStack, agent: Agent, intent: Intent, principal: AbstractUser, browser: Browser
) -> None:
    # Another run holds the thread and the agent queues behind it, so the page opens before the run moves.
    off_loop(lambda: Agent.across_tenants.filter(pk=agent.pk).update(on_busy=Agent.OnBusy.QUEUE))
    blocker = off_loop(
        lambda: Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=Run.Status.WAITING)
    )
    page = browser.new_page()
    page.set_default_timeout(WAIT)
    page.goto(f"{live_stack.url}/login/")
    page.get_by_label("Username").fill(principal.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Acme Robotics", level=1)).to_be_visible()

    page.goto(f"{live_stack.url}/t/acme/agents/{agent.pk}/")
    page.get_by_label("Intent:", exact=True).select_option(label=intent.statement)
    page.get_by_label("Task:", exact=True).fill(TASK)
    page.get_by_role("button", name="Start run").click()

    expect(page).to_have_url(re.compile(r"/t/acme/runs/[0-9a-f-]{36}/$"))
    expect(page.get_by_role("status").filter(has_text="Run started.")).to_be_visible()
    status = page.locator("#main [data-status]")
    expect(status).to_have_text("pending (behind another run of the thread)")
    wait_live(page)
    run = off_loop(lambda: Run.across_tenants.exclude(pk=blocker.pk).get(intent=intent))

    off_loop(lambda: runs.run_cancel(run=blocker, user=None))

    expect(page.get_by_text(ASK_FOR_COUNTERPARTIES, exact=True)).to_be_visible(timeout=WAIT)
    expect(status).to_have_text("Needs Input")
    expect(page.locator("#live-status")).to_have_text("Run status: Needs Input")
    expect(page.get_by_label("Your answer")).to_be_visible()
    assert not_reloaded(page)

    # The model's text for the next step appears as it streams, and survives a refresh while unstored.
    stream = page.locator(".stream")
    expect(stream).to_be_hidden()
    off_loop(lambda: push_delta(run, 2, "Looking for "))
    off_loop(lambda: push_delta(run, 2, "candidates…"))
    expect(stream.locator("pre")).to_have_text("Looking for candidates…")
    expect(stream).to_be_visible()
    with page.expect_response(lambda r: r.url.endswith(f"/runs/{run.pk}/?fragment=1")):
        off_loop(lambda: publish_run_updated(run))
    expect(stream.locator("pre")).to_have_text("Looking for candidates…")

    # Text withdrawn (its try failed) goes, and a refresh does not bring it back; the retry streams anew.
    off_loop(lambda: push_withdrawn(run, 2))
    expect(stream).to_be_hidden()
    expect(stream.locator("pre")).to_have_text("")
    with page.expect_response(lambda r: r.url.endswith(f"/runs/{run.pk}/?fragment=1")):
        off_loop(lambda: publish_run_updated(run))
    expect(stream).to_be_hidden()
    expect(stream.locator("pre")).to_have_text("")
    off_loop(lambda: push_delta(run, 2, "Looking again…"))
    expect(stream.locator("pre")).to_have_text("Looking again…")
    expect(stream).to_be_visible()

    question = off_loop(lambda: Question.across_tenants.get(run=run))
    off_loop(lambda: questions.question_answer(question=question, answer="Nobody yet.", user=principal))

    # Once step 2 is stored the page shows it as a message, and the streamed copy goes.
    expect(status).to_have_text("Done", timeout=120_000)
    expect(page.locator("pre.output")).to_have_text(NO_COUNTERPARTIES)
    expect(stream).to_be_hidden()
    expect(stream.locator("pre")).to_have_text("")
    assert not_reloaded(page)
    assert wait_finished(run).status == Run.Status.DONE
