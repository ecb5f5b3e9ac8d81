"""Pages outside any tenant: your organisations, creating one, and an invitation's link."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views import View
from django.views.generic import TemplateView

from parley import selectors, services
from parley.accounts import invitation_remember, welcome
from parley.forms import TenantCreateForm
from parley.models import Invitation, Membership

# What each refusal of an invitation answers: gone for good, or not for this account.
REFUSAL_STATUS = {
    "expired": 410,
    "revoked": 410,
    "accepted": 410,
    "not_placeholder": 410,
    "wrong_account": 403,
    "already_member": 200,
}


class OrganisationsView(LoginRequiredMixin, TemplateView):
    """The organisations the user belongs to, the pending invitations to their addresses, and the way
    to create one. Where a user in none lands (``home``)."""

    template_name = "parley/organisations.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context.update(
            memberships=selectors.memberships_of(self.request.user),  # type: ignore[arg-type]
            invitations=selectors.invitations_to(self.request.user),  # type: ignore[arg-type]
        )
        return context


class TenantCreateView(LoginRequiredMixin, View):
    """GET: the form; POST ``name`` and ``slug``: a new organisation whose owner is the user, then its
    members page, to invite the others."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return self.page(TenantCreateForm())

    def post(self, request: HttpRequest) -> HttpResponse:
        form = TenantCreateForm(request.POST)
        user: User = request.user  # type: ignore[assignment]
        if form.is_valid():
            try:
                tenant = services.tenant_create(
                    slug=form.cleaned_data["slug"], name=form.cleaned_data["name"], owner=user
                )
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                messages.success(
                    request,
                    f"{tenant.name} is created and you are its owner. Invite the people who work in it.",
                )
                return redirect("tenant:members", tenant=tenant.slug)
        return self.page(form)

    def page(self, form: TenantCreateForm) -> HttpResponse:
        return render(self.request, "parley/tenant_create.html", {"form": form})


class InvitationToMeAcceptView(LoginRequiredMixin, View):
    """POST: accept a pending invitation to one of the user's addresses, from the organisations page;
    any other invitation is a 404. Then the tenant's inbox, or back with the refusal."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        user: User = request.user  # type: ignore[assignment]
        invitation = get_object_or_404(selectors.invitations_to(user), pk=pk)
        try:
            membership = services.invitation_accept(invitation=invitation, user=user)
        except services.InvitationUnusable as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect("organisations")
        return joined(request, membership)


class InvitationView(View):
    """An invitation's link, ``/invitations/<token>/``, for anyone holding it.

    GET shows what it is and what to do: to a visitor, sign up (the address
    filled in) or log in; to the account it is for, the button to join; to
    anyone else, or once it expired, was revoked or used, why not and what
    to do instead. POST (logged in) accepts it. An unknown token is a 404. The
    page is never cached: it is reached by a secret.
    """

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        invitation = selectors.invitation_by_token(kwargs["token"])
        response: HttpResponseBase
        if invitation is None:
            response = render(request, "parley/invitation.html", {"state": "unknown"}, status=404)
        else:
            response = super().dispatch(request, invitation=invitation, token=kwargs["token"])
        add_never_cache_headers(response)
        return response

    def get(self, request: HttpRequest, invitation: Invitation, token: str) -> HttpResponse:
        user: User | None = request.user if request.user.is_authenticated else None
        refusal = services.invitation_refusal(invitation=invitation, user=user)
        if refusal is not None:
            return self.refused(invitation, refusal)
        if user is None:
            invitation_remember(request, invitation)
            return self.page(invitation, "welcome")
        return self.page(invitation, "accept")

    def post(self, request: HttpRequest, invitation: Invitation, token: str) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect(request.path)
        user: User = request.user
        try:
            membership = services.invitation_accept(invitation=invitation, user=user)
        except services.InvitationUnusable as exc:
            return self.refused(invitation, exc)
        return joined(request, membership)

    def refused(self, invitation: Invitation, refusal: services.InvitationUnusable) -> HttpResponse:
        code = refusal.code or ""
        return self.page(invitation, code, status=REFUSAL_STATUS.get(code, 400), refusal=refusal.messages[0])

    def page(
        self, invitation: Invitation, state: str, *, status: int = 200, refusal: str = ""
    ) -> HttpResponse:
        # Not "tenant": the page is no page of the tenant's (base.html would show its navigation).
        context = {"invitation": invitation, "state": state, "refusal": refusal}
        return render(self.request, "parley/invitation.html", context, status=status)


def joined(request: HttpRequest, membership: Membership) -> HttpResponse:
    """After joining a tenant: its inbox, saying so."""
    welcome(request, membership)
    return redirect("agents:inbox", tenant=membership.tenant.slug)
