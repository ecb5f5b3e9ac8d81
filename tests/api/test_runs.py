"""``/api/v1/runs``: start a run, read it with its steps, cancel it; filters, tenancy, scopes and
Idempotency-Key on the start."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import Agent, Intent, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES
from agents.services import runs
from parley.models import Tenant
from tests.agents.conftest import step

pytestmark = pytest.mark.django_db

TASK = "Find me a fractional CFO for two days a week."


def start(api: APIClient, **body: Any) -> Any:
    return api.post("/api/v1/runs", body, format="json")


def fields(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    body = response.json()["error"]
    assert body["code"] == "invalid"
    return dict(body["fields"])


def test_a_run_started_on_a_new_intent_is_read_back_with_its_steps(api: APIClient, agent: Agent) -> None:
    response = start(api, agent=str(agent.pk), statement="Bring in a fractional CFO.", task=TASK)

    assert response.status_code == 201
    body = response.json()
    run = Run.across_tenants.get(pk=body["id"])
    intent = Intent.across_tenants.get(pk=body["intent"])
    assert (intent.agent_id, intent.statement) == (agent.pk, "Bring in a fractional CFO.")
    assert (body["agent"], body["status"], body["task"], body["parent"]) == (
        str(agent.pk),
        "queued",
        TASK,
        None,
    )
    assert body["usage"] == {"input_tokens": 0, "output_tokens": 0, "cost": "0.000000"}
    assert body["limits"] == {"max_tokens": None, "max_cost": None, "deadline": None}
    assert [(s["number"], [n["content"] for n in s["notes"]]) for s in body["steps"]] == [(0, [TASK])]
    assert body["open_questions"] == []

    step(run)  # the worker's first step: the offline model asks its party whom to negotiate with
    body = api.get(f"/api/v1/runs/{run.pk}").json()

    question = Question.across_tenants.get(run=run)
    assert (body["status"], body["step_count"], body["end_reason"]) == ("needs_input", 1, "")
    first = body["steps"][1]
    assert (first["number"], first["model_call"]["model"], first["attempts"]) == (1, "offline", [])
    [call] = first["tool_calls"]
    assert (call["name"], json.loads(call["arguments"]), call["result"], call["child_run"]) == (
        "ask_user",
        {"question": ASK_FOR_COUNTERPARTIES},
        None,
        None,
    )
    assert call["question"]["id"] == str(question.pk)
    assert (call["question"]["kind"], call["question"]["answered_by"], call["question"]["answered_at"]) == (
        "question",
        None,
        None,
    )
    assert [(q["id"], q["kind"], q["question"]) for q in body["open_questions"]] == [
        (str(question.pk), "question", ASK_FOR_COUNTERPARTIES)
    ]


def test_a_run_on_an_existing_intent_keeps_its_limits(api: APIClient, agent: Agent, intent: Intent) -> None:
    deadline = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}

    response = start(
        api,
        agent=str(agent.pk),
        intent=str(intent.pk),
        task=TASK,
        output_schema=schema,
        max_tokens=5000,
        max_cost="1.5",
        deadline=deadline.isoformat(),
    )

    assert response.status_code == 201
    body = response.json()
    assert (body["intent"], body["output_schema"]) == (str(intent.pk), schema)
    assert body["limits"] == {
        "max_tokens": 5000,
        "max_cost": "1.500000",
        "deadline": deadline.astimezone(timezone.get_current_timezone()).isoformat().replace("+00:00", "Z"),
    }
    run = Run.across_tenants.get(pk=body["id"])
    assert (run.intent_id, run.max_tokens, run.deadline) == (intent.pk, 5000, deadline)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"statement": "Also this."}, ["intent", "statement"]),  # both an intent and a statement
        ({"intent": None}, ["intent", "statement"]),  # neither
        ({"task": "   "}, ["task"]),
        ({"task": None}, ["task"]),
        ({"output_schema": {"type": "array"}}, ["output_schema"]),
        ({"output_schema": {"type": "object", "properties": 3}}, ["output_schema"]),
        ({"output_schema": ["not", "an", "object"]}, ["output_schema"]),
        ({"max_tokens": 0}, ["max_tokens"]),
        ({"max_tokens": 2**40}, ["max_tokens"]),
        ({"max_cost": "0"}, ["max_cost"]),
        ({"max_cost": "1e20"}, ["max_cost"]),
        ({"deadline": "2001-01-01T00:00:00Z"}, ["deadline"]),
        ({"deadline": "soon"}, ["deadline"]),
        ({"agent": "not-a-uuid"}, ["agent"]),
        ({"agent": "00000000-0000-0000-0000-000000000000"}, ["agent"]),
        ({"intent": "00000000-0000-0000-0000-000000000000"}, ["intent"]),
    ],
)
def test_a_start_that_cannot_be_made_is_400_naming_the_field_and_creates_nothing(
    api: APIClient, agent: Agent, intent: Intent, change: dict[str, Any], named: list[str]
) -> None:
    body = {"agent": str(agent.pk), "intent": str(intent.pk), "task": TASK, **change}

    assert sorted(fields(start(api, **body))) == named
    assert (Run.across_tenants.count(), Intent.across_tenants.count()) == (0, 1)


def test_an_intent_of_another_agent_is_400_at_intent(api: APIClient, agent: Agent, tenant: Tenant) -> None:
    noor = Agent.objects.create(tenant=tenant, slug="noor", name="Noor's agent")
    hers = Intent.objects.create(tenant=tenant, agent=noor, statement="Hire a designer.")

    response = start(api, agent=str(agent.pk), intent=str(hers.pk), task=TASK)

    assert fields(response) == {"intent": ["That intent belongs to another agent."]}
    assert not Run.across_tenants.exists()


def test_another_tenants_agent_or_intent_is_400_at_its_field_never_a_run(
    api: APIClient, agent: Agent, seller: Agent
) -> None:
    theirs = Intent.objects.create(tenant=seller.tenant, agent=seller, statement="Sell.")

    by_agent = start(api, agent=str(seller.pk), statement="Sell for them.", task=TASK)
    by_intent = start(api, agent=str(agent.pk), intent=str(theirs.pk), task=TASK)

    assert fields(by_agent) == {"agent": ["This tenant has no agent with this id."]}
    assert fields(by_intent) == {"intent": ["This tenant has no intent with this id."]}
    assert not Run.across_tenants.exists()
    assert list(Intent.across_tenants.values_list("statement", flat=True)) == ["Sell."]


def test_a_busy_thread_is_a_409(api: APIClient, agent: Agent, intent: Intent) -> None:
    first = runs.run_start(agent=agent, intent=intent, task=TASK)

    response = start(api, agent=str(agent.pk), intent=str(intent.pk), task="Another thing.")

    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "conflict",
        "message": f"Run {first.pk} of this intent is still queued; wait for it or cancel it.",
    }
    assert Run.across_tenants.count() == 1


def test_a_retried_start_with_the_same_idempotency_key_makes_one_run(
    api: APIClient, agent: Agent, intent: Intent
) -> None:
    body = {"agent": str(agent.pk), "intent": str(intent.pk), "task": TASK}

    first = api.post("/api/v1/runs", body, format="json", HTTP_IDEMPOTENCY_KEY="start-1")
    again = api.post("/api/v1/runs", body, format="json", HTTP_IDEMPOTENCY_KEY="start-1")
    other = api.post(
        "/api/v1/runs", {**body, "task": "Something else."}, format="json", HTTP_IDEMPOTENCY_KEY="start-1"
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert [str(pk) for pk in Run.across_tenants.values_list("pk", flat=True)] == [first.json()["id"]]


def test_cancel_ends_an_active_run_once(api: APIClient, agent: Agent, intent: Intent) -> None:
    run = step(runs.run_start(agent=agent, intent=intent, task=TASK))

    response = api.post(f"/api/v1/runs/{run.pk}/cancel")

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["end_reason"]) == (
        "cancelled",
        "Cancelled by the host.",
    )
    assert response.json()["open_questions"] == []
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    again = api.post(f"/api/v1/runs/{run.pk}/cancel")
    assert again.status_code == 409
    assert again.json()["error"] == {"code": "conflict", "message": "The run already ended (cancelled)."}


def test_another_tenants_run_is_404_and_is_not_cancelled(
    other_api: APIClient, agent: Agent, intent: Intent
) -> None:
    run = runs.run_start(agent=agent, intent=intent, task=TASK)

    assert other_api.get(f"/api/v1/runs/{run.pk}").status_code == 404
    cancel = other_api.post(f"/api/v1/runs/{run.pk}/cancel")
    assert cancel.status_code == 404
    assert cancel.json()["error"]["code"] == "not_found"
    assert other_api.get("/api/v1/runs").json()["results"] == []
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED


@pytest.mark.parametrize(
    "path", ["/api/v1/runs/not-a-uuid", "/api/v1/runs/00000000-0000-0000-0000-000000000000"]
)
def test_an_unknown_run_is_404(api: APIClient, path: str) -> None:
    response = api.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_read_only_key_reads_runs_but_cannot_start_or_cancel_one(
    tenant: Tenant,
    agent: Agent,
    intent: Intent,
    key_for: Callable[..., str],
    client_for: Callable[[str], APIClient],
) -> None:
    reader = client_for(key_for(tenant, scopes=("read",), name="reader"))
    run = runs.run_start(agent=agent, intent=intent, task=TASK)

    assert reader.get(f"/api/v1/runs/{run.pk}").status_code == 200
    refused = start(reader, agent=str(agent.pk), statement="More.", task=TASK)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "This API key lacks the 'write' scope this operation needs."
    assert reader.post(f"/api/v1/runs/{run.pk}/cancel").status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert Run.across_tenants.count() == 1


def test_the_list_is_newest_first_and_filters_by_agent_intent_and_status(
    api: APIClient, agent: Agent, intent: Intent, tenant: Tenant
) -> None:
    noor = Agent.objects.create(tenant=tenant, slug="noor", name="Noor's agent")
    first = runs.run_start(agent=agent, intent=intent, task="One.")
    runs.run_cancel(run=first, user=None)
    second = runs.run_start(agent=agent, intent=intent, task="Two.")
    hers = runs.run_start(agent=noor, statement="Hire a designer.", task="Three.")

    def listed(query: str = "") -> list[str]:
        response = api.get(f"/api/v1/runs{query}")
        assert response.status_code == 200, response.content
        return [r["task"] for r in response.json()["results"]]

    assert listed() == ["Three.", "Two.", "One."]
    assert listed(f"?agent={noor.pk}") == ["Three."]
    assert listed(f"?intent={intent.pk}") == ["Two.", "One."]
    assert listed("?status=cancelled") == ["One."]
    assert listed(f"?agent={agent.pk}&status=queued") == ["Two."]
    assert listed(f"?intent={hers.intent_id}&status=cancelled") == []
    assert second.status == Run.Status.QUEUED


def test_the_list_pages_by_cursor(api: APIClient, agent: Agent) -> None:
    for n in range(3):
        runs.run_start(agent=agent, statement=f"Thread {n}.", task=f"Task {n}.")

    page = api.get("/api/v1/runs?page_size=2").json()
    rest = api.get(page["next"]).json()

    assert [r["task"] for r in page["results"]] + [r["task"] for r in rest["results"]] == [
        "Task 2.",
        "Task 1.",
        "Task 0.",
    ]
    assert rest["next"] is None


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("status=nope", "status"),
        ("agent=not-a-uuid", "agent"),
        ("agent=00000000-0000-0000-0000-000000000000", "agent"),
        ("intent=12", "intent"),
    ],
)
def test_a_bad_filter_is_400_naming_it(api: APIClient, query: str, named: str) -> None:
    assert list(fields(api.get(f"/api/v1/runs?{query}"))) == [named]


def test_another_tenants_agent_as_a_filter_is_400_never_its_runs(
    api: APIClient, seller: Agent, agent: Agent
) -> None:
    runs.run_start(agent=seller, statement="Sell.", task="Sell something.")

    response = api.get(f"/api/v1/runs?agent={seller.pk}")

    assert list(fields(response)) == ["agent"]
    assert "Sell something." not in response.content.decode()
