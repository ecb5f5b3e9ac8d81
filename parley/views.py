"""Dashboard plumbing shared by every app: the tenant, resolved once from the URL."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from parley.models import Membership, Tenant
from parley.selectors import first_membership, membership_for


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


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send the user to their first tenant's inbox, or say they have none."""
    membership = first_membership(request.user)
    if membership is None:
        return render(request, "parley/no_tenant.html")
    return redirect("agents:inbox", tenant=membership.tenant.slug)
