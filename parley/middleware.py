"""Middleware of the dashboard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.defaultfilters import filesizeformat
from django.utils.http import url_has_allowed_host_and_scheme

TOO_LARGE = 413


def too_large_text(size: int) -> str:
    """Why a form of ``size`` bytes (0: not said) was not read: "this form sent 3.0 MB, more than
    the 2.5 MB a form may send, so nothing in it could be read"."""
    sent = filesizeformat(size) if size else "more"
    limit = filesizeformat(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return f"this form sent {sent}, more than the {limit} a form may send, so nothing in it could be read"


class TooLargeFormMiddleware:
    """Answers a form posted with a body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with a page and a
    message (413), not Django's bare "Bad Request (400)", on every page but the host API's.

    Django cannot read such a body: reading it raises ``RequestDataTooBig`` (first in the CSRF check),
    which Django answers with a 400 page that has nothing of the form. Instead, with
    ``request.too_large`` set to the body's size in bytes (0 when the request does not say it):

    * a view class that sets ``shows_too_large = True`` is called as for a GET and says itself what
      was too large, at its form (:class:`agents.config_views.OperatorFormMixin`);
    * any other view with a page (one that takes a GET) is called as for a GET, with the message
      among the page's messages, and answers 413;
    * a view that only takes POSTs (an answer, a revocation) is answered by ``413.html``: the
      message, and a link back to the page the form was on;
    * an htmx request gets the message alone, as text (``static/parley/live.js`` shows it where
      the page's messages go; the form keeps what was typed).

    Nothing of the body is read, so nothing of it is acted on, and the CSRF check skipped guards
    writes that do not happen. The host API (its views are CSRF-exempt) answers its own 413 in
    its own errors (``api.errors``); a view class may opt out with ``answers_too_large = False``.
    Comes before ``CsrfViewMiddleware``, after the session, authentication and messages.
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
        if (
            request.method != "POST"
            or getattr(view_func, "csrf_exempt", False)
            or not getattr(view_class, "answers_too_large", True)
        ):
            return None
        try:
            request.POST  # noqa: B018 - read here, before the CSRF check would, to catch what it raises
        except RequestDataTooBig:
            pass
        else:
            return None
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        request.too_large = size  # type: ignore[attr-defined]
        if getattr(request, "htmx", False):
            text = f"Not done: {too_large_text(size)}. Shorten the longest text and send it again."
            return HttpResponse(text, status=TOO_LARGE, content_type="text/plain; charset=utf-8")
        if getattr(view_class, "shows_too_large", False):
            request.method = "GET"
            return view_func(request, *view_args, **view_kwargs)
        messages.error(
            request,
            f"Not done: {too_large_text(size)}, and nothing was changed. Shorten the longest text and "
            "send it again.",
        )
        if view_class is not None and hasattr(view_class, "get") and "get" in view_class.http_method_names:
            request.method = "GET"
            response = view_func(request, *view_args, **view_kwargs)
            if response.status_code == 200:
                response.status_code = TOO_LARGE
            return response
        return render(request, "413.html", {"back": _back(request)}, status=TOO_LARGE)


def _back(request: HttpRequest) -> str:
    """The page the form was posted from when it is one of ours (the Referer), else home."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return referer
    return "/"
