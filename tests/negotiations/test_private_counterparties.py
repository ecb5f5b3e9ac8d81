"""Counterparties on private addresses (:mod:`parley.outbound`): a tenant's task names the URLs, so
with open sign-up they are a stranger's. The run reports the policy, never what an internal address
answered, and the address gets no request.

The run's steps and negotiations run in this process (Celery tasks eager), so the setting a test
turns off applies to them: the live worker allows private addresses, as the suite's peers are on
loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from agents.models import Agent, Intent, Run
from agents.services import runs
from negotiations.models import Negotiation
from parley.celery import app as celery_app
from tests.conftest import PRIVATE
from tests.loopback import LoopbackServer
from tests.negotiations.test_engine import buyer_of

pytestmark = pytest.mark.django_db(transaction=True)


class Internal(LoopbackServer):
    """A service on the platform's own network (here loopback) that answers everything 404 and
    records each path asked for."""

    what = "the internal service"

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []
        self.listen(Starlette(routes=[Route("/{path:path}", self.answer, methods=["GET", "POST"])]))

    async def answer(self, request: Request) -> PlainTextResponse:
        self.paths.append(request.url.path)
        return PlainTextResponse("not here", status_code=404)


@pytest.fixture
def tasks_here() -> Iterator[None]:
    """Celery tasks sent from this process run in it, at once."""
    before = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = before


def test_a_run_told_to_sell_to_internal_addresses_reports_the_policy_and_nothing_they_answered(
    settings: Any, agent: Agent, intent: Intent, tasks_here: None
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False  # as in production
    with Internal() as internal:
        probe = f"http://127.0.0.1:{internal.port}/internal-card-probe"
        metadata = "http://169.254.169.254/latest/meta-data/"
        named = f"http://localhost:{internal.port}/prod-internal"  # a name that resolves to loopback
        run = runs.run_start(
            agent=buyer_of(agent), intent=intent, task=f"Sell to {probe}, {metadata} and {named}"
        )

    run.refresh_from_db()
    by_url = {n.counterparty_url: n for n in Negotiation.across_tenants.filter(agent=agent)}
    targets = ((probe, "127.0.0.1"), (metadata.rstrip("/"), "169.254.169.254"), (named, "localhost"))
    failed = [
        f"- {by_url[url].pk} ({url}) — {url} was not called: the host '{host}' {PRIVATE}"
        for url, host in targets
    ]
    assert run.status == Run.Status.DONE
    assert run.output == "\n".join(["Here is where things stand.", "Failed (3):", *failed])
    assert "HTTP" not in run.output
    assert internal.paths == []
