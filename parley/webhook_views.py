"""Dashboard pages of the tenant's webhooks, under ``/t/<tenant>/webhooks/``. Thin: every change is
one of :mod:`parley.webhooks`' services, as in the host API (:mod:`api.webhooks`).

Owners and operators (:data:`parley.roles.OPERATE`) manage the endpoints
and re-send deliveries. Viewers read the same pages without their forms; any
POST is a 403 to them. A principal gets a 403, as on the other operator pages:
deliveries carry every party's events. Another tenant's endpoint or delivery
is a 404 and changes nothing.

A change redirects back with a message (post/redirect/get); a refused form is
shown again with each error at its field. A secret is shown once, on the
response to the POST that made it (marked not to be cached), never in a message.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode
from django.views import View
from django.views.generic import DetailView, ListView, TemplateView

from parley import selectors
from parley.forms import WebhookActiveForm, WebhookDeliveryFilterForm, WebhookEndpointForm
from parley.models import Membership, WebhookDelivery, WebhookEndpoint
from parley.pages import TenantMixin, errors_at_fields
from parley.roles import OPERATE
from parley.webhooks import endpoints, resend

READ = OPERATE | {Membership.Role.VIEWER}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Query parameters of the deliveries list that a re-send from it goes back to.
LIST_QUERY = ("status", "endpoint", "page")


class WebhookPageMixin(TenantMixin):
    """A webhooks page: read by :data:`READ`, posted to by :data:`OPERATE` only."""

    allowed_roles = READ
    kwargs: dict[str, Any]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.method not in SAFE_METHODS:
            self.allowed_roles = OPERATE
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["can_operate"] = self.membership.role in OPERATE
        return context

    def endpoint(self) -> WebhookEndpoint:
        """The tenant's endpoint of the URL; another tenant's (or none) is a 404."""
        return get_object_or_404(selectors.webhook_endpoints_of(tenant=self.tenant), pk=self.kwargs["pk"])

    def listing(self) -> HttpResponse:
        return redirect("tenant:webhooks", tenant=self.tenant.slug)


class WebhooksView(WebhookPageMixin, TemplateView):
    """The tenant's endpoints, newest first; POST ``url``, ``events`` and ``description`` to add one.

    The new endpoint's secret is shown in the response to that POST and never again.
    """

    template_name = "parley/webhooks.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.setdefault("form", WebhookEndpointForm())
        context["endpoints"] = selectors.webhook_endpoints_of(tenant=self.tenant)
        return context

    def post(self, request: HttpRequest, tenant: str) -> HttpResponse:
        form = WebhookEndpointForm(request.POST)
        context: dict[str, Any] = {"form": form}
        if form.is_valid():
            try:
                endpoint = endpoints.webhook_endpoint_create(tenant=self.tenant, **form.cleaned_data)
            except ValidationError as exc:
                errors_at_fields(form, exc)
            else:
                context.update(
                    form=WebhookEndpointForm(), new_endpoint=endpoint, shown_secret=endpoint.secret
                )
        response = render(request, self.template_name, self.get_context_data(**context))
        add_never_cache_headers(response)
        return response


class WebhookActiveView(WebhookPageMixin, View):
    """POST ``active`` (``true`` or ``false``): the endpoint is sent deliveries, or not. Either clears
    the reason Parley gave for making it inactive."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, tenant: str, pk: UUID) -> HttpResponse:
        endpoint = self.endpoint()
        form = WebhookActiveForm(request.POST)
        if not form.is_valid():
            messages.error(request, " ".join(str(e) for e in form.errors["active"]))
            return self.listing()
        try:
            endpoint = endpoints.webhook_endpoint_update(
                endpoint=endpoint, active=form.cleaned_data["active"]
            )
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            if endpoint.active:
                messages.success(request, f"{endpoint.url} is active: it is sent new deliveries.")
            else:
                messages.success(request, f"{endpoint.url} is inactive: it is sent nothing until activated.")
        return self.listing()


class WebhookRotateView(WebhookPageMixin, TemplateView):
    """GET: asks to confirm giving the endpoint a new secret; POST: does it and shows the new secret,
    on that response only."""

    allowed_roles = OPERATE
    template_name = "parley/webhook_rotate.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.setdefault("endpoint", self.endpoint())
        return context

    def post(self, request: HttpRequest, tenant: str, pk: UUID) -> HttpResponse:
        endpoint = endpoints.webhook_endpoint_rotate_secret(endpoint=self.endpoint())
        response = render(
            request,
            self.template_name,
            self.get_context_data(endpoint=endpoint, shown_secret=endpoint.secret),
        )
        add_never_cache_headers(response)
        return response


class WebhookDeleteView(WebhookPageMixin, TemplateView):
    """GET: asks to confirm deleting the endpoint and its deliveries; POST: deletes them."""

    allowed_roles = OPERATE
    template_name = "parley/webhook_delete.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        endpoint = self.endpoint()
        context.update(endpoint=endpoint, deliveries=endpoint.deliveries.count())
        return context

    def post(self, request: HttpRequest, tenant: str, pk: UUID) -> HttpResponse:
        endpoint = self.endpoint()
        endpoints.webhook_endpoint_delete(endpoint=endpoint)
        messages.success(request, f"Deleted the endpoint {endpoint.url} and its deliveries.")
        return self.listing()


class WebhookDeliveriesView(WebhookPageMixin, ListView):
    """The tenant's deliveries, newest first, 50 a page. GET filters, both optional (see
    :class:`~parley.forms.WebhookDeliveryFilterForm`): ``status`` and ``endpoint``. Invalid filters
    list nothing and show their errors at their fields."""

    template_name = "parley/webhook_deliveries.html"
    context_object_name = "deliveries"
    paginate_by = 50
    filters: WebhookDeliveryFilterForm

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        endpoints = selectors.webhook_endpoints_of(tenant=self.tenant)
        self.filters = WebhookDeliveryFilterForm(self.request.GET, endpoints=endpoints)
        if not self.filters.is_valid():
            return WebhookDelivery.objects.none()
        return selectors.webhook_deliveries_of(tenant=self.tenant, **self.filters.cleaned_data)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        query = self.filters.query() if self.filters.is_valid() else {}
        page = context["page_obj"].number
        context.update(
            filters=self.filters,
            filtered=bool(query),
            # "a=1&" to put before "page=…" in the pager's links, so they keep the filters.
            page_query=f"{urlencode(query)}&" if query else "",
            # What a re-send from this page comes back to.
            back=urlencode({**query, **({"page": str(page)} if page > 1 else {})}),
        )
        return context


class WebhookDeliveryView(WebhookPageMixin, DetailView):
    """One delivery: what it is, the body it sends (indented JSON), its attempts and the start of
    the last answer."""

    template_name = "parley/webhook_delivery.html"
    context_object_name = "delivery"

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        deliveries = WebhookDelivery.objects.for_tenant(self.tenant)
        return deliveries.select_related("endpoint")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        delivery: WebhookDelivery = self.object
        context["payload"] = json.dumps(delivery.payload, indent=2, sort_keys=True, ensure_ascii=False)
        context["attempt_log"] = [
            {**entry, "at": parse_datetime(entry.get("at") or "")} for entry in reversed(delivery.attempt_log)
        ]
        return context


class WebhookResendView(WebhookPageMixin, View):
    """POST: send the delivery again now (:func:`parley.webhooks.resend.delivery_resend`); a refusal is shown
    as a message and changes nothing. Back to the delivery, or to the deliveries list when the form
    sent ``back`` (that list's query)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, tenant: str, pk: UUID) -> HttpResponse:
        deliveries = WebhookDelivery.objects.for_tenant(self.tenant)
        delivery = get_object_or_404(deliveries, pk=pk)
        try:
            resend.delivery_resend(delivery=delivery)
        except resend.ResendRefused as exc:
            messages.error(request, f"Not re-sent: {exc}")
        else:
            messages.success(
                request, f"Re-sending the {delivery.event_type} delivery ({delivery.webhook_id})."
            )
        if "back" not in request.POST:
            return redirect("tenant:webhook-delivery", tenant=tenant, pk=delivery.pk)
        given = QueryDict(request.POST["back"])
        query = urlencode({name: given[name] for name in LIST_QUERY if given.get(name)})
        listing = reverse("tenant:webhook-deliveries", kwargs={"tenant": tenant})
        return redirect(f"{listing}?{query}" if query else listing)
