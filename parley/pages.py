"""Dashboard plumbing every app's pages build on: the tenant, resolved once from the URL, and the
behaviour pages share (htmx, lists with filters, forms too large to read, a service's refusal at a
form's fields).

A views module is imported by its URLconf only (docs/layers.md); this one is no view, so every
app's views import it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.forms import Form
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.generic import ListView

from parley.middleware import TOO_LARGE, too_large_text
from parley.models import Membership, Tenant
from parley.selectors import membership_for


def is_htmx(request: HttpRequest) -> bool:
    """Whether htmx sent ``request`` (django-htmx's middleware sets ``request.htmx``)."""
    return bool(getattr(request, "htmx", False))


class TenantMixin(LoginRequiredMixin):
    """Resolves ``self.tenant`` and ``self.membership`` from the ``tenant`` URL slug.

    A tenant the user is not a member of answers 404, exactly like one that
    does not exist. A view that sets ``allowed_roles`` answers 403 to a member
    in any other role (empty: every member). A view that sets ``fragment_template_name`` renders only
    that template (its live regions) when asked with ``?fragment=1``: that is
    what ``static/parley/live.js`` fetches when an event arrives.
    """

    tenant: Tenant
    membership: Membership
    allowed_roles: frozenset[str] = frozenset()
    fragment_template_name = ""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.user.is_authenticated:
            self.membership = membership_for(user=request.user, tenant_slug=kwargs["tenant"])
            self.tenant = self.membership.tenant
            if self.allowed_roles and self.membership.role not in self.allowed_roles:
                raise PermissionDenied("Your role in this tenant does not give access to this page.")
        return super().dispatch(request, *args, **kwargs)

    def get_template_names(self) -> list[str]:
        if self.fragment_template_name and self.request.GET.get("fragment"):  # type: ignore[attr-defined]
            return [self.fragment_template_name]
        names: list[str] = super().get_template_names()  # type: ignore[misc]
        return names

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)  # type: ignore[misc]
        context.update(tenant=self.tenant, membership=self.membership)
        return context


def url_of_each(viewname: str, **kwargs: Any) -> Callable[[uuid.UUID], str]:
    """``reverse(viewname, kwargs={**kwargs, "pk": pk})`` for each row's UUID ``pk``, resolved once: a list
    links its rows to their pages without walking the URLconf for every row. The view's ``pk`` must be
    a ``<uuid:pk>``, the last part of its path named by a parameter."""
    marker = uuid.UUID(int=0)
    head, tail = reverse(viewname, kwargs={**kwargs, "pk": marker}).rsplit(str(marker), 1)
    return lambda pk: f"{head}{pk}{tail}"


def errors_at_fields(form: Form, exc: ValidationError) -> None:
    """Put a service's refusal on ``form``: each error at the field it names, any other above the form."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for name, errors in exc.error_dict.items():
        form.add_error(name if name in form.fields else None, errors)


class TooLargeFormMixin:
    """A page whose form says itself, at the form, that it was too large to read.

    A body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` cannot be read: the page is answered
    (413) as a GET shows it, with ``too_large`` in the context saying how large the form was, what
    the limit is and ``shorten`` (:class:`parley.middleware.TooLargeFormMiddleware`, which calls
    such a view with ``request.too_large`` set). The context's ``max_form_bytes`` is the limit,
    for the form's ``data-max-bytes``: ``static/parley/forms.js`` then refuses such a form before
    sending it, keeping what was typed. Goes before the view's other bases.
    """

    shows_too_large = True
    shorten = "Shorten the longest text and save again."
    request: HttpRequest

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)  # type: ignore[misc]
        context["max_form_bytes"] = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or ""
        too_large = getattr(self.request, "too_large", None)
        if too_large is not None:
            context["too_large"] = (
                f"Not saved: {too_large_text(too_large)}: the form below is as it was before your "
                f"changes. {self.shorten}"
            )
        return context

    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        if "too_large" in context:
            kwargs.setdefault("status", TOO_LARGE)
        return super().render_to_response(context, **kwargs)  # type: ignore[misc]


class CountedPaginator(Paginator):
    """A :class:`~django.core.paginator.Paginator` told how many rows its list holds, where the caller
    counted them already (in a query that counts more besides): it asks no ``count()`` of its own."""

    def __init__(self, object_list: Any, per_page: int, *, count: int, **kwargs: Any) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self.count = count


class FilteredListView(TenantMixin, ListView):
    """A dashboard list with optional GET filters, 50 rows a page, kept live.

    A subclass says how to build its filter form (:meth:`filter_form`, a form with
    a ``query()`` of the filters as given) and what the valid filters select
    (:meth:`rows`). Invalid filters list nothing; the template shows their errors
    at their fields. The context adds ``filters``, ``filtered`` (any given),
    ``page_query`` (the filters as ``"a=1&"``, for the pager's links) and
    ``live_src`` (this page's live regions with the same filters and page). ``selected`` holds
    every row the filters select, before the page is cut.
    """

    paginate_by = 50

    def filter_form(self) -> Any:
        raise NotImplementedError

    def rows(self, **filters: Any) -> QuerySet[Any]:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        self.filters = self.filter_form()
        valid = self.filters.is_valid()
        self.selected = self.rows(**self.filters.cleaned_data) if valid else self.rows().none()
        return self.selected

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        query: dict[str, str] = self.filters.query()
        page = context["page_obj"].number
        live = {**query, **({"page": str(page)} if page > 1 else {}), "fragment": "1"}
        context.update(
            filters=self.filters,
            filtered=bool(query),
            page_query=f"{urlencode(query)}&" if query else "",
            live_src=f"{self.request.path}?{urlencode(live)}",
        )
        return context
