"""Two web processes and two workers, as in production, started as the container image starts them
(``python -m parley.processes web|worker|beat``): whichever process takes a request, it sees the one
truth in Postgres and Redis.

* A run started through one web process negotiates (its counterparty's endpoint is the other's
  public URL) and both read the same run through the host API.
* A dashboard socket on one web process hears the question a run started through the other asks.
* A counterparty's follow-up to a task begun on one web process is taken by the other, and the push
  config set on that one carries the follow-up's events.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.test import Client
from websockets.asyncio.client import connect

from agents.addresses import agent_url
from agents.models import Agent, Intent, Question, Run
from agents.offline import ASK_FOR_COUNTERPARTIES
from negotiations.models import Negotiation
from parley.models import Membership, Tenant
from parley.services import api_key_create
from tests.a2a_gateway.conftest import proposal
from tests.a2a_gateway.rpc import call, message, task_of
from tests.a2a_gateway.servers import PushReceiver
from tests.conftest import make_user, wait_until
from tests.negotiations.test_worker_kills import DAY_RATE, buyers, eur, record, sellers, verdict
from tests.parley.conftest import Deployment
from tests.parley.test_live_socket import next_frame

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def api_key(tenant: Tenant) -> str:
    owner = make_user(f"{tenant.slug}-owner")
    Membership.objects.create(user=owner, tenant=tenant, role=Membership.Role.OWNER)
    return api_key_create(tenant=tenant, name="many processes", scopes=("read", "write"), user=owner)[1]


def run_ended(run_id: str) -> Run | None:
    run = Run.across_tenants.get(pk=run_id)
    return run if run.status not in (*Run.STEPPING, Run.Status.WAITING) else None


def test_a_run_started_on_one_web_process_negotiates_through_the_other_and_both_read_it(
    deployment: Deployment,
) -> None:
    [seller] = sellers(1)
    tenant, [(buyer, intent)] = buyers(1)
    headers = {"Authorization": f"Bearer {api_key(tenant)}"}
    started = httpx.post(
        f"{deployment.webs[1]}/api/v1/runs",
        json={"agent": str(buyer.pk), "intent": str(intent.pk), "task": f"Talk to {agent_url(seller)}"},
        headers=headers,
        timeout=30,
    )
    assert started.status_code == 201, started.text
    run = wait_until(lambda: run_ended(started.json()["id"]), timeout=120, what="the run to end")

    ours = Negotiation.across_tenants.get(agent=buyer)
    theirs = Negotiation.across_tenants.get(agent=seller)
    assert (run.status, ours.status) == (Run.Status.DONE, Negotiation.Status.SETTLED)
    assert record(ours) == record(theirs) != []
    assert verdict(ours) == verdict(theirs)
    assert (verdict(ours) or ("none",))[0] == "agreed"
    read = [httpx.get(f"{web}/api/v1/runs/{run.pk}", headers=headers, timeout=30) for web in deployment.webs]
    assert [answer.status_code for answer in read] == [200, 200]
    assert read[0].json() == read[1].json()
    assert read[0].json()["status"] == "done"


def test_a_dashboard_socket_on_one_web_process_hears_a_question_asked_through_the_other(
    deployment: Deployment, client: Client
) -> None:
    tenant = Tenant.objects.create(slug="askers", name="Askers")
    party = make_user("asker")
    Membership.objects.create(user=party, tenant=tenant, role=Membership.Role.PRINCIPAL)
    agent = Agent.objects.create(tenant=tenant, slug="asker", name="Asker", principal=party)
    intent = Intent.objects.create(tenant=tenant, agent=agent, statement="Find me a fractional CFO.")
    headers = {"Authorization": f"Bearer {api_key(tenant)}"}
    client.force_login(party)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    listening, asking = deployment.webs[1], deployment.webs[0]

    async def listen_then_ask() -> dict[str, Any]:
        address = listening.replace("http://", "ws://") + "/ws/live/"
        async with connect(address, additional_headers={"Cookie": cookie, "Origin": listening}) as socket:
            async with httpx.AsyncClient(base_url=asking, headers=headers, timeout=30) as api:
                answer = await api.post(
                    "/api/v1/runs",
                    json={"agent": str(agent.pk), "intent": str(intent.pk), "task": "Find one."},
                )
                assert answer.status_code == 201, answer.text
            return await next_frame(socket, "question.opened")

    frame = asyncio.run(listen_then_ask())

    question = Question.across_tenants.get(run__agent=agent)
    assert question.question == ASK_FOR_COUNTERPARTIES
    assert frame["payload"]["question"] == str(question.pk)


def test_a_follow_up_and_its_push_reach_the_task_whichever_web_process_takes_them(
    deployment: Deployment,
) -> None:
    tenant = Tenant.objects.create(slug="solo", name="Solo")
    seller = Agent.objects.create(
        tenant=tenant,
        slug="seller",
        name="Seller",
        terms=DAY_RATE,
        term_guards=[eur(">=", 950, aspiration=1250)],
    )
    path = agent_url(seller).removeprefix(deployment.webs[0])
    first, other = (f"{web}{path}" for web in deployment.webs)

    with PushReceiver() as receiver:
        task = task_of(call(first, "SendMessage", message(proposal(800))))
        created = call(
            other, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1", "url": receiver.url}
        )
        assert "error" not in created.json(), created.text
        follow_up = task_of(call(other, "SendMessage", message(proposal(900), task=task)))

        def follow_up_pushed() -> bool:
            states = [
                body["statusUpdate"]["status"]["state"]
                for body in receiver.bodies()
                if "statusUpdate" in body
            ]
            return bool(states) and states[-1] != "TASK_STATE_WORKING"

        wait_until(follow_up_pushed, what="the follow-up's events pushed")

    read = task_of_get(call(first, "GetTask", {"id": task["id"]}))
    assert follow_up["id"] == task["id"]
    assert len(read["history"]) == len(follow_up["history"]) >= 4
    assert {
        body[next(iter(body))].get("taskId", body[next(iter(body))].get("id")) for body in receiver.bodies()
    } == {task["id"]}


def task_of_get(response: httpx.Response) -> dict[str, Any]:
    """The Task a ``GetTask`` answered with."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert "error" not in body, body
    return dict(body["result"])
