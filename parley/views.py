"""Dashboard pages of tenancy: home, the members (invitations, roles, hand-overs) and the API keys."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.generic import TemplateView
from django_htmx.http import HttpResponseClientRedirect

from parley import selectors, services
from parley.forms import ApiKeyForm, HandOverForm, InvitationForm, MemberRoleForm
from parley.models import ApiKey, Membership
from parley.pages import TenantMixin, is_htmx
from parley.roles import OPERATE
from parley.selectors import first_membership

OWNER = frozenset({Membership.Role.OWNER})


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send the user to their first tenant's inbox, or, in none, to their organisations page (create
    one, or accept an invitation)."""
    membership = first_membership(request.user)
    if membership is None:
        return redirect("organisations")
    return redirect("agents:inbox", tenant=membership.tenant.slug)


class MembersView(TenantMixin, TemplateView):
    """The tenant's members and their roles, for owners and operators; owners also get the forms to
    invite someone by e-mail, revoke an open invitation, change a role and remove a member.

    The changes are posted to the subclasses below. Each answers an htmx
    request with the page's ``#members`` region (its messages included), and a
    plain one by redirecting here (post/redirect/get) or, when the input is
    refused, by showing the page again with the errors at their fields.
    """

    allowed_roles = OPERATE
    template_name = "parley/members.html"
    fragment_template_name = "parley/_members.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        is_owner = self.membership.role == Membership.Role.OWNER
        members = list(selectors.members_of(tenant=self.tenant))
        placeholders = {m.pk for m in members if selectors.is_placeholder(m.user)}
        context.update(members=members, placeholders=placeholders, is_owner=is_owner)
        if is_owner:
            context.update(
                roles=Membership.Role.choices,
                invitations=selectors.invitations_of(tenant=self.tenant),
                invitation_days=settings.INVITATION_DAYS,
            )
            context.setdefault("invite_form", InvitationForm(prefix="invite"))
        return context

    def members_page(self, **context: Any) -> HttpResponse:
        """The page with ``context`` (bound forms showing their errors); its region alone for htmx."""
        template = self.fragment_template_name if is_htmx(self.request) else self.template_name
        return render(self.request, template, self.get_context_data(**context))

    def changed(self) -> HttpResponse:
        """After a change or a refusal with a message: back to the page, as it is now.

        An owner who removed or demoted themselves may no longer see it: they go home.
        """
        mine = Membership.objects.filter(pk=self.membership.pk).first()
        if mine is None or mine.role not in OPERATE:
            home = reverse("home")
            return HttpResponseClientRedirect(home) if is_htmx(self.request) else redirect(home)
        self.membership = mine
        if is_htmx(self.request):
            return self.members_page()
        return redirect("tenant:members", tenant=self.tenant.slug)

    def member(self, pk: int) -> Membership:
        """The tenant's membership ``pk``; another tenant's is a 404."""
        return get_object_or_404(Membership.objects.filter(tenant=self.tenant).select_related("user"), pk=pk)


class InvitationCreateView(MembersView):
    """POST ``email`` and ``role``: invite that address, e-mailing it the link. Owners only.

    The link is shown in the response to the POST (the members page, or its
    region for htmx) and never again, so a deployment without mail still works;
    that response is marked not to be cached.
    """

    allowed_roles = OWNER
    http_method_names = ["post"]

    def post(self, request: HttpRequest, tenant: str) -> HttpResponse:
        form = InvitationForm(request.POST, prefix="invite")
        context: dict[str, Any] = {"invite_form": form}
        if form.is_valid():
            try:
                issued = services.invitation_create(
                    tenant=self.tenant,
                    email=form.cleaned_data["email"],
                    role=form.cleaned_data["role"],
                    user=self.membership.user,
                    origin=request.build_absolute_uri("/"),
                )
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                context.update(invite_form=InvitationForm(prefix="invite"), issued=issued)
        response = self.members_page(**context)
        add_never_cache_headers(response)
        return response


class InvitationRevokeView(MembersView):
    """POST: revoke the tenant's invitation ``pk``, so its link no longer works. Owners only; another
    tenant's invitation is a 404."""

    allowed_roles = OWNER
    http_method_names = ["post"]

    def post(self, request: HttpRequest, tenant: str, pk: int) -> HttpResponse:
        invitation = get_object_or_404(selectors.invitations_of(tenant=self.tenant), pk=pk)
        try:
            services.invitation_revoke(invitation=invitation, user=self.membership.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(
                request, f"The invitation to {invitation.email} is revoked; its link no longer works."
            )
        return self.changed()


class MemberRoleView(MembersView):
    """POST ``role``: the member's new role. Owners only; another tenant's member is a 404.

    A refusal (the last owner, a party made a viewer) is shown as a message and changes nothing.
    """

    allowed_roles = OWNER
    http_method_names = ["post"]

    def post(self, request: HttpRequest, tenant: str, pk: int) -> HttpResponse:
        membership = self.member(pk)
        form = MemberRoleForm(request.POST)
        if not form.is_valid():
            messages.error(request, " ".join(str(e) for e in form.errors["role"]))
            return self.changed()
        try:
            changed = services.member_role_change(
                membership=membership, role=form.cleaned_data["role"], user=self.membership.user
            )
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"{changed.user.get_username()} is now {changed.role}.")
        return self.changed()


class MemberRemoveView(MembersView):
    """GET: asks to confirm taking the member out; POST: does it. Owners only; another tenant's member
    is a 404. A refusal (the last owner, an agent's party or intake owner) is shown as a message and
    changes nothing."""

    allowed_roles = OWNER
    template_name = "parley/member_remove.html"
    fragment_template_name = ""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["member"] = self.member(self.kwargs["pk"])
        return context

    def post(self, request: HttpRequest, tenant: str, pk: int) -> HttpResponse:
        membership = self.member(pk)
        try:
            services.member_remove(membership=membership, user=self.membership.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"{membership.user.get_username()} is no longer a member.")
        return self.changed()


class MemberHandOverView(MembersView):
    """GET: the form to invite the person a placeholder member stands for, at their own address; POST
    ``email``: invites them to take its place (:func:`parley.services.placeholder_invite`), then the
    members page with the link shown once (not cached), or this page with the refusal at its field.
    Owners only; a member who is no placeholder, or another tenant's, is a 404."""

    allowed_roles = OWNER
    template_name = "parley/member_hand_over.html"
    fragment_template_name = ""

    def placeholder(self) -> Membership:
        member = self.member(self.kwargs["pk"])
        if not selectors.is_placeholder(member.user):
            raise Http404("No placeholder member has this id.")
        return member

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        member = context.get("member") or self.placeholder()
        context.update(member=member, answers_for=selectors.answers_for(membership=member))
        context.setdefault("hand_over_form", HandOverForm())
        return context

    def post(self, request: HttpRequest, tenant: str, pk: int) -> HttpResponse:
        member = self.placeholder()
        form = HandOverForm(request.POST)
        if form.is_valid():
            try:
                issued = services.placeholder_invite(
                    membership=member,
                    email=form.cleaned_data["email"],
                    user=self.membership.user,
                    origin=request.build_absolute_uri("/"),
                )
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                response = render(
                    request, MembersView.template_name, self.get_context_data(member=member, issued=issued)
                )
                add_never_cache_headers(response)
                return response
        return render(request, self.template_name, self.get_context_data(member=member, hand_over_form=form))


class ApiKeysView(TenantMixin, TemplateView):
    """The tenant's API keys (revoked ones too) and, POSTed ``name`` and ``scopes``, a new one. Owners only.

    A new key is shown in the response to its POST and never again: not stored,
    not put in a message, and that response is marked not to be cached. An htmx
    POST gets the page's ``#api-keys`` region alone.
    """

    allowed_roles = OWNER
    template_name = "parley/api_keys.html"
    fragment_template_name = "parley/_api_keys.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.setdefault("form", ApiKeyForm())
        context["keys"] = selectors.api_keys_of(tenant=self.tenant)
        return context

    def post(self, request: HttpRequest, tenant: str) -> HttpResponse:
        form = ApiKeyForm(request.POST)
        context: dict[str, Any] = {"form": form}
        if form.is_valid():
            try:
                key, shown_once = services.api_key_create(
                    tenant=self.tenant,
                    name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    user=self.membership.user,
                )
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                context.update(form=ApiKeyForm(), new_key=key, shown_once=shown_once)
        template = self.fragment_template_name if is_htmx(request) else self.template_name
        response = render(request, template, self.get_context_data(**context))
        add_never_cache_headers(response)
        return response


class ApiKeyRevokeView(TenantMixin, TemplateView):
    """GET: asks to confirm revoking the key; POST: revokes it, then back to the keys. Owners only;
    another tenant's key is a 404. Revoking a revoked key changes nothing."""

    allowed_roles = OWNER
    template_name = "parley/api_key_revoke.html"

    def key(self) -> ApiKey:
        return get_object_or_404(selectors.api_keys_of(tenant=self.tenant), pk=self.kwargs["pk"])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["key"] = self.key()
        return context

    def post(self, request: HttpRequest, tenant: str, pk: int) -> HttpResponse:
        key = self.key()
        if key.revoked_at is not None:
            messages.info(request, f"The key {key.name} ({key.prefix}) was already revoked.")
        else:
            services.api_key_revoke(key=key, user=self.membership.user)
            messages.success(request, f"The key {key.name} ({key.prefix}) is revoked; it no longer works.")
        return redirect("tenant:api-keys", tenant=tenant)
