"""Tenancy: the host organisations, who belongs to them, and the scoping every query uses."""

from __future__ import annotations

from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

_M = TypeVar("_M", bound=models.Model)


class TimeStampedModel(models.Model):
    """Abstract base: when a row was created and last changed."""

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Tenant(TimeStampedModel):
    """A host organisation. Its slug appears in every public URL of its agents."""

    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    model_budget = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="model spend allowed per calendar month (UTC); inbound turns beyond it are refused",
    )

    def __str__(self) -> str:
        return self.slug


class Membership(TimeStampedModel):
    """A user's role in one tenant."""

    class Role(models.TextChoices):
        OWNER = "owner"
        OPERATOR = "operator"
        PRINCIPAL = "principal"
        VIEWER = "viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}:{self.role}"


class TenantQuerySet(models.QuerySet[_M]):
    """Queryset of a tenant-owned model. Views, tasks and consumers start from :meth:`for_tenant`."""

    def for_tenant(self, tenant: Tenant | int) -> TenantQuerySet[_M]:
        tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
        return self.filter(tenant_id=tenant_id)


class TenantOwnedModel(TimeStampedModel):
    """Abstract base for every row a tenant owns: it carries its tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    objects: Any = TenantQuerySet.as_manager()

    class Meta:
        abstract = True


class Event(TenantOwnedModel):
    """Something that happened, kept for the tenant's webhooks: ``kind`` is a live event name
    (``negotiation.turn``, ``negotiation.settled``, …) and ``payload`` its JSON body."""

    kind = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return f"{self.kind} @ {self.created_at:%Y-%m-%d %H:%M:%S}"


def validate_scopes(value: Any) -> None:
    """Validator of :attr:`ApiKey.scopes` (the field itself refuses an empty list): a list of known
    scopes, each once.

    Raises ``ValidationError`` naming what is wrong (not a list, an unknown or repeated scope).
    """
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ValidationError("Scopes must be a list of scope names.", code="not_a_list")
    unknown = sorted(set(value) - set(ApiKey.Scope.values))
    if unknown:
        raise ValidationError(
            "Unknown scope: %(unknown)s. Scopes are read, write and admin.",
            code="unknown_scope",
            params={"unknown": ", ".join(unknown)},
        )
    if len(set(value)) != len(value):
        raise ValidationError("A scope is listed twice.", code="duplicate_scope")


class ApiKey(TenantOwnedModel):
    """A credential the tenant's own backend presents to Parley's REST API (``/api/v1/``).

    Shown once as ``<prefix>.<secret>``; only a keyed hash of the secret is kept
    (see :func:`parley.services.api_key_create`). ``scopes`` is a subset of
    :class:`Scope`, each granted on its own: the API names the scope each
    operation needs. A revoked key stays, as a record of who made and revoked it.
    """

    class Scope(models.TextChoices):
        READ = "read", "read: list and fetch"
        WRITE = "write", "write: start runs, answer, negotiate"
        ADMIN = "admin", "admin: configure agents and the tenant"

    name = models.CharField(max_length=200, help_text="what uses it")
    # unique: also the index a request's key is looked up by.
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=128)
    scopes = models.JSONField(
        default=list, validators=[validate_scopes], error_messages={"blank": "Choose at least one scope."}
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"
