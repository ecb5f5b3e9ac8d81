"""Fixtures of the tenancy tests: a viewer of ``acme`` (its owner is in tests/conftest.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser

from parley.models import Membership, Tenant
from tests.parley.tenancy import member


@pytest.fixture
def viewer(tenant: Tenant) -> AbstractUser:
    return member(tenant, "vera", Membership.Role.VIEWER)
