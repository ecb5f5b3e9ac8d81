"""Negotiation services that need no network: answering and the one-live rule."""

from __future__ import annotations

import pytest

from agents import services as agent_services
from agents.models import Agent, Intent, Message, Run
from agents.tools import Result
from negotiations.models import Batch, Negotiation
from negotiations.services import batch_answer, batch_open

pytestmark = pytest.mark.django_db


def _run_waiting_on(agent: Agent, intent: Intent) -> Run:
    run = agent_services.run_start(agent=agent, intent=intent, task="Talk to https://cfo.example/a2a/x")
    agent_services.run_step(run_id=run.pk, tenant_id=run.tenant_id)
    run.refresh_from_db()
    return run


def _answer(run: Run, ids: list[str], guidance: str) -> str:
    """Call the answer tool as the model would, and return what the model sees."""
    outcome = batch_answer(run=run, tool_call_id="call-answer", ids=ids, guidance=guidance)
    return outcome.text  # type: ignore[union-attr]


def test_answering_a_negotiation_still_in_progress_is_skipped(agent: Agent, intent: Intent) -> None:
    run = _run_waiting_on(agent, intent)
    negotiation = Negotiation.objects.get(agent=agent)
    assert negotiation.status == Negotiation.Status.OPEN  # its pump was enqueued, never run here

    text = _answer(run, [str(negotiation.pk)], "Up to 1,100.")

    assert text == (
        "Skipped (1):\n"
        f"- {negotiation.pk} (https://cfo.example/a2a/x) — still in progress — its result comes with the "
        "call that started it"
    )
    negotiation.refresh_from_db()
    negotiate_call = Message.objects.get(run=run, role=Message.Role.ASSISTANT).tool_calls[0]
    assert negotiation.guidance == []
    assert negotiation.batch == Batch.objects.get(run=run, tool_call_id=negotiate_call["id"])


@pytest.mark.parametrize(
    "spelling", ["https://cfo.example/a2a/x/", "HTTPS://CFO.Example:443/a2a/%78", "https://cfo.example/a2a/x"]
)
def test_a_second_negotiation_with_the_same_counterparty_is_skipped(
    agent: Agent, intent: Intent, spelling: str
) -> None:
    run = _run_waiting_on(agent, intent)
    first = Negotiation.objects.get(agent=agent)

    outcome = batch_open(run=run, tool_call_id="call-again", targets=[{"url": spelling}])

    assert outcome == Result(
        "Skipped (1):\n"
        f"- {first.pk} (https://cfo.example/a2a/x) — negotiation {first.pk} with this counterparty is "
        "still binding (open); answer it instead of opening another"
    )
    assert Negotiation.objects.filter(agent=agent).count() == 1


def test_answering_unknown_ids_is_skipped_with_the_reason(agent: Agent, intent: Intent) -> None:
    run = _run_waiting_on(agent, intent)
    text = _answer(run, ["not-a-uuid", "not-a-uuid"], "Up to 1,100.")
    assert text == "Skipped (1):\n- not-a-uuid — no such negotiation of this agent"
