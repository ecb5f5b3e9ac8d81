"""``/api/v1/questions`` and ``/api/v1/approvals``: answer a question and the run resumes, approve
or reject a tool call, once; filters, tenancy and scopes. One test runs it all in a real worker."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agents.models import Agent, Message, Question, Run, Tool
from agents.offline import ASK_FOR_COUNTERPARTIES, NO_COUNTERPARTIES
from agents.services import questions, runs
from negotiations.models import Negotiation
from parley.models import Tenant
from tests.agents.conftest import LOOKUP_SCHEMA, HostServer, step
from tests.chat_server import ChatServer, text, tool_calls
from tests.conftest import LiveStack, on_chat_model, principal_member, wait_until

TASK = "Find me a fractional CFO for two days a week."
UNIT = "EUR per day"
LIMIT_QUESTION = (
    "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
)
# When an answer or decision was recorded, as the 409 states it: ISO 8601 in UTC.
WHEN = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00"


def asked(agent: Agent, statement: str = "Bring in a fractional CFO.") -> Question:
    """A real run of ``agent`` on a new intent, stepped once: the offline model asks its party which
    agents to negotiate with, and the run waits on that question."""
    run = step(runs.run_start(agent=agent, statement=statement, task=TASK))
    assert run.status == Run.Status.NEEDS_INPUT
    return Question.across_tenants.get(run=run)


def results(run: Run) -> list[tuple[str, str]]:
    """The tool results of ``run``, in order, as (tool call id, content)."""
    return list(
        Message.across_tenants.filter(run=run, role=Message.Role.TOOL)
        .order_by("seq")
        .values_list("tool_call_id", "content")
    )


@pytest.fixture
def host() -> Iterator[HostServer]:
    with HostServer() as server:
        yield server


@pytest.fixture
def approval(tenant: Tenant, principal: AbstractUser, chat: ChatServer, host: HostServer) -> Question:
    """A run of Tomas's booking agent, on the loopback model, stopped on its ``lookup`` call of order
    A-17, which needs the party's approval (the model then says "Done." whatever comes of it)."""
    agent = on_chat_model(
        Agent.objects.create(tenant=tenant, slug="booker", name="Tomas's booker", principal=principal), chat
    )
    lookup = Tool.objects.create(
        tenant=agent.tenant,
        name="lookup",
        description="Look an order up.",
        parameters=LOOKUP_SCHEMA,
        kind=Tool.Kind.HOST,
        url=f"{host.origin}/lookup",
        secret="s3cret",
        timeout=5,
        requires_approval=True,
    )
    agent.tools.add(lookup)
    chat.script(tool_calls(("c1", "lookup", '{"order": "A-17"}')), text("Done."))
    run = step(runs.run_start(agent=agent, statement="Orders.", task="Look up A-17."))
    assert run.status == Run.Status.NEEDS_INPUT
    return Question.across_tenants.get(run=run)


def error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    return dict(response.json()["error"])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("answer", "understood"),
    [
        (
            "Not above €1,100 a day.",
            {
                "message": "Understood: at most 1,100 EUR per day for amount.",
                "limit": {
                    "term": "amount",
                    "kind": "ceiling",
                    "value": 1100.0,
                    "currency": "EUR",
                    "unit": UNIT,
                },
            },
        ),
        (
            "Day 2 of the month is fine; up to 1100",
            {
                "message": "Your answer gives no usable limit on amount (EUR per day): it names several "
                "numbers (Day 2 and 1100).",
                "limit": None,
            },
        ),
    ],
)
def test_the_answer_says_what_the_runs_negotiations_understood_of_the_limit_they_asked_for(
    api: APIClient, agent: Agent, answer: str, understood: dict[str, Any]
) -> None:
    """The offline loop answers the negotiations waiting on the party with the party's words; the
    limit their negotiator reads there (or why none) comes back with the answer."""
    question = asked(agent)
    Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=question.run.intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_name="Idris Haddad",
        counterparty_url="https://idris.example/a2a",
        status=Negotiation.Status.WAITING,
        parked_question=LIMIT_QUESTION,
    )

    response = api.post(f"/api/v1/questions/{question.pk}/answer", {"answer": answer}, format="json")

    assert response.status_code == 200
    assert response.json()["understood"] == understood
    assert api.get(f"/api/v1/questions/{question.pk}").json()["answer"] == answer


@pytest.mark.django_db
def test_an_answer_through_the_api_resumes_the_run(api: APIClient, agent: Agent) -> None:
    question = asked(agent)

    response = api.post(
        f"/api/v1/questions/{question.pk}/answer", {"answer": "  Nobody yet.  "}, format="json"
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["answer"], body["answered_by"]) == ("answered", "Nobody yet.", None)
    assert body["answered_at"] is not None
    assert body["understood"] is None  # no negotiation asked for a limit
    run = question.run
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert results(run) == [(question.tool_call_id, "Nobody yet.")]

    step(run)  # the worker's next step: the offline model, told nobody, finishes
    read = api.get(f"/api/v1/runs/{run.pk}").json()
    assert (read["status"], read["output"], read["open_questions"]) == ("done", NO_COUNTERPARTIES, [])
    call = read["steps"][1]["tool_calls"][0]
    assert (call["result"], call["question"]["answer"], call["question"]["answered_by"]) == (
        "Nobody yet.",
        "Nobody yet.",
        None,
    )
    assert read["steps"][2]["model_call"]["content"] == NO_COUNTERPARTIES


@pytest.mark.django_db
def test_a_question_answered_before_is_409_saying_by_whom_and_when(
    api: APIClient, agent: Agent, principal: AbstractUser
) -> None:
    question = asked(agent)
    questions.question_answer(question=question, answer="Nobody yet.", user=principal)

    refused = error(
        api.post(f"/api/v1/questions/{question.pk}/answer", {"answer": "Someone."}, format="json"), 409
    )

    assert refused["code"] == "conflict"
    assert re.fullmatch(f"This question was already answered by tomas at {WHEN}\\.", refused["message"])
    question.refresh_from_db()
    assert (question.answer, question.answered_by_id) == ("Nobody yet.", principal.pk)

    runs.run_cancel(run=question.run, user=None)
    by_host = asked(agent, statement="Another thread.")
    assert (
        api.post(f"/api/v1/questions/{by_host.pk}/answer", {"answer": "No."}, format="json").status_code
        == 200
    )
    again = error(api.post(f"/api/v1/questions/{by_host.pk}/answer", {"answer": "Yes."}, format="json"), 409)
    assert re.fullmatch(f"This question was already answered by the host at {WHEN}\\.", again["message"])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"answer": "   "}, "This field may not be blank."),
        ({}, "This field is required."),
        ({"answer": None}, "This field may not be null."),
    ],
)
def test_an_empty_answer_is_400_naming_answer(
    api: APIClient, agent: Agent, body: dict[str, Any], message: str
) -> None:
    question = asked(agent)

    refused = error(api.post(f"/api/v1/questions/{question.pk}/answer", body, format="json"), 400)

    assert refused["fields"] == {"answer": [message]}
    question.refresh_from_db()
    assert question.is_open


@pytest.mark.django_db
def test_a_question_of_a_run_that_ended_is_closed_and_takes_no_answer(api: APIClient, agent: Agent) -> None:
    question = asked(agent)
    runs.run_cancel(run=question.run, user=None)

    refused = error(
        api.post(f"/api/v1/questions/{question.pk}/answer", {"answer": "Later."}, format="json"), 409
    )

    assert refused["message"] == "The run is cancelled; it no longer takes answers."
    assert api.get(f"/api/v1/questions/{question.pk}").json()["status"] == "closed"
    question.refresh_from_db()
    assert question.is_open


@pytest.mark.django_db
def test_the_questions_list_filters_by_status_agent_and_run(
    api: APIClient, agent: Agent, tenant: Tenant, approval: Question
) -> None:
    noor = Agent.objects.create(
        tenant=tenant, slug="noor", name="Noor's agent", principal=principal_member(tenant, "noor")
    )
    answered = asked(agent, statement="First thread.")
    questions.question_answer(question=answered, answer="Nobody.", user=None)
    closed = asked(agent, statement="Second thread.")
    runs.run_cancel(run=closed.run, user=None)
    hers = asked(noor)

    def listed(query: str = "") -> list[str]:
        response = api.get(f"/api/v1/questions{query}")
        assert response.status_code == 200, response.content
        return [q["id"] for q in response.json()["results"]]

    ids = {q: str(q.pk) for q in (answered, closed, hers)}
    assert listed() == [ids[hers], ids[closed], ids[answered]]  # newest first; no approval
    assert listed("?status=open") == [ids[hers]]
    assert listed("?status=answered") == [ids[answered]]
    assert listed("?status=closed") == [ids[closed]]
    assert listed(f"?agent={agent.pk}") == [ids[closed], ids[answered]]
    assert listed(f"?run={closed.run_id}") == [ids[closed]]
    assert listed(f"?agent={noor.pk}&status=answered") == []
    detail = api.get(f"/api/v1/questions/{hers.pk}").json()
    assert (detail["run"], detail["agent"], detail["intent"], detail["question"], detail["status"]) == (
        str(hers.run_id),
        str(noor.pk),
        str(hers.run.intent_id),
        ASK_FOR_COUNTERPARTIES,
        "open",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("status=unanswered", "status"),
        ("agent=nope", "agent"),
        ("run=00000000-0000-0000-0000-000000000000", "run"),
    ],
)
def test_a_bad_question_filter_is_400_naming_it(api: APIClient, query: str, named: str) -> None:
    assert list(error(api.get(f"/api/v1/questions?{query}"), 400)["fields"]) == [named]


@pytest.mark.django_db
def test_approving_runs_the_tool_with_the_arguments_shown(
    api: APIClient, approval: Question, host: HostServer
) -> None:
    shown = api.get(f"/api/v1/approvals/{approval.pk}").json()
    assert (shown["tool_name"], shown["arguments"], shown["status"], shown["decision"]) == (
        "lookup",
        {"order": "A-17"},
        "open",
        None,
    )

    response = api.post(f"/api/v1/approvals/{approval.pk}/approve", {}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decision"], body["reason"], body["decided_by"]) == (
        "answered",
        "approved",
        "",
        None,
    )
    run = approval.run
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    questions.approved_tool_run(question_id=approval.pk, tenant_id=run.tenant_id)  # as the worker does
    assert [b["arguments"] for b in host.received] == [{"order": "A-17"}]
    step(run)
    assert (run.status, run.output) == (Run.Status.DONE, "Done.")
    assert results(run) == [("c1", "Order A-17 ships Monday.")]

    again = error(api.post(f"/api/v1/approvals/{approval.pk}/reject", {"reason": "No."}, format="json"), 409)
    assert re.fullmatch(f"This approval was already approved by the host at {WHEN}\\.", again["message"])


@pytest.mark.django_db
def test_rejecting_tells_the_model_the_reason(api: APIClient, approval: Question, host: HostServer) -> None:
    response = api.post(f"/api/v1/approvals/{approval.pk}/reject", {"reason": "Not now."}, format="json")

    assert response.status_code == 200
    assert (response.json()["decision"], response.json()["reason"]) == ("rejected", "Not now.")
    run = approval.run
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert results(run) == [("c1", "rejected: Not now.")]
    assert host.received == []


@pytest.mark.django_db
def test_questions_and_approvals_are_each_their_own_kind(
    api: APIClient, agent: Agent, approval: Question
) -> None:
    question = asked(agent, statement="Another thread.")

    assert error(api.post(f"/api/v1/questions/{approval.pk}/answer", {"answer": "Yes."}, format="json"), 404)
    assert error(api.post(f"/api/v1/approvals/{question.pk}/approve", {}, format="json"), 404)
    assert [a["id"] for a in api.get("/api/v1/approvals").json()["results"]] == [str(approval.pk)]
    assert [a["id"] for a in api.get("/api/v1/approvals?status=open").json()["results"]] == [str(approval.pk)]
    run = api.get(f"/api/v1/runs/{approval.run_id}").json()
    assert [(q["id"], q["kind"]) for q in run["open_questions"]] == [(str(approval.pk), "approval")]
    approval.refresh_from_db()
    question.refresh_from_db()
    assert approval.is_open
    assert question.is_open


@pytest.mark.django_db
def test_another_tenants_question_and_approval_are_404_and_stay_open(
    other_api: APIClient, agent: Agent, approval: Question
) -> None:
    question = asked(agent, statement="Another thread.")

    assert error(other_api.get(f"/api/v1/questions/{question.pk}"), 404)["code"] == "not_found"
    assert error(
        other_api.post(f"/api/v1/questions/{question.pk}/answer", {"answer": "Hi."}, format="json"), 404
    )
    assert error(other_api.get(f"/api/v1/approvals/{approval.pk}"), 404)
    for verdict in ("approve", "reject"):
        assert error(other_api.post(f"/api/v1/approvals/{approval.pk}/{verdict}", {}, format="json"), 404)
    assert other_api.get("/api/v1/questions").json()["results"] == []
    assert other_api.get("/api/v1/approvals").json()["results"] == []
    question.refresh_from_db()
    approval.refresh_from_db()
    assert question.is_open
    assert approval.is_open
    assert approval.approved is None
    assert Run.across_tenants.get(pk=question.run_id).status == Run.Status.NEEDS_INPUT


@pytest.mark.django_db
def test_a_read_only_key_reads_questions_but_cannot_answer_or_decide(
    tenant: Tenant,
    agent: Agent,
    approval: Question,
    key_for: Callable[..., str],
    client_for: Callable[[str], APIClient],
) -> None:
    reader = client_for(key_for(tenant, scopes=("read",), name="reader"))
    question = asked(agent, statement="Another thread.")

    assert reader.get(f"/api/v1/questions/{question.pk}").status_code == 200
    assert error(
        reader.post(f"/api/v1/questions/{question.pk}/answer", {"answer": "Hi."}, format="json"), 403
    )
    assert error(reader.post(f"/api/v1/approvals/{approval.pk}/approve", {}, format="json"), 403)
    question.refresh_from_db()
    approval.refresh_from_db()
    assert question.is_open
    assert approval.is_open


@pytest.mark.django_db(transaction=True)
def test_start_answer_and_finish_through_the_api_in_a_worker(
    live_stack: LiveStack, api: APIClient, agent: Agent
) -> None:
    started = api.post(
        "/api/v1/runs", {"agent": str(agent.pk), "statement": "Hire.", "task": TASK}, format="json"
    )
    assert started.status_code == 201
    url = f"/api/v1/runs/{started.json()['id']}"

    waiting = wait_until(
        lambda: (body := api.get(url).json())["status"] == "needs_input" and body,
        what="the run to ask its question",
    )
    [question] = waiting["open_questions"]
    assert question["question"] == ASK_FOR_COUNTERPARTIES
    answered = api.post(
        f"/api/v1/questions/{question['id']}/answer", {"answer": "Nobody yet."}, format="json"
    )
    assert answered.status_code == 200

    done = wait_until(
        lambda: (body := api.get(url).json())["status"] == "done" and body, what="the run to finish"
    )
    assert done["output"] == NO_COUNTERPARTIES
    assert done["steps"][1]["tool_calls"][0]["result"] == "Nobody yet."


@pytest.mark.django_db
def test_the_list_reads_in_a_fixed_number_of_queries(
    api: APIClient, agent: Agent, principal: AbstractUser
) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert api.get("/api/v1/questions").status_code == 200
        return len(captured)

    questions.question_answer(question=asked(agent, statement="One."), answer="No.", user=principal)
    queries()  # the key's first use is recorded once
    one = queries()
    for n in range(3):
        asked(agent, statement=f"Thread {n}.")

    assert queries() == one
