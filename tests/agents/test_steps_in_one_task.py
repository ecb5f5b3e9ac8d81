"""A worker's task takes a run's next steps itself while the run keeps running (``steps.run_step``
with ``seconds``), each written in its own transaction, and stops at anything else."""

from __future__ import annotations

import pytest

from agents.models import Agent, Intent, Message, Run, Tool
from agents.services import runs, steps
from tests.agents.conftest import HostServer
from tests.chat_server import ChatServer, text, tool_calls


@pytest.mark.django_db
def test_a_task_takes_the_steps_of_a_running_run_one_after_another(
    llm_agent: Agent, intent: Intent, lookup: Tool, host: HostServer, chat: ChatServer
) -> None:
    llm_agent.tools.add(lookup)
    chat.script(
        tool_calls(("c1", "lookup", '{"order": "A-17"}')),
        tool_calls(("c2", "lookup", '{"order": "B-2"}')),
        text("Both ship Monday."),
    )
    run = runs.run_start(agent=llm_agent, intent=intent, task="Where are my orders?")

    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=1, seconds=60)

    run.refresh_from_db()
    assert (run.status, run.step_count, run.output) == (Run.Status.DONE, 3, "Both ship Monday.")
    thread = list(
        Message.across_tenants.filter(intent=intent).order_by("seq").values_list("seq", "role", "step")
    )
    assert thread == [
        (1, "user", 0),
        (2, "assistant", 1),
        (3, "tool", 1),
        (4, "assistant", 2),
        (5, "tool", 2),
        (6, "assistant", 3),
    ]
    # Each step's model call saw what the steps before it wrote.
    assert [sum(m["role"] == "tool" for m in r.body["messages"]) for r in chat.requests] == [0, 1, 2]
    assert [b["arguments"]["order"] for b in host.received] == ["A-17", "B-2"]


@pytest.mark.django_db
def test_a_task_stops_at_a_question_and_without_seconds_takes_one_step(
    llm_agent: Agent, intent: Intent, chat: ChatServer
) -> None:
    chat.script(
        tool_calls(("c1", "missing", "{}")),
        tool_calls(("c2", "ask_user", '{"question": "Which day?"}')),
        text("Never asked for."),
    )
    run = runs.run_start(agent=llm_agent, intent=intent, task="Book it.")

    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=1)
    run.refresh_from_db()
    assert (run.status, run.step_count, len(chat.requests)) == (Run.Status.RUNNING, 1, 1)

    steps.run_step(run_id=run.pk, tenant_id=run.tenant_id, step=2, seconds=60)
    run.refresh_from_db()
    assert (run.status, run.step_count, len(chat.requests)) == (Run.Status.NEEDS_INPUT, 2, 2)
    assert run.questions.get().question == "Which day?"
