"""Dashboard plumbing shared by every app: the tenant, resolved once from the URL."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.forms import Form
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.generic import ListView, TemplateView
from django_htmx.http import HttpResponseClientRedirect

from agents.selectors import OPERATE
from parley import selectors, services
from parley.forms import ApiKeyForm, HandOverForm, InvitationForm, MemberRoleForm
from parley.middleware import TOO_LARGE, too_large_text
from parley.models import ApiKey, Membership, Tenant
from parley.selectors import first_membership, membership_for

OWNER = frozenset({Membership.Role.OWNER})


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
