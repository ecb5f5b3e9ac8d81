"""The demo scenario driven by a host entirely through the API, its events received as webhooks.

Only what a host cannot do through the API is set up directly: the two tenants, Tomas's account
and membership, and one API key per tenant (an owner makes those on the dashboard). The rest —
agents, intents, the webhook endpoint, the run, the answer, reading negotiations and
settlements — goes over HTTP to the live web process, and the run is stepped by the live worker.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from negotiations import demo
from parley.models import Membership, Tenant
from parley.services import api_key_create
from tests.conftest import LiveStack, make_user, wait_until
from tests.loopback import LoopbackServer

pytestmark = pytest.mark.django_db(transaction=True)

WEBHOOK_TYPES = [
    "run.needs_input",
    "run.finished",
    "question.answered",
    "negotiation.turn",
    "negotiation.settled",
    "intake.received",
]


class Inbox(LoopbackServer):
    """The host's webhook receiver: keeps each delivery's headers and raw body, answers 204."""

    what = "the webhook receiver"

    def __init__(self) -> None:
        super().__init__()
        self.deliveries: list[tuple[dict[str, str], bytes]] = []
        self.listen(Starlette(routes=[Route("/parley", self.receive, methods=["POST"])]))

    async def receive(self, request: Request) -> Response:
        self.deliveries.append((dict(request.headers), await request.body()))
        return Response(status_code=204)

    def events(self, secret: str) -> list[dict[str, Any]]:
        """Every delivery so far, verified with the Standard Webhooks reference library."""
        verifier = Webhook(secret)
        return [verifier.verify(body, headers) for headers, body in list(self.deliveries)]

    def first(self, secret: str, type_: str) -> dict[str, Any] | None:
        return next((e for e in self.events(secret) if e["type"] == type_), None)


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    with Inbox() as server:
        yield server


class Host:
    """One tenant's backend: calls the API with its key; every POST carries a fresh Idempotency-Key."""

    def __init__(self, base: str, key: str) -> None:
        self.http = httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {key}"})

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any], *, status: int = 201) -> Any:
        response = self.http.post(path, json=body, headers={"Idempotency-Key": str(uuid.uuid4())})
        assert response.status_code == status, response.text
        return response.json()


def host_of(live_stack: LiveStack, slug: str, name: str) -> Host:
    tenant = Tenant.objects.create(slug=slug, name=name)
    owner = make_user(f"owner-{slug}")
    Membership.objects.create(user=owner, tenant=tenant, role=Membership.Role.OWNER)
    _, raw = api_key_create(tenant=tenant, name="backend", scopes=["read", "write", "admin"], user=owner)
    return Host(live_stack.url, raw)


def test_a_host_drives_the_fractional_cfo_scenario_through_the_api(
    live_stack: LiveStack, inbox: Inbox
) -> None:
    guild = host_of(live_stack, "cfo-guild", "The CFO Guild")
    cfo_urls = []
    for slug, name, floor, structured in demo.CFOS:
        cfo = guild.post(
            "/agents",
            {
                "slug": slug,
                "name": name,
                "party_id": f"cfo-guild:member:{slug}",
                "description": f"Fractional CFO {name}: two days a month for seed-stage startups.",
                "system_prompt": f"You act for {name}, a fractional CFO. Never go below your day-rate floor.",
                "terms": demo.TERMS if structured else "",
                "term_guards": [{"term": "amount", "op": ">=", "value": floor, "currency": "EUR"}],
            },
        )
        guild.post("/intents", {"agent": cfo["id"], "statement": "Take on fractional CFO clients."})
        cfo_urls.append(cfo["url"])

    acme = host_of(live_stack, "acme", "Acme Robotics")
    Membership.objects.create(
        user=make_user("tomas"), tenant=Tenant.objects.get(slug="acme"), role=Membership.Role.PRINCIPAL
    )
    endpoint = acme.post("/webhook-endpoints", {"url": f"{inbox.origin}/parley", "events": WEBHOOK_TYPES})
    secret = endpoint["secret"]
    tomas = acme.post(
        "/agents",
        {
            "slug": "tomas",
            "name": "Tomas's agent",
            "party_id": "acme:user:tomas",
            "description": "Acts for Tomas Berg, founder of Acme Robotics.",
            "system_prompt": (
                "You act for Tomas Berg, founder of Acme Robotics. Never commit to a day rate above "
                "what Tomas has told you he will pay; ask him when you do not know."
            ),
            "terms": demo.TERMS,
            "principal": "tomas",
        },
    )
    intent = acme.post(
        "/intents", {"agent": tomas["id"], "statement": demo.INTENT, "external_id": "fractional-cfo"}
    )
    run = acme.post("/runs", {"agent": tomas["id"], "intent": intent["id"], "task": demo.demo_task(cfo_urls)})

    needs_input = wait_until(
        lambda: inbox.first(secret, "run.needs_input"), timeout=60, what="the run.needs_input webhook"
    )
    assert needs_input["data"]["run"] == run["id"]
    question = acme.get(f"/questions/{needs_input['data']['question']}")
    assert question["question"] == (
        "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
    )
    assert [q["id"] for q in acme.get("/questions", status="open")["results"]] == [question["id"]]
    acme.post(f"/questions/{question['id']}/answer", {"answer": "Up to €1,100 a day."}, status=200)

    finished = wait_until(lambda: inbox.first(secret, "run.finished"), timeout=120, what="run.finished")
    assert finished["data"]["run"] == run["id"]
    assert finished["data"]["status"] == "done", finished["data"]["endReason"]
    ended = acme.get(f"/runs/{run['id']}")
    assert ended["status"] == "done"
    assert ended["output"].startswith("Here is where things stand.\nSettled (3):")
    assert ended["output"] == finished["data"]["output"]

    negotiations = acme.get("/negotiations", agent=tomas["id"])["results"]
    by_counterparty = {n["counterparty_name"]: acme.get(f"/negotiations/{n['id']}") for n in negotiations}
    outcomes = {
        name: (n["settlement"]["outcome"], n["settlement"]["basis"]) for name, n in by_counterparty.items()
    }
    assert outcomes == {
        "Idris Haddad": ("agreed", "reference"),
        "Noor Lindqvist": ("declined", "state"),
        "Priya Raman": ("unconfirmed", "state"),
    }
    agreed = by_counterparty["Idris Haddad"]["settlement"]["terms"]
    assert 950 <= agreed["amount"] <= 1100
    assert agreed["currency"] == "EUR"
    assert all(n["turns"] for n in by_counterparty.values())
    assert len(acme.get("/settlements", agent=tomas["id"])["results"]) == 3

    # The CFOs' host sees the same verdicts on its side, through its own key.
    theirs = guild.get("/settlements")["results"]
    assert sorted((s["outcome"], s["basis"]) for s in theirs) == sorted(outcomes.values())

    def all_delivered() -> list[dict[str, Any]] | None:
        deliveries = acme.get("/webhook-deliveries", page_size=200)["results"]
        done = all(d["status"] == "succeeded" for d in deliveries)
        return deliveries if done and len(deliveries) == len(inbox.deliveries) else None

    deliveries = wait_until(all_delivered, timeout=30, what="every delivery recorded as succeeded")
    events = inbox.events(secret)
    types = {e["type"] for e in events}
    assert {
        "run.needs_input",
        "question.answered",
        "negotiation.turn",
        "negotiation.settled",
        "run.finished",
    } <= types
    settled = [
        e["data"]
        for e in events
        if e["type"] == "negotiation.settled" and e["data"]["outcome"] != "unanswered"
    ]
    assert sorted(s["outcome"] for s in settled) == ["agreed", "declined", "unconfirmed"]
    assert {d["last_status_code"] for d in deliveries} == {204}
    assert len({h["webhook-id"] for h, _ in inbox.deliveries}) == len(inbox.deliveries)
    assert json.loads(inbox.deliveries[0][1])["type"] in WEBHOOK_TYPES
