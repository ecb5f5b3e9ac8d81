"""Fixtures of the host API tests: keys of each scope, and clients that present them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from parley.models import Membership, Tenant
from parley.services import api_key_create
from tests.conftest import make_user

ALL_SCOPES = ("read", "write", "admin")


@pytest.fixture
def key_for(owner: AbstractUser) -> Callable[..., str]:
    """``key_for(tenant, scopes=...)``: a new API key of ``tenant`` as ``<prefix>.<secret>``."""

    def make(tenant: Tenant, scopes: tuple[str, ...] = ALL_SCOPES, name: str = "backend") -> str:
        creator = owner
        if not Membership.objects.filter(user=owner, tenant=tenant).exists():
            creator = make_user(f"owner-of-{tenant.slug}")
            Membership.objects.create(user=creator, tenant=tenant, role=Membership.Role.OWNER)
        return api_key_create(tenant=tenant, name=name, scopes=scopes, user=creator)[1]

    return make


@pytest.fixture
def client_for() -> Callable[[str], APIClient]:
    """``client_for(raw_key)``: an APIClient that sends ``Authorization: Bearer <raw_key>``."""

    def make(raw: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


@pytest.fixture
def api(tenant: Tenant, key_for: Callable[..., str], client_for: Callable[[str], APIClient]) -> APIClient:
    """A client of ``tenant`` with every scope."""
    return client_for(key_for(tenant))


@pytest.fixture
def other_api(
    other_tenant: Tenant, key_for: Callable[..., str], client_for: Callable[[str], APIClient]
) -> APIClient:
    """A client of ``other_tenant`` with every scope: the other side of every isolation test."""
    return client_for(key_for(other_tenant))
