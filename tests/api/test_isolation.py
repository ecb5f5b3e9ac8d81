"""Tenant isolation over every endpoint of the API: another tenant's key and ids get 404, and
nothing of either tenant changes.

The table of operations is read from the generated OpenAPI schema, so an endpoint added later
without a row here fails :func:`test_every_operation_of_the_schema_is_in_the_matrix`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import AbstractUser
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from agents.models import Agent, Intent, ModelEndpoint, Question, Run, Tool
from exchange.models import ExchangeProfile, OutboundExchange
from negotiations.models import CounterpartyCredential, Negotiation, Settlement, Turn
from parley.models import Event, Tenant, TenantOwnedModel, WebhookDelivery, WebhookEndpoint
from representative.models import GroundingDocument, IntakeRequest

pytestmark = pytest.mark.django_db

# A public key for Agent Exchange profiles (EC P-256, no private part).
PUBLIC_JWKS = {
    "keys": [
        {
            "kty": "EC",
            "crv": "P-256",
            "x": "51kvWFY2t2JknOAz3aJPIE_4uDVTwEfhN-Hr9tKaJl8",
            "y": "nbOq1ITWoDNE2nxCSDPJGd-C3agM2EkuRhoV9ydALCU",
            "kid": "k1",
        }
    ]
}
EXCHANGE_REQUEST = {
    "exchangeId": "ex-taken",
    "recipient": "https://peer.example/a2a/globex/helpdesk",
    "purpose": "Taken over",
    "instruction": "Do it for me.",
    "expiresAt": 4102444800,
    "delegation": {"accessToken": "a.b.c"},
}

# A valid body for each write, so that only the other tenant's id can be why it fails.
BODIES: dict[tuple[str, str], Any] = {
    ("PATCH", "/api/v1/agents/{id}"): {"name": "Taken over"},
    ("PUT", "/api/v1/agents/{id}/exchange-profile"): {"issuer": "https://taken.example", "jwks": PUBLIC_JWKS},
    ("POST", "/api/v1/agents/{id}/exchanges"): {
        "url": "https://peer.example/a2a/globex/helpdesk",
        "request": EXCHANGE_REQUEST,
    },
    ("POST", "/api/v1/agents/{id}/host-name/verify"): {},
    ("PUT", "/api/v1/agents/{id}/term-guards"): [],
    ("POST", "/api/v1/approvals/{id}/approve"): {},
    ("POST", "/api/v1/approvals/{id}/reject"): {"reason": "no"},
    ("PATCH", "/api/v1/counterparty-credentials/{id}"): {"secret": "taken"},
    ("PATCH", "/api/v1/grounding-documents/{id}"): {"title": "Taken over"},
    ("PATCH", "/api/v1/intents/{id}"): {"external_id": "taken"},
    ("PATCH", "/api/v1/model-endpoints/{id}"): {"name": "taken"},
    ("POST", "/api/v1/negotiations/{id}/answer"): {"answer": "At least 1,000 a day."},
    ("POST", "/api/v1/questions/{id}/answer"): {"answer": "Yes."},
    ("POST", "/api/v1/runs/{id}/cancel"): {},
    ("PATCH", "/api/v1/tools/{id}"): {"description": "Taken over."},
    ("POST", "/api/v1/webhook-deliveries/{id}/resend"): {},
    ("PATCH", "/api/v1/webhook-endpoints/{id}"): {"active": False},
    ("POST", "/api/v1/webhook-endpoints/{id}/rotate-secret"): {},
}


def operations() -> list[tuple[str, str]]:
    """Every (method, path) of the generated schema."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    )


@pytest.fixture
def theirs(tenant: Tenant, agent: Agent, intent: Intent, principal: AbstractUser) -> dict[str, str]:
    """One of each object ``tenant`` owns, by the collection its id goes in."""
    tool = Tool.objects.create(
        tenant=tenant,
        name="lookup",
        description="Look up.",
        kind=Tool.Kind.HOST,
        url="https://host.example/lookup",
        secret="s3cret",
    )
    endpoint = ModelEndpoint.objects.create(
        tenant=tenant, name="house", base_url="https://llm.example/v1", upstream_model="m"
    )
    document = GroundingDocument.objects.create(tenant=tenant, agent=agent, title="Rates", text="€900")
    run = Run.objects.create(
        tenant=tenant, agent=agent, intent=intent, task="Find a CFO.", status=Run.Status.NEEDS_INPUT
    )
    question = Question.objects.create(
        tenant=tenant, run=run, tool_call_id="c1", tool_name="ask_user", question="Your limit?"
    )
    approval = Question.objects.create(
        tenant=tenant,
        run=run,
        tool_call_id="c2",
        tool_name="lookup",
        kind=Question.Kind.APPROVAL,
        question="Run lookup?",
    )
    negotiation = Negotiation.objects.create(
        tenant=tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="https://cfo.example/a2a",
    )
    Turn.objects.create(
        tenant=tenant,
        negotiation=negotiation,
        seq=1,
        side=Turn.Side.OURS,
        action="offer",
        terms={"amount": 900},
    )
    settlement = Settlement.objects.create(
        tenant=tenant,
        negotiation=negotiation,
        outcome=Settlement.Outcome.AGREED,
        basis=Settlement.Basis.REFERENCE,
        terms={"amount": 900},
    )
    credential = CounterpartyCredential.objects.create(
        tenant=tenant, agent=agent, url_prefix="https://peer.example/a2a", secret="s3cret"
    )
    intake = IntakeRequest.objects.create(tenant=tenant, agent=agent, caller="anon", summary="Call me.")
    hook = WebhookEndpoint.objects.create(
        tenant=tenant,
        url="https://host.example/hook",
        events=["run.finished"],
        secret="whsec_c2VjcmV0c2VjcmV0c2VjcmV0",
    )
    event = Event.objects.create(tenant=tenant, kind="run.finished", payload={"run": str(run.pk)})
    delivery = WebhookDelivery.objects.create(
        tenant=tenant,
        endpoint=hook,
        event=event,
        event_type="run.finished",
        payload={},
        status=WebhookDelivery.Status.FAILED,
        window_opened_at=timezone.now(),
    )
    # The agent's Agent Exchange profile and a request it sent: a GET under the agent would show them.
    ExchangeProfile.objects.create(
        tenant=tenant, agent=agent, issuer="https://auth.example", jwks=PUBLIC_JWKS
    )
    OutboundExchange.objects.create(
        tenant=tenant,
        agent=agent,
        url="https://peer.example/a2a/globex/helpdesk",
        exchange_id="ex-1",
        reference="sha256:" + "A" * 43,
    )
    return {
        "agents": str(agent.pk),
        "intents": str(intent.pk),
        "tools": str(tool.pk),
        "model-endpoints": str(endpoint.pk),
        "grounding-documents": str(document.pk),
        "counterparty-credentials": str(credential.pk),
        "runs": str(run.pk),
        "questions": str(question.pk),
        "approvals": str(approval.pk),
        "negotiations": str(negotiation.pk),
        "settlements": str(settlement.pk),
        "intake-requests": str(intake.pk),
        "webhook-endpoints": str(hook.pk),
        "webhook-deliveries": str(delivery.pk),
    }


def snapshot() -> dict[str, set[tuple[Any, ...]]]:
    """Every tenant-owned row of every model: its tenant, key and last change."""
    rows: dict[str, set[tuple[Any, ...]]] = {}
    for model in apps.get_models():
        if issubclass(model, TenantOwnedModel) and model._meta.label != "api.IdempotencyKey":
            rows[model._meta.label] = set(model.across_tenants.values_list("tenant_id", "pk", "updated_at"))
    return rows


def collection(path: str) -> str:
    return path.removeprefix("/api/v1/").split("/")[0]


@pytest.fixture
def intruder(
    other_tenant: Tenant, key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> APIClient:
    """The other tenant's backend, with every scope."""
    return client_for(key_for(other_tenant))


def test_every_operation_of_the_schema_is_in_the_matrix(theirs: dict[str, str]) -> None:
    for method, path in operations():
        if "{id}" in path:
            assert collection(path) in theirs, f"{method} {path}: no object of the other tenant to try"
            if method in ("POST", "PUT", "PATCH"):
                assert (method, path) in BODIES, f"{method} {path}: no body in BODIES"


@pytest.mark.parametrize(("method", "path"), [op for op in operations() if "{id}" in op[1]])
def test_another_tenants_object_is_404_on_every_operation_and_nothing_changes(
    intruder: APIClient, theirs: dict[str, str], method: str, path: str
) -> None:
    before = snapshot()
    url = path.replace("{id}", theirs[collection(path)])
    response = intruder.generic(
        method, url, data=_json(BODIES.get((method, path))), content_type="application/json"
    )
    assert response.status_code == 404, response.content
    assert response.json() == {"error": {"code": "not_found", "message": "Not found."}}
    assert snapshot() == before


@pytest.mark.parametrize(
    ("method", "path"), [op for op in operations() if "{id}" not in op[1] and op[0] == "GET"]
)
def test_no_list_shows_another_tenants_rows(
    intruder: APIClient, theirs: dict[str, str], method: str, path: str
) -> None:
    response = intruder.get(path)
    assert response.status_code == 200, response.content
    body = response.json()
    # UUIDs cannot turn up by chance anywhere in the body; integer ids are compared as row ids only.
    shown = repr(body)
    assert not [id_ for id_ in theirs.values() if len(id_) == 36 and id_ in shown]
    rows = {str(row["id"]) for row in body.get("results", [])}
    assert not rows & set(theirs.values())


# Each create, given another tenant's object where it names one: 400 at that field, nothing made.
CREATES = [
    ("/api/v1/intents", lambda t: {"agent": t["agents"], "statement": "Mine now."}, "agent"),
    ("/api/v1/grounding-documents", lambda t: {"agent": t["agents"], "title": "x", "text": "y"}, "agent"),
    ("/api/v1/runs", lambda t: {"agent": t["agents"], "task": "Work for me."}, "agent"),
    ("/api/v1/runs", lambda t: {"agent": "__own__", "intent": t["intents"], "task": "Go."}, "intent"),
    ("/api/v1/agents", lambda t: {"slug": "x", "name": "X", "tools": [t["tools"]]}, "tools"),
    ("/api/v1/agents", lambda t: {"slug": "y", "name": "Y", "principal": "tomas"}, "principal"),
]


@pytest.mark.parametrize(("path", "body", "field"), CREATES)
def test_a_create_naming_another_tenants_object_is_400_at_that_field(
    intruder: APIClient,
    other_tenant: Tenant,
    seller: Agent,
    theirs: dict[str, str],
    path: str,
    body: Callable[[dict[str, str]], dict[str, Any]],
    field: str,
) -> None:
    before = snapshot()
    given = {k: (str(seller.pk) if v == "__own__" else v) for k, v in body(theirs).items()}
    response = intruder.post(path, given, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert snapshot() == before


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/v1/runs", "agent"),
        ("/api/v1/runs", "intent"),
        ("/api/v1/questions", "run"),
        ("/api/v1/negotiations", "agent"),
        ("/api/v1/settlements", "negotiation"),
        ("/api/v1/intents", "agent"),
        ("/api/v1/grounding-documents", "agent"),
        ("/api/v1/intake-requests", "agent"),
        ("/api/v1/webhook-deliveries", "endpoint"),
    ],
)
def test_filtering_by_another_tenants_id_is_400_naming_the_filter(
    intruder: APIClient, theirs: dict[str, str], path: str, name: str
) -> None:
    plural = {
        "agent": "agents",
        "intent": "intents",
        "run": "runs",
        "negotiation": "negotiations",
        "endpoint": "webhook-endpoints",
    }[name]
    response = intruder.get(path, {name: theirs[plural]})
    assert response.status_code == 400, response.content
    assert name in response.json()["error"]["fields"]


def _json(body: Any) -> str:
    import json

    return "" if body is None else json.dumps(body)
