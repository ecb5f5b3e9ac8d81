"""Authentication, scopes, the error body, ETags and the schema: what every endpoint shares."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from agents.models import Run
from parley.models import ApiKey, Tenant
from parley.services import api_key_revoke

pytestmark = pytest.mark.django_db


def test_the_tenant_endpoint_names_the_keys_tenant_and_scopes(api: APIClient, tenant: Tenant) -> None:
    response = api.get("/api/v1/tenant")
    assert response.status_code == 200
    body = response.json()
    assert (body["slug"], body["name"]) == (tenant.slug, tenant.name)
    assert body["key"]["scopes"] == ["read", "write", "admin"]
    assert body["key"]["name"] == "backend"


def test_no_key_is_401_with_the_error_body_and_a_challenge() -> None:
    response = APIClient().get("/api/v1/tenant")
    assert response.status_code == 401
    assert response.json() == {
        "error": {"code": "not_authenticated", "message": "Authentication credentials were not provided."}
    }
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("Bearer 0123456789ab.nope", "The API key is not valid or was revoked."),
        ("Bearer nonsense", "The API key is not valid or was revoked."),
        ("Basic dXNlcjpwYXNz", "Send the API key as 'Authorization: Bearer <key>'."),
        ("Bearer a b", "Send the API key as 'Authorization: Bearer <key>'."),
    ],
)
def test_a_bad_key_is_401_naming_what_is_wrong(header: str, message: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/tenant")
    assert response.status_code == 401
    assert response.json() == {"error": {"code": "authentication_failed", "message": message}}


def test_a_revoked_key_is_refused(
    tenant: Tenant, owner: AbstractUser, key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> None:
    raw = key_for(tenant)
    assert client_for(raw).get("/api/v1/tenant").status_code == 200
    api_key_revoke(key=ApiKey.across_tenants.get(prefix=raw.split(".")[0]), user=owner)
    assert client_for(raw).get("/api/v1/tenant").status_code == 401


def test_a_key_without_the_scope_is_403_naming_the_scope(
    tenant: Tenant, key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> None:
    response = client_for(key_for(tenant, scopes=("write",))).get("/api/v1/tenant")
    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": "permission_denied",
            "message": "This API key lacks the 'read' scope this operation needs.",
        }
    }


def test_a_read_carries_an_etag_and_answers_304_to_it(api: APIClient) -> None:
    first = api.get("/api/v1/tenant")
    etag = first.headers["ETag"]
    again = api.get("/api/v1/tenant", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again.content == b""
    assert api.get("/api/v1/tenant", HTTP_IF_NONE_MATCH='"stale"').status_code == 200


def test_an_unknown_path_under_the_api_is_404() -> None:
    assert APIClient().get("/api/v1/nothing-here").status_code == 404


def test_the_schema_and_its_documentation_page_are_served_without_a_key() -> None:
    schema = APIClient().get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert schema.json()["info"]["title"] == "Parley host API"
    assert "/api/v1/tenant" in schema.json()["paths"]
    docs = APIClient().get("/api/v1/docs")
    assert docs.status_code == 200
    assert b"/api/v1/schema" in docs.content
    assert b"cdn.jsdelivr" not in docs.content  # the page's script is served by us (the sidecar)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("[" * 5000 + "]" * 5000, "nested deeper than 100"),
        ('{"task": NaN}', "NaN is not a JSON number"),
        ('{"task": 1e400}', "too large"),
        ('{"task": "a\\u0000b"}', "NUL"),
        ('{"task": ', "Expecting value"),
    ],
)
def test_a_body_json_cannot_hold_is_400_saying_why_and_creates_nothing(
    api: APIClient, body: str, reason: str
) -> None:
    response = api.post("/api/v1/runs", data=body, content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert reason in error["message"]
    assert Run.across_tenants.count() == 0


def test_a_body_that_is_not_json_is_415_naming_the_type(api: APIClient) -> None:
    response = api.post("/api/v1/runs", data="task=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/nothing-here"),
        ("get", "/api/v1/agents/0.5"),  # the router's ids take no dot
        ("patch", "/api/v1/agents/a%2Fb"),  # nor a slash
        ("post", "/api/v1/runs/"),  # no trailing slashes
        ("delete", "/api/v1/tools/1.0/more"),
    ],
)
def test_a_path_under_the_api_that_names_no_operation_is_404_with_the_error_body(
    api: APIClient, method: str, path: str
) -> None:
    response = getattr(api, method)(path)
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not found."}}
