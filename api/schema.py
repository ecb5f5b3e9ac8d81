"""What drf-spectacular cannot see by itself: the API key scheme, the Idempotency-Key header and
the error body every operation may answer with."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter

from api import idempotency


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """The API key is an HTTP bearer token: ``Authorization: Bearer <prefix>.<secret>``."""

    target_class = "api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A tenant API key, `<prefix>.<secret>`, made by an owner on the API keys page.",
        }


# The body of every error (api.errors); inline, as "fields" cannot be a serializer field's name.
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "a stable word: invalid, not_found, conflict, …"},
                "message": {"type": "string", "description": "a sentence for people"},
                "fields": {
                    "type": "object",
                    "description": "on `invalid`: each request field that was wrong, with its messages",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}


# Statuses every authenticated operation may answer with the error body, by method.
_ERRORS = {
    "401": "no valid API key",
    "403": "the key lacks the scope",
    "404": "no such object here",
    "406": "the Accept header allows no JSON",
}
_WRITE_ERRORS = {
    "400": "the request is not valid; `fields` names what",
    "409": "the object's state refuses it, or the Idempotency-Key is in flight",
    "422": "the Idempotency-Key was used for another request",
}


class ParleySchema(AutoSchema):
    """The API's ``DEFAULT_SCHEMA_CLASS``: DRF's views as drf-spectacular sees them, plus the
    ``Idempotency-Key`` header on every POST and the error responses of :mod:`api.errors`."""

    def get_override_parameters(self) -> list[Any]:
        parameters = list(super().get_override_parameters())
        if self.method == "POST":
            parameters.append(
                OpenApiParameter(
                    idempotency.HEADER,
                    str,
                    OpenApiParameter.HEADER,
                    description="Any 1 to 255 visible ASCII characters, new for each request you mean: "
                    "a retry with the same key and body gets the first response and changes nothing.",
                )
            )
        return parameters

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        bodies: dict[str, Any] = super()._get_response_bodies(direction)
        errors = dict(_ERRORS)
        if self.method != "GET":
            errors |= _WRITE_ERRORS
        elif self._is_list_view():
            errors["400"] = "a filter is not valid; `fields` names which"
        for status, description in errors.items():
            if status not in bodies:
                bodies[status] = {
                    "description": description,
                    "content": {"application/json": {"schema": ERROR_SCHEMA}},
                }
        return bodies
