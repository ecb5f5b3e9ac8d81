"""Property-based calls to every operation of the host API's OpenAPI schema (schemathesis): none
answers a server error, every response is what the schema says (status, content type, body), and
every 4xx, documented or not, is the error body of :mod:`api.errors`.

The schema is the one ``/api/v1/schema`` serves. Each operation is a test of its own: schemathesis'
coverage phase (fixed probes of every parameter and body field, other methods, no key) and then
generated cases, sent through Django's WSGI handler in this process, on the test's database
transaction, with an API key of every scope (schemathesis leaves the key off some cases on
purpose: those must be 401). The key's tenant owns one or two of each object the API serves — a
configured agent; a run the offline model stepped to a question, and one waiting for an approval;
a negotiation with turns and a settlement; a webhook endpoint with a delivery; … — made afresh for
each operation, and the cases name them: a generated ``{id}``, filter by id or id in a body is
swapped for a real one about half the time, and every well-formed ``{id}`` of the coverage phase is
made one, so the found-object code runs, not only the 404s.

Generated webhook URLs are sent with their host name replaced by ``localhost`` (an IP literal is
kept): making an endpoint resolves its host (:mod:`parley.netguard`), and a test must not ask the
world's DNS about random names. The syntax of the URLs is still fuzzed.

The generation is derandomized, so CI sends the same cases every time. To explore, run this file
with ``max_examples`` raised and ``derandomize=False``.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import AbstractUser
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, HookContext, Response
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.filters import HasAPIOperation
from schemathesis.generation.meta import CoveragePhaseData, TestPhase
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agents.models import Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from agents.services import runs
from negotiations.models import Negotiation, Settlement, Turn
from parley import live
from parley.models import Tenant, WebhookDelivery
from parley.webhooks import endpoints
from representative.models import GroundingDocument, IntakeRequest
from tests.agents.conftest import step

pytestmark = pytest.mark.django_db

# Read at import: pytest collects a test per operation from it. (``schemathesis.pytest.from_fixture``
# would read it in a fixture, but fails under pytest 9.2: it sets ``request.node._nodeid``, gone.)
schema = schemathesis.openapi.from_wsgi("/api/v1/schema?format=json", get_wsgi_application())

# The ids of the objects the running test's tenant owns, by collection (set by the ``real`` fixture):
# the hooks below read them as they generate each case.
REAL: dict[str, list[str]] = {}

# The collection each name holds ids of: a path's first segment, a filter, a body field.
REFERENCES = {
    "agent": "agents",
    "target_agent": "agents",
    "intent": "intents",
    "run": "runs",
    "negotiation": "negotiations",
    "endpoint": "webhook-endpoints",
    "tools": "tools",
    "principal": "members",
    "intake_owner": "members",
}

# What the tests share. Each sets how many cases it generates per operation after the coverage
# phase's fixed ones (about 3,600 in all, most of the file's time): more where there is more to vary.
HYPOTHESIS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def in_process() -> Iterator[None]:
    """Requests handled by Django's WSGI handler in this process, kept off ``close_old_connections``
    as Django's test client keeps them: they run on the test's connection, inside its transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(tenant: Tenant, key_for: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key_for(tenant)}"}


@pytest.fixture
def real(tenant: Tenant, agent: Agent, intent: Intent, principal: AbstractUser) -> Iterator[None]:
    """The tenant's objects, by the collection their ids go in (in :data:`REAL` while the test
    runs): one or two of each. The agent is configured in full, offers one tool (the other is
    free) and names one model endpoint (the other is free)."""
    tool = Tool.objects.create(
        tenant=tenant,
        name="lookup",
        description="Look up a company.",
        kind=Tool.Kind.HOST,
        url="https://host.example/lookup",
        secret="s3cret",
        requires_approval=True,
    )
    spare_tool = Tool.objects.create(
        tenant=tenant,
        name="spare",
        description="Offered by none.",
        kind=Tool.Kind.HOST,
        url="https://host.example/spare",
    )
    endpoint = ModelEndpoint.objects.create(
        tenant=tenant, name="house", base_url="https://llm.example/v1", upstream_model="m"
    )
    spare_endpoint = ModelEndpoint.objects.create(
        tenant=tenant, name="spare", base_url="https://llm.example/v1", upstream_model="s"
    )
    document = GroundingDocument.objects.create(tenant=tenant, agent=agent, title="Rates", text="€900 a day")

    # A run the offline model stepped once: it asks its party a question.
    asking = step(runs.run_start(agent=agent, intent=intent, task="Find me a fractional CFO."))
    question = Question.across_tenants.get(run=asking)

    # An agent with nothing of its own, and an intent no run works on: free to delete, free to run.
    spare_agent = Agent.objects.create(tenant=tenant, slug="spare", name="Spare", principal=principal)
    idle_intent = Intent.objects.create(tenant=tenant, agent=agent, statement="Find an auditor.")

    # A run stopped on a tool call waiting for approval, on an intent of its own.
    other_intent = Intent.objects.create(tenant=tenant, agent=agent, statement="Renew the office lease.")
    waiting = Run.objects.create(
        tenant=tenant,
        agent=agent,
        intent=other_intent,
        task="Look them up.",
        status=Run.Status.NEEDS_INPUT,
        step_count=1,
    )
    Message.objects.create(
        tenant=tenant, intent=other_intent, run=waiting, seq=1, role=Message.Role.USER, content="Look up."
    )
    Message.objects.create(
        tenant=tenant,
        intent=other_intent,
        run=waiting,
        seq=2,
        step=1,
        role=Message.Role.ASSISTANT,
        tool_calls=[{"id": "call-1", "name": "lookup", "arguments": '{"company": "Acme"}'}],
        model="offline",
    )
    approval = Question.objects.create(
        tenant=tenant,
        run=waiting,
        tool_call_id="call-1",
        tool_name="lookup",
        kind=Question.Kind.APPROVAL,
        question="Run lookup?",
        arguments={"company": "Acme"},
    )

    negotiation = Negotiation.objects.create(
        tenant=tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url="https://cfo.example/a2a",
        counterparty_name="Idris Haddad",
    )
    for seq, (side, action, amount) in enumerate(
        [
            (Turn.Side.OURS, "propose", 800),
            (Turn.Side.THEIRS, "propose", 1000),
            (Turn.Side.OURS, "accept", 900),
        ],
        start=1,
    ):
        Turn.objects.create(
            tenant=tenant,
            negotiation=negotiation,
            seq=seq,
            side=side,
            action=action,
            message=f"{amount} EUR a day.",
            terms={"amount": amount, "currency": "EUR"},
        )
    settlement = Settlement.objects.create(
        tenant=tenant,
        negotiation=negotiation,
        outcome=Settlement.Outcome.AGREED,
        basis=Settlement.Basis.TERMS,
        terms={"amount": 900, "currency": "EUR"},
    )
    intake = IntakeRequest.objects.create(
        tenant=tenant, agent=agent, caller="anon", summary="Call me back.", recipient=principal
    )
    hook = endpoints.webhook_endpoint_create(
        tenant=tenant, url="http://127.0.0.1:9/hooks", events=["run.finished", "negotiation.settled"]
    )
    live.publish_on_commit(
        event="run.finished", tenant_id=tenant.pk, party_id=None, payload={"run": str(asking.pk)}
    )
    delivery = WebhookDelivery.across_tenants.get(endpoint=hook)
    delivery.status, delivery.attempts, delivery.last_attempt_at = (
        WebhookDelivery.Status.FAILED,
        3,
        timezone.now(),
    )
    delivery.save()
    REAL.update(
        {
            "agents": [str(agent.pk), str(spare_agent.pk)],
            "intents": [str(intent.pk), str(other_intent.pk), str(idle_intent.pk)],
            "tools": [str(tool.pk), str(spare_tool.pk)],
            "model-endpoints": [str(endpoint.pk), str(spare_endpoint.pk)],
            "grounding-documents": [str(document.pk)],
            "runs": [str(asking.pk), str(waiting.pk)],
            "questions": [str(question.pk)],
            "approvals": [str(approval.pk)],
            "negotiations": [str(negotiation.pk)],
            "settlements": [str(settlement.pk)],
            "intake-requests": [str(intake.pk)],
            "webhook-endpoints": [str(hook.pk)],
            "webhook-deliveries": [str(delivery.pk)],
            "members": [principal.get_username()],
        }
    )
    try:
        yield
    finally:
        REAL.clear()


def either(generated: Any, collection: str) -> st.SearchStrategy[Any]:
    """The generated value, or the id (for a list: ids) of a real object of ``collection``."""
    ids = REAL.get(collection, [])
    if not ids:
        return st.just(generated)
    if isinstance(generated, list):
        return st.one_of(st.just(generated), st.lists(st.sampled_from(ids), max_size=len(ids), unique=True))
    return st.one_of(st.just(generated), st.sampled_from(ids))


def swapped(values: Any, collections: dict[str, str]) -> st.SearchStrategy[Any]:
    """``values``, with each name in ``collections`` kept or given a real id (:func:`either`);
    anything but an object (a container the operation lacks is None) as it is."""
    if not isinstance(values, dict):
        return st.just(values)
    names = [name for name in values if name in collections]
    if not names:
        return st.just(values)
    return st.fixed_dictionaries({name: either(values[name], collections[name]) for name in names}).map(
        lambda chosen: {**values, **chosen}
    )


@schema.hook
def flatmap_path_parameters(context: HookContext, path_parameters: dict[str, Any]) -> st.SearchStrategy[Any]:
    assert context.operation is not None
    return swapped(path_parameters, {"id": collection_of(context.operation.path)})


@schema.hook
def flatmap_query(context: HookContext, query: dict[str, Any]) -> st.SearchStrategy[Any]:
    return swapped(query, REFERENCES)


@schema.hook
def flatmap_body(context: HookContext, body: Any) -> st.SearchStrategy[Any]:
    return swapped(body, REFERENCES)


@schema.hook
def map_body(context: HookContext, body: Any) -> Any:
    """A webhook endpoint's URL on ``localhost`` (see the module's docstring)."""
    assert context.operation is not None
    if collection_of(context.operation.path) != "webhook-endpoints" or not isinstance(body, dict):
        return body
    url = body.get("url")
    return {**body, "url": on_localhost(url)} if isinstance(url, str) else body


def collection_of(path: str) -> str:
    return path.removeprefix("/api/v1/").split("/")[0]


def on_localhost(url: str) -> str:
    """``url`` with its host name replaced by ``localhost``; one with an IP literal, no host or that
    does not parse as it is."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return url
    if not host or is_ip(host):
        return url
    userinfo, at, _ = parts.netloc.rpartition("@")
    netloc = f"{userinfo}{at}localhost" + ("" if port is None else f":{port}")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def error_body_is_ours(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """A 4xx answers ``{"error": {"code": str, "message": str, ...}}`` (:mod:`api.errors`)."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = response.json()
    except ValueError:
        raise AssertionError(f"a {response.status_code} answered no JSON: {response.text[:200]!r}") from None
    error = body.get("error") if isinstance(body, dict) else None
    shape = {
        "only error": isinstance(body, dict) and set(body) == {"error"},
        "code": isinstance(error, dict) and isinstance(error.get("code"), str),
        "message": isinstance(error, dict) and isinstance(error.get("message"), str),
        "no other keys": isinstance(error, dict) and set(error) <= {"code", "message", "fields"},
        "fields an object": not isinstance(error, dict) or isinstance(error.get("fields", {}), dict),
    }
    assert all(shape.values()), f"not our error body ({shape}): {body!r}"
    return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    error_body_is_ours,
]


def on_a_real_object(case: Case) -> Case:
    """``case``, naming a real object if it is one of the coverage phase's (schemathesis' fixed probes
    of each parameter and body field) and does not probe the ``{id}`` itself: the probes of the body
    and query then reach the serializers and services, not a 404. Those cases are made as pytest
    collects, before there are objects, so this is done as each is sent; generated cases choose
    for themselves (:func:`swapped`)."""
    ids = REAL.get(collection_of(case.path))
    if case.meta is None or case.meta.phase.name != TestPhase.COVERAGE or not ids:
        return case
    probe = case.meta.phase.data
    if "id" not in case.path_parameters or (
        isinstance(probe, CoveragePhaseData) and probe.parameter_location == ParameterLocation.PATH
    ):
        return case
    case.path_parameters = {**case.path_parameters, "id": ids[0]}
    return case


def takes_input(ctx: HasAPIOperation) -> bool:
    """Whether an operation takes a body or query parameters, not only (at most) an ``{id}``."""
    definition = ctx.operation.definition.raw
    return "requestBody" in definition or any(p["in"] == "query" for p in definition.get("parameters", []))


@schema.include(takes_input).parametrize()
@settings(HYPOTHESIS, max_examples=15)
@pytest.mark.usefixtures("real")
def test_operations_taking_input_answer_as_the_schema_says_never_5xx(
    case: Case, bearer: dict[str, str]
) -> None:
    on_a_real_object(case).call_and_validate(headers=bearer, checks=CHECKS)


@schema.exclude(takes_input).parametrize()
@settings(HYPOTHESIS, max_examples=6)
@pytest.mark.usefixtures("real")
def test_operations_on_an_id_alone_answer_as_the_schema_says_never_5xx(
    case: Case, bearer: dict[str, str]
) -> None:
    on_a_real_object(case).call_and_validate(headers=bearer, checks=CHECKS)


@pytest.mark.usefixtures("real")
def test_generated_cases_name_the_tenants_objects() -> None:
    """The hooks above are in effect: without them every generated ``{id}`` and filter is a miss."""
    first = settings(database=None, derandomize=True, phases=[Phase.generate])  # found, not shrunk
    in_path = find(
        schema["/api/v1/agents/{id}"]["GET"].as_strategy(),
        lambda case: case.path_parameters.get("id") in REAL["agents"],
        settings=first,
    )
    in_query = find(
        schema["/api/v1/runs"]["GET"].as_strategy(),
        lambda case: case.query.get("intent") in REAL["intents"],
        settings=first,
    )
    assert in_path.path_parameters["id"] in REAL["agents"]
    assert in_query.query["intent"] in REAL["intents"]
