"""Tenancy: the host organisations, who belongs to them, and the scoping every query uses."""

from __future__ import annotations

from typing import Any, TypeVar

from django.conf import settings
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
