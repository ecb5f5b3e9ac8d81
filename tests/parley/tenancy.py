"""What the tenancy tests share: members, and a snapshot of every row a refused request must not change."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser

from parley.models import ApiKey, Invitation, Membership, Tenant
from tests.conftest import make_user


def member(tenant: Tenant, username: str, role: str) -> AbstractUser:
    """A new account, ``username``, a member of ``tenant`` in ``role``."""
    user = make_user(username)
    user.email = f"{username}@example.com"
    user.save(update_fields=["email"])
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def tenancy_rows() -> dict[str, list[dict[str, Any]]]:
    """Every account, membership, invitation and API key as stored."""
    return {
        "users": list(get_user_model().objects.order_by("pk").values()),
        "memberships": list(Membership.objects.order_by("pk").values()),
        "invitations": list(Invitation.across_tenants.order_by("pk").values()),
        "api_keys": list(ApiKey.across_tenants.order_by("pk").values()),
    }
