"""Dashboard pages of the public face: the requests visitors left with the intake tool. Thin."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.views.generic import ListView

from a2a_gateway import representative
from a2a_gateway.models import IntakeRequest
from parley.views import TenantMixin


class IntakeRequestListView(TenantMixin, ListView):
    """The tenant's intake requests, newest first, 50 a page; live (``intake.received``).

    Owners and operators see all of them, and which agents cannot take
    requests (their intake owner is not set); an agent's intake owner sees the
    requests addressed to them. Anyone else gets a 403; another tenant is a 404.
    """

    template_name = "a2a_gateway/intake_list.html"
    fragment_template_name = "a2a_gateway/_intake_list.html"
    context_object_name = "intake_requests"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[IntakeRequest]:
        rows = representative.intake_requests_for(membership=self.membership)
        if rows is None:
            raise PermissionDenied("Only an intake owner, an owner or an operator can see intake requests.")
        return rows

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["unconfigured"] = representative.agents_without_intake(membership=self.membership)
        return context
