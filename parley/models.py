"""Tenancy: the host organisations, who belongs to them, and the scoping every query uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Self, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

from parley.encryption import EncryptedCharField

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


# A placeholder account stands in for a person who has no account yet (the scenario importer makes
# them as agents' principals): no usable password and an address at this domain, which is reserved
# (RFC 2606), so nothing is ever sent there. An owner hands it over to the person with an invitation
# (parley.services.placeholder_invite).
PLACEHOLDER_EMAIL_DOMAIN = "scenario.invalid"


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
        return f"{self.user} in {self.tenant} ({self.role})"


class UnscopedQuery(Exception):
    """A query of a tenant-owned model built without a tenant: ``Model.objects`` reads only through
    ``for_tenant(tenant)``, and writes only rows that name their tenant. A reader that must see every
    tenant (a beat sweep, an edge lookup that finds the tenant) uses ``Model.across_tenants``."""


# The keys by which a write names its tenant.
_TENANT_KEYS = ("tenant", "tenant_id")


class TenantQuerySet(models.QuerySet[_M]):
    """Queryset of a tenant-owned model, as :meth:`TenantManager.for_tenant` returns it."""

    def for_tenant(self, tenant: Tenant | int) -> Self:
        """These rows narrowed to ``tenant`` (a row or its id)."""
        tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
        return self.filter(tenant_id=tenant_id)


class TenantManager(models.Manager[_M]):
    """``Model.objects`` of a tenant-owned model: it fails closed.

    Reads start from :meth:`for_tenant`; any other query built from the manager
    (``filter``, ``get``, ``all``, ``count``, …) raises :class:`UnscopedQuery`.
    Writes that name their tenant are scoped and allowed: ``create``,
    ``get_or_create`` and ``update_or_create`` whose keywords name ``tenant`` or
    ``tenant_id``, and ``bulk_create`` of rows that each carry one. ``none()``
    is allowed too: an empty queryset reads nothing (DRF views and form fields
    name their model with one).

    Why not django-scopes: it scopes queries by a context variable set around a
    request or task, so whether a query is scoped depends on where it runs. Our
    rule is an explicit ``for_tenant(t)`` at each query, which mypy types and grep
    finds; a second, implicit way would be two ways to do one thing.
    """

    def get_queryset(self) -> TenantQuerySet[_M]:
        """Raises :class:`UnscopedQuery`: every query built from the manager passes here."""
        name = self.model.__name__
        raise UnscopedQuery(
            f"{name}.objects reads only through {name}.objects.for_tenant(tenant); a reader "
            f"that must see every tenant uses {name}.across_tenants."
        )

    def _rows(self) -> TenantQuerySet[_M]:
        return TenantQuerySet(model=self.model, using=self._db)

    def for_tenant(self, tenant: Tenant | int) -> TenantQuerySet[_M]:
        """The rows of ``tenant`` (a row or its id)."""
        return self._rows().for_tenant(tenant)

    def none(self) -> TenantQuerySet[_M]:
        """An empty queryset of the model."""
        return self._rows().none()

    def _named(self, kwargs: dict[str, Any], what: str) -> None:
        if not any(kwargs.get(key) is not None for key in _TENANT_KEYS):
            name = self.model.__name__
            raise UnscopedQuery(f"{name}.objects.{what} needs tenant= or tenant_id=")

    def create(self, **kwargs: Any) -> _M:
        """A new row; ``kwargs`` name its tenant, else :class:`UnscopedQuery`."""
        self._named(kwargs, "create")
        return self._rows().create(**kwargs)

    def get_or_create(self, defaults: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[_M, bool]:
        """The row matching ``kwargs``, which name its tenant, or a new one; else :class:`UnscopedQuery`."""
        self._named(kwargs, "get_or_create")
        return self._rows().get_or_create(defaults, **kwargs)

    def update_or_create(
        self,
        defaults: Mapping[str, Any] | None = None,
        create_defaults: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> tuple[_M, bool]:
        """The row matching ``kwargs``, which name its tenant, updated, or a new one; else
        :class:`UnscopedQuery`."""
        self._named(kwargs, "update_or_create")
        return self._rows().update_or_create(defaults, create_defaults, **kwargs)

    def bulk_create(self, objs: Iterable[_M], *args: Any, **kwargs: Any) -> list[_M]:
        """``objs`` inserted; each carries its tenant, else :class:`UnscopedQuery` (nothing inserted)."""
        objs = list(objs)
        if any(getattr(obj, "tenant_id", None) is None for obj in objs):
            raise UnscopedQuery(f"{self.model.__name__}.objects.bulk_create needs a tenant on every row")
        return self._rows().bulk_create(objs, *args, **kwargs)


class TenantOwnedModel(TimeStampedModel):
    """Abstract base for every row a tenant owns: it carries its tenant.

    ``objects`` (:class:`TenantManager`) fails closed: a query names its tenant.
    ``across_tenants`` reads every tenant's rows; it is the escape hatch of the
    readers that must (beat sweeps, the edge lookups that find the tenant), each
    listed with its reason in tests/parley/test_tenancy.py. Declared first, it is
    the default manager, which Django's own machinery reads (unique validation,
    admin, form fields, related managers such as ``agent.runs``, which their parent
    row scopes).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    across_tenants = models.Manager()
    objects = TenantManager()

    class Meta:
        abstract = True


class Invitation(TenantOwnedModel):
    """An owner's invitation of an e-mail address to join the tenant in ``role``, or, with
    ``for_member``, to take a placeholder member's place (its role is ``role``).

    The link carries a secret token, shown once (in the e-mail, and to the
    inviter); only its keyed hash is kept (:mod:`parley.keys`). The invitation
    is open until it is accepted, revoked (by an owner, or by inviting the same
    address again) or past ``expires_at``; one open invitation per address and
    tenant, and one per placeholder member. Made, revoked and accepted through :mod:`parley.services`.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        ACCEPTED = "accepted"
        REVOKED = "revoked"
        EXPIRED = "expired"

    email = models.EmailField(max_length=254)
    role = models.CharField(max_length=16, choices=Membership.Role.choices)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="empty: an operator of the deployment, with a management command",
    )
    token_hash = models.CharField(max_length=128, unique=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    for_member = models.ForeignKey(
        Membership,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="a placeholder member whose place (role, agents, questions) the invited person takes",
    )

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                Lower("email"),
                "tenant",
                condition=models.Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="one_open_invitation_per_address",
            ),
            models.UniqueConstraint(
                "for_member",
                condition=models.Q(
                    accepted_at__isnull=True, revoked_at__isnull=True, for_member__isnull=False
                ),
                name="one_open_hand_over_per_member",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.email} to {self.tenant} ({self.role}, {self.status})"

    @property
    def status(self) -> str:
        """The invitation's :class:`Status` now: accepted and revoked stay so; an open one expires."""
        if self.accepted_at is not None:
            return self.Status.ACCEPTED
        if self.revoked_at is not None:
            return self.Status.REVOKED
        if self.expires_at <= timezone.now():
            return self.Status.EXPIRED
        return self.Status.PENDING


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


# Webhooks: the host's endpoints and what was sent to them (parley.webhooks).


class WebhookEventType(models.TextChoices):
    """The events a host's webhook endpoint may subscribe to (:data:`parley.webhooks.fan_out.WEBHOOK_TYPES`
    maps the live events to these)."""

    RUN_NEEDS_INPUT = "run.needs_input", "run.needs_input: a run asks its party a question"
    RUN_FINISHED = "run.finished", "run.finished: a run ended"
    QUESTION_ANSWERED = "question.answered", "question.answered: a question was answered"
    NEGOTIATION_TURN = "negotiation.turn", "negotiation.turn: a move in a negotiation"
    NEGOTIATION_SETTLED = "negotiation.settled", "negotiation.settled: a negotiation reached a verdict"
    INTAKE_RECEIVED = "intake.received", "intake.received: an intake request arrived"
    EXCHANGE_COMPLETED = "exchange.completed", "exchange.completed: an Agent Exchange request was run"
    EXCHANGE_FAILED = "exchange.failed", "exchange.failed: an Agent Exchange request could not be sent"


def validate_webhook_events(value: Any) -> None:
    """Validator of :attr:`WebhookEndpoint.events` (the field itself refuses an empty list): a list
    of known event types, each once.

    Raises ``ValidationError`` naming what is wrong (not a list, an unknown or repeated type).
    """
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValidationError("Events must be a list of event types.", code="not_a_list")
    unknown = sorted(set(value) - set(WebhookEventType.values))
    if unknown:
        raise ValidationError(
            "Unknown event type: %(unknown)s. Event types are %(known)s.",
            code="unknown_event_type",
            params={"unknown": ", ".join(unknown), "known": ", ".join(WebhookEventType.values)},
        )
    if len(set(value)) != len(value):
        raise ValidationError("An event type is listed twice.", code="duplicate_event_type")


class WebhookEndpoint(TenantOwnedModel):
    """A URL of the host's that receives the tenant's events of the types in ``events``, signed
    with ``secret`` (Standard Webhooks: ``whsec_`` + base64 of random bytes).

    The secret is kept encrypted (:mod:`parley.encryption`), not hashed, since
    every delivery is signed with it; it is shown to the host once, when made or
    rotated. Created and changed through :mod:`parley.webhooks`, which checks the
    URL against the address policy, and makes the endpoint inactive itself when
    its receiver answers 410 Gone.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=500, blank=True)
    events = models.JSONField(
        default=list,
        validators=[validate_webhook_events],
        error_messages={"blank": "Choose at least one event type."},
    )
    active = models.BooleanField(default=True, help_text="inactive endpoints are sent nothing")
    disabled_reason = models.CharField(
        max_length=500,
        blank=True,
        help_text="why Parley made the endpoint inactive (its receiver answered 410 Gone); "
        "blank once the host sets active",
    )
    secret = EncryptedCharField(max_length=100)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(TenantOwnedModel):
    """One event sent (or to be sent) to one endpoint, with its attempts.

    ``payload`` is the body: ``{"type", "timestamp", "data"}``. A delivery is
    ``pending`` until an attempt is answered with 2xx (``succeeded``) or its
    retry window closes (``failed``); the window opens at creation and again at
    each resend. ``generation`` is bumped whenever an attempt is scheduled: a
    task carries the generation it was scheduled for and does nothing once it
    is stale. ``claimed_until`` marks an attempt under way, so a second copy of
    its task does not send too.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(Event, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    event_type = models.CharField(max_length=64, choices=WebhookEventType.choices)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="attempts made, over every resend")
    window_attempts = models.PositiveIntegerField(default=0, help_text="attempts since the window opened")
    window_opened_at = models.DateTimeField(help_text="creation, or the last resend")
    generation = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_response = models.TextField(blank=True, help_text="the start of the last response's body")
    attempt_log = models.JSONField(default=list, help_text="the latest attempts, oldest first")
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["tenant", "created_at"]),
            models.Index(fields=["status", "next_attempt_at"]),
        ]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event_type} to {self.endpoint_id}: {self.status}"

    @property
    def webhook_id(self) -> str:
        """The ``webhook-id`` header: the same on every attempt and resend of this delivery."""
        return f"msg_{self.pk.hex}"
