"""Dashboard pages of negotiations: the board and one negotiation with its turns. Thin."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.views.generic import DetailView, ListView

from negotiations.models import Negotiation, Turn
from parley.views import TenantMixin


class NegotiationListView(TenantMixin, ListView):
    """Every negotiation of the tenant, both directions, newest first, with its settlement; 50 a page."""

    template_name = "negotiations/list.html"
    fragment_template_name = "negotiations/_list.html"
    context_object_name = "negotiations"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Negotiation]:
        return (
            Negotiation.objects.for_tenant(self.tenant)
            .select_related("agent", "settlement")
            .order_by("-created_at")
        )


class NegotiationDetailView(TenantMixin, DetailView):
    """One negotiation: every turn in order and the settlement, if it has one."""

    template_name = "negotiations/detail.html"
    fragment_template_name = "negotiations/_detail.html"
    context_object_name = "negotiation"

    def get_queryset(self) -> QuerySet[Negotiation]:
        return Negotiation.objects.for_tenant(self.tenant).select_related("agent", "settlement")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["turns"] = (
            Turn.objects.for_tenant(self.tenant).filter(negotiation=self.object).order_by("seq")
        )
        context["settlement"] = getattr(self.object, "settlement", None)
        return context
