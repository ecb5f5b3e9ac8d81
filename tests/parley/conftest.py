"""Fixtures of the tenancy tests: an owner and a viewer of ``acme``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser

from parley.models import Membership, Tenant
from tests.parley.tenancy import member


@pytest.fixture
def owner(tenant: Tenant) -> AbstractUser:
    return member(tenant, "ona", Membership.Role.OWNER)


@pytest.fixture
def viewer(tenant: Tenant) -> AbstractUser:
    return member(tenant, "vera", Membership.Role.VIEWER)
