"""Reads about tenancy."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import models
from django.db.models import QuerySet
from django.http import Http404

from parley.models import ApiKey, Membership, Tenant, WebhookDelivery, WebhookEndpoint


def roles_of(user: AbstractBaseUser | AnonymousUser) -> list[tuple[int, str]]:
    """``(tenant id, role)`` of each tenant ``user`` belongs to, by tenant id."""
    if not user.is_authenticated:
        return []
    rows = Membership.objects.filter(user_id=user.pk).order_by("tenant_id").values_list("tenant_id", "role")
    return list(rows)


def membership_for(*, user: AbstractBaseUser | AnonymousUser, tenant_slug: str) -> Membership:
    """The user's membership of the tenant named by ``tenant_slug``, with the tenant and user loaded.

    Raises ``Http404`` when the tenant does not exist or the user is not a
    member: another tenant is indistinguishable from no tenant.
    """
    if not user.is_authenticated:
        raise Http404("No such tenant.")
    membership = (
        Membership.objects.select_related("tenant", "user")
        .filter(user_id=user.pk, tenant__slug=tenant_slug)
        .first()
    )
    if membership is None:
        raise Http404("No such tenant.")
    return membership


def first_membership(user: AbstractBaseUser | AnonymousUser) -> Membership | None:
    """The user's membership of their first tenant by slug, or ``None`` when they belong to none."""
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.select_related("tenant").filter(user_id=user.pk).order_by("tenant__slug").first()
    )


def tenant_by_slug(slug: str) -> Tenant | None:
    """The tenant with this slug, or ``None``. For trusted callers only (commands): no membership check."""
    return Tenant.objects.filter(slug=slug).first()


def members_of(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's memberships with their users: owners, operators, principals, viewers, each by username."""
    rank = models.Case(*(models.When(role=role, then=i) for i, role in enumerate(Membership.Role.values)))
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by(rank, "user__username")


def api_keys_of(*, tenant: Tenant) -> QuerySet[ApiKey]:
    """The tenant's API keys, revoked ones too, newest first, with who made and revoked them."""
    return ApiKey.objects.for_tenant(tenant).select_related("created_by", "revoked_by")


def webhook_endpoints_of(*, tenant: Tenant) -> QuerySet[WebhookEndpoint]:
    """The tenant's webhook endpoints, inactive ones too, newest first."""
    endpoints: QuerySet[WebhookEndpoint] = WebhookEndpoint.objects.for_tenant(tenant)
    return endpoints.order_by("-created_at", "-pk")


def webhook_deliveries_of(
    *, tenant: Tenant, status: str = "", endpoint: WebhookEndpoint | None = None
) -> QuerySet[WebhookDelivery]:
    """The tenant's webhook deliveries, newest first, with their endpoints; only those in ``status``
    and to ``endpoint`` when given. Without what only a delivery's own page shows (its body, attempt
    log and response excerpt), which can be large."""
    deliveries: QuerySet[WebhookDelivery] = WebhookDelivery.objects.for_tenant(tenant)
    if status:
        deliveries = deliveries.filter(status=status)
    if endpoint is not None:
        deliveries = deliveries.filter(endpoint=endpoint)
    return (
        deliveries.select_related("endpoint")
        .defer("payload", "attempt_log", "last_response")
        .order_by("-created_at", "-pk")
    )


def accounts_by_login(login: str) -> list[User]:
    """The active account whose username is ``login``; else those whose username, then whose e-mail,
    is ``login`` in any case (two at most: more than one means the login does not tell them apart)."""
    active = User.objects.filter(is_active=True)
    by_username = list(active.filter(username=login)) or list(
        active.filter(username__iexact=login).order_by("pk")[:2]
    )
    if by_username or not login:
        return by_username
    return list(active.filter(email__iexact=login).order_by("pk")[:2])
