"""Writes of the credentials our agents present to counterparties (:class:`CounterpartyCredential`).

What the host API and the admin save through. Every write judges the whole row (``full_clean``,
with :meth:`CounterpartyCredential.clean`) in one transaction; errors are Django's
``ValidationError`` keyed by field, nothing written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from negotiations.models import CounterpartyCredential
from parley.models import Tenant


def credential_create(*, tenant: Tenant, values: Mapping[str, Any]) -> CounterpartyCredential:
    """A new credential of ``tenant`` with ``values`` (field names: ``agent`` — None for every agent
    of the tenant —, ``url_prefix``, ``scheme``, ``header``, ``secret``)."""
    with transaction.atomic():
        return _save(CounterpartyCredential(tenant=tenant), values)


def credential_update(
    *, credential: CounterpartyCredential, values: Mapping[str, Any]
) -> CounterpartyCredential:
    """``credential`` with ``values`` set, re-read under a row lock; the whole row is judged."""
    with transaction.atomic():
        locked = (
            CounterpartyCredential.objects.for_tenant(credential.tenant_id)
            .select_for_update()
            .get(pk=credential.pk)
        )
        return _save(locked, values)


def credential_delete(*, credential: CounterpartyCredential) -> None:
    """Stop presenting ``credential``."""
    credential.delete()


def _save(credential: CounterpartyCredential, values: Mapping[str, Any]) -> CounterpartyCredential:
    for name, value in values.items():
        setattr(credential, name, value)
    credential.full_clean()
    credential.save()
    return credential
