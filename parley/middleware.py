"""Middleware of the dashboard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse


class TooLargeFormMiddleware:
    """Answers a form posted with a body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with its page and a
    message, not Django's bare "Bad Request (400)".

    Django cannot read such a body: reading it raises ``RequestDataTooBig`` (first in the CSRF check),
    which Django answers with a 400 page that has nothing of the form. A view class that sets
    ``answers_too_large = True`` is called instead as for a GET, with ``request.too_large`` set to
    the body's size in bytes (0 when the request does not say it): it shows its page again, saves
    nothing and says what was too large (:class:`agents.config_views.OperatorFormMixin`). Nothing
    of the body is read, so nothing of it is acted on, and the CSRF check skipped guards writes
    that do not happen. Comes before ``CsrfViewMiddleware``.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponse],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        view_class = getattr(view_func, "view_class", None)
        if request.method != "POST" or not getattr(view_class, "answers_too_large", False):
            return None
        try:
            request.POST  # noqa: B018 - read here, before the CSRF check would, to catch what it raises
        except RequestDataTooBig:
            try:
                size = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                size = 0
            request.method = "GET"
            request.too_large = size  # type: ignore[attr-defined]
            return view_func(request, *view_args, **view_kwargs)
        return None
