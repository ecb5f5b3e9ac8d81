"""Requests the API cannot read, server errors, and cursors: always the error body, never a lost key."""

from __future__ import annotations

import base64
import urllib.parse
from typing import Any

import jsonschema
import pytest
from django.conf import settings
from django.urls import include, path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient

from agents.models import Agent
from api.base import TenantScoped
from api.models import IdempotencyKey
from negotiations.models import Settlement
from representative.models import GroundingDocument
from tests.negotiations.pages import outbound

pytestmark = pytest.mark.django_db


class Fails(TenantScoped):
    """A view that fails the first time it is called, as a bug or a lost database would."""

    calls = 0

    def post(self, request: Request) -> Response:
        Fails.calls += 1
        if Fails.calls == 1:
            raise RuntimeError("the first call fails")
        return Response({"call": Fails.calls}, status=201)


urlpatterns = [
    path("api/v1/fails", Fails.as_view()),
    path("", include("parley.urls")),
]


def unraised(api: APIClient) -> APIClient:
    """``api``'s key on a client that answers a server error as the server would (a 500)."""
    client = APIClient(raise_request_exception=False)
    client.credentials(**api._credentials)  # type: ignore[attr-defined]
    return client


def error_of(response: Any) -> dict[str, Any]:
    """The ``error`` of a JSON error body (api/errors.py)."""
    assert response.headers["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    assert set(body) == {"error"}
    assert isinstance(body["error"]["code"], str)
    assert isinstance(body["error"]["message"], str)
    return dict(body["error"])


@pytest.mark.parametrize(("charset", "status"), [("utf-16", 400), ("rot13", 415), ("hex", 415)])
def test_a_charset_json_cannot_be_read_in_is_refused_with_the_error_body(
    api: APIClient, agent: Agent, charset: str, status: int
) -> None:
    response = unraised(api).patch(
        f"/api/v1/agents/{agent.pk}",
        data=b'{"description": "d"}',  # utf-16 without a BOM: not utf-16 at all
        content_type=f"application/json; charset={charset}",
    )
    assert response.status_code == status
    error_of(response)
    agent.refresh_from_db()
    assert agent.description != "d"


def test_a_body_in_utf_16_is_read(api: APIClient, agent: Agent) -> None:
    response = api.patch(
        f"/api/v1/agents/{agent.pk}",
        data='{"description": "Ça marche"}'.encode("utf-16"),
        content_type="application/json; charset=utf-16",
    )
    assert response.status_code == 200, response.content
    assert response.json()["description"] == "Ça marche"


@pytest.mark.urls(__name__)
def test_after_a_server_error_a_retry_with_the_same_idempotency_key_runs_again(api: APIClient) -> None:
    Fails.calls = 0
    client = unraised(api)
    first = client.post("/api/v1/fails", {}, format="json", HTTP_IDEMPOTENCY_KEY="after-500")
    assert first.status_code == 500
    assert not IdempotencyKey.across_tenants.filter(key="after-500").exists()

    retry = client.post("/api/v1/fails", {}, format="json", HTTP_IDEMPOTENCY_KEY="after-500")
    assert (retry.status_code, retry.json()) == (201, {"call": 2})
    replay = client.post("/api/v1/fails", {}, format="json", HTTP_IDEMPOTENCY_KEY="after-500")
    assert (replay.status_code, replay.json()) == (201, {"call": 2})
    assert Fails.calls == 2


def test_a_body_over_the_upload_limit_is_413_with_the_error_body(api: APIClient, agent: Agent) -> None:
    text = "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    for headers in ({}, {"HTTP_IDEMPOTENCY_KEY": "big-document"}):
        response = api.post(
            "/api/v1/grounding-documents",
            {"agent": str(agent.pk), "title": "Rates", "text": text},
            format="json",
            **headers,
        )
        assert response.status_code == 413
        assert error_of(response)["code"] == "request_too_large"
    assert not GroundingDocument.across_tenants.exists()
    assert not IdempotencyKey.across_tenants.exists()


def test_a_settlement_that_no_side_ended_matches_the_documented_schema(api: APIClient, agent: Agent) -> None:
    negotiation = outbound(
        agent,
        "Idris Haddad",
        status="settled",
        settlement={
            "outcome": Settlement.Outcome.UNANSWERED,
            "basis": Settlement.Basis.STATE,
            "reason": "no answer",
            "ended_by": "",
        },
    )
    answered = api.get(f"/api/v1/settlements/{negotiation.settlement.pk}").json()
    assert answered["ended_by"] == ""

    schema = APIClient().get("/api/v1/schema?format=json").json()
    components = schema["components"]
    ended_by = {**components["schemas"]["SettlementList"]["properties"]["ended_by"], "components": components}
    jsonschema.validate(answered["ended_by"], ended_by)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("nobody", ended_by)


def cursor(raw: str) -> str:
    return urllib.parse.quote(base64.b64encode(raw.encode()).decode())


@pytest.mark.parametrize("value", ["garbage", cursor("p=not-a-date")])
def test_a_cursor_we_did_not_make_is_400_naming_cursor(api: APIClient, value: str) -> None:
    response = api.get(f"/api/v1/runs?cursor={value}")
    assert response.status_code == 400, response.content
    assert error_of(response)["fields"] == {
        "cursor": ["This cursor is not valid; start again from the first page."]
    }
