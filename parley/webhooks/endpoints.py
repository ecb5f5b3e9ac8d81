"""The host's webhook endpoints: create, change, rotate the secret, delete.

**URLs** (:mod:`parley.netguard`): https only unless
``settings.WEBHOOKS_ALLOW_HTTP``, and a host that resolves to a private,
loopback, link-local or otherwise non-public address is refused unless
``settings.WEBHOOKS_ALLOW_PRIVATE`` (both False in production). Checked when
an endpoint is made or its URL changed, and again at every attempt
(:mod:`parley.webhooks.attempts`), on the address actually connected to.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from parley import netguard
from parley.models import Tenant, WebhookEndpoint
from parley.webhooks import signing


def webhook_endpoint_create(
    *, tenant: Tenant, url: str, events: Iterable[str], description: str = "", active: bool = True
) -> WebhookEndpoint:
    """Make an endpoint of ``tenant`` receiving ``events`` at ``url``, with a new secret (its
    ``secret`` attribute: show it to the host once).

    Raises ``ValidationError`` naming the field: ``url`` (not a URL, not https,
    refused by the address policy), ``events`` (empty, unknown or repeated
    types), ``description`` (too long).
    """
    endpoint = WebhookEndpoint(
        tenant=tenant,
        url=url,
        events=list(events),
        description=description,
        active=active,
        secret=signing.new_secret(),
    )
    endpoint.full_clean()
    _check_url(url)
    endpoint.save()
    return endpoint


def webhook_endpoint_update(
    *,
    endpoint: WebhookEndpoint,
    url: str | None = None,
    events: Iterable[str] | None = None,
    description: str | None = None,
    active: bool | None = None,
) -> WebhookEndpoint:
    """Change what is given (None: leave it) of ``endpoint``; returns the endpoint as saved.

    A new URL is checked as in :func:`webhook_endpoint_create`. Pending
    deliveries go to the URL and with the secret the endpoint has at each
    attempt; an endpoint made inactive gets none (they fail at their next
    attempt). Giving ``active`` clears ``disabled_reason``: the host has
    decided. Raises ``ValidationError`` naming the field.
    """
    if url is not None:
        _check_url(url)  # before the lock: it resolves the host
    with transaction.atomic():
        locked = (
            WebhookEndpoint.objects.for_tenant(endpoint.tenant_id).select_for_update().get(pk=endpoint.pk)
        )
        changes: dict[str, Any] = {"url": url, "description": description, "active": active}
        changes["events"] = None if events is None else list(events)
        if active is not None:
            changes["disabled_reason"] = ""
        fields = [name for name, value in changes.items() if value is not None]
        for name in fields:
            setattr(locked, name, changes[name])
        locked.full_clean()
        locked.save(update_fields=[*fields, "updated_at"])
    return locked


def webhook_endpoint_rotate_secret(*, endpoint: WebhookEndpoint) -> WebhookEndpoint:
    """Give ``endpoint`` a new secret (show it once); the old one signs nothing from now on,
    attempts already under way aside."""
    with transaction.atomic():
        locked = (
            WebhookEndpoint.objects.for_tenant(endpoint.tenant_id).select_for_update().get(pk=endpoint.pk)
        )
        locked.secret = signing.new_secret()
        locked.save(update_fields=["secret", "updated_at"])
    return locked


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    """Delete ``endpoint`` and its deliveries; an attempt under way is not recorded."""
    WebhookEndpoint.objects.for_tenant(endpoint.tenant_id).filter(pk=endpoint.pk).delete()


def _check_url(url: str) -> None:
    """``ValidationError({"url": …})`` unless webhooks may go to ``url`` now (see the module docstring)."""
    try:
        WebhookEndpoint._meta.get_field("url").clean(url, None)
    except ValidationError as exc:
        raise ValidationError({"url": exc.messages}) from None
    if problem := _url_problem(url):
        raise ValidationError({"url": f"Webhooks are not sent to this URL: {problem}."})


def _url_problem(url: str) -> str:
    """Why webhooks may not go to ``url`` now, or "" when they may (it resolves the host)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme != "https" and not (scheme == "http" and settings.WEBHOOKS_ALLOW_HTTP):
        return "it must use https"
    try:
        netguard.vetted_addresses_sync(url, allow_private=settings.WEBHOOKS_ALLOW_PRIVATE)
    except netguard.URLRefused as exc:
        return str(exc)
    return ""
