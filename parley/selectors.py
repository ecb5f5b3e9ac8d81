"""Reads about tenancy."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404

from parley.models import Membership, Tenant


def tenant_ids_of(user: AbstractBaseUser | AnonymousUser) -> list[int]:
    """Ids of the tenants ``user`` belongs to, in any role, in ascending order."""
    if not user.is_authenticated:
        return []
    return list(
        Membership.objects.filter(user_id=user.pk).order_by("tenant_id").values_list("tenant_id", flat=True)
    )


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
