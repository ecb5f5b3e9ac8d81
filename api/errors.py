"""One error body for every failure of the API, naming the fields that were wrong.

Every error answers ``{"error": {"code": ..., "message": ..., "fields": {...}}}``:
``code`` is a stable machine word (``invalid``, ``not_found``, ``conflict``,
``permission_denied``, ``not_authenticated``, …), ``message`` a sentence for
people, and ``fields`` (on ``invalid`` only) maps each request field that was
wrong to its messages; problems with the request as a whole are under
``non_field_errors``. Service errors map to statuses here, once, so views
only call services.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from agents.configuration import InUse
from agents.services import questions, runs
from negotiations.services.parking import GuidanceRefused

INVALID_MESSAGE = "The request is not valid; see fields."


class Conflict(exceptions.APIException):
    """409: the request is well-formed but the object's state refuses it (a run that ended, a
    question answered before)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the current state."


class RequestTooLarge(exceptions.APIException):
    """413: the body is larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"
    default_detail = "The request body is too large."


def _translate(exc: Exception) -> Exception:
    """DRF's exception for a Django or service exception; others pass through."""
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLarge(
            f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
        )
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, runs.NotAllowed | PermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, runs.RunError) and exc.field:  # refused for one input: the caller's to fix
        return exceptions.ValidationError({exc.field: [str(exc)]})
    if isinstance(exc, questions.QuestionAlreadyAnswered | runs.RunError | InUse):
        return Conflict(str(exc))
    if isinstance(exc, GuidanceRefused):  # its code says why: outbound, not_waiting, already_answered
        return Conflict(str(exc), code=exc.code)
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: the body above for every handled exception; ``None`` (a 500)
    for anything unexpected, which is logged by Django."""
    exc = _translate(exc)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body: dict[str, Any] = {"code": "invalid", "message": INVALID_MESSAGE, "fields": detail}
    else:
        codes = exc.get_codes()
        body = {"code": codes if isinstance(codes, str) else exc.default_code, "message": str(exc.detail)}
    response.data = {"error": body}
    return response


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """The 404 of a path under the API that names no operation (``/agents/a.b``, ``/agents/``,
    ``/nothing``), for any method: the error body, not the site's HTML page. Nothing is looked up, so
    it needs no key."""
    body = {"code": exceptions.NotFound.default_code, "message": str(exceptions.NotFound.default_detail)}
    return JsonResponse({"error": body}, status=status.HTTP_404_NOT_FOUND)
