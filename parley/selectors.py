"""Reads about tenancy."""

from __future__ import annotations

from collections.abc import Callable

from allauth.account.models import EmailAddress
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import models
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from parley import keys
from parley.models import (
    PLACEHOLDER_EMAIL_DOMAIN,
    ApiKey,
    Invitation,
    Membership,
    Tenant,
    WebhookDelivery,
    WebhookEndpoint,
)


def roles_of(user: AbstractBaseUser | AnonymousUser) -> list[tuple[int, str]]:
    """``(tenant id, role)`` of each tenant ``user`` belongs to, by tenant id."""
    if not user.is_authenticated:
        return []
    rows = Membership.objects.filter(user_id=user.pk).order_by("tenant_id").values_list("tenant_id", "role")
    return list(rows)


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


def members_of(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's memberships with their users: owners, operators, principals, viewers, each by username."""
    rank = models.Case(*(models.When(role=role, then=i) for i, role in enumerate(Membership.Role.values)))
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by(rank, "user__username")


def api_keys_of(*, tenant: Tenant) -> QuerySet[ApiKey]:
    """The tenant's API keys, revoked ones too, newest first, with who made and revoked them."""
    return ApiKey.objects.for_tenant(tenant).select_related("created_by", "revoked_by")


def webhook_endpoints_of(*, tenant: Tenant) -> QuerySet[WebhookEndpoint]:
    """The tenant's webhook endpoints, inactive ones too, newest first."""
    endpoints = WebhookEndpoint.objects.for_tenant(tenant)
    return endpoints.order_by("-created_at", "-pk")


def webhook_deliveries_of(
    *, tenant: Tenant, status: str = "", endpoint: WebhookEndpoint | None = None
) -> QuerySet[WebhookDelivery]:
    """The tenant's webhook deliveries, newest first, with their endpoints; only those in ``status``
    and to ``endpoint`` when given. Without what only a delivery's own page shows (its body, attempt
    log and response excerpt), which can be large."""
    deliveries = WebhookDelivery.objects.for_tenant(tenant)
    if status:
        deliveries = deliveries.filter(status=status)
    if endpoint is not None:
        deliveries = deliveries.filter(endpoint=endpoint)
    return (
        deliveries.select_related("endpoint")
        .defer("payload", "attempt_log", "last_response")
        .order_by("-created_at", "-pk")
    )


def memberships_of(user: AbstractBaseUser) -> QuerySet[Membership]:
    """The user's memberships with their tenants, by tenant name."""
    return Membership.objects.filter(user_id=user.pk).select_related("tenant").order_by("tenant__name", "pk")


def addresses_of(user: AbstractBaseUser) -> set[str]:
    """The e-mail addresses ``user`` has shown are theirs, lower-cased: their verified addresses
    (django-allauth's); for an account made outside sign-up (the admin, ``createsuperuser``), which has
    none on record, the address it was given."""
    rows = list(EmailAddress.objects.filter(user_id=user.pk).values_list("email", "verified"))
    if rows:
        return {email.lower() for email, verified in rows if verified}
    email = str(getattr(user, "email", "") or "")
    return {email.lower()} if email else set()


def is_placeholder(user: AbstractBaseUser) -> bool:
    """Whether ``user`` is a placeholder account (:data:`parley.models.PLACEHOLDER_EMAIL_DOMAIN`): no
    usable password and an address at that domain."""
    email = str(getattr(user, "email", "") or "")
    return not user.has_usable_password() and email.lower().endswith("@" + PLACEHOLDER_EMAIL_DOMAIN)


# What a member answers for, by the apps above parley that own it (register_answers_for).
_answers_for: list[Callable[[Membership], list[str]]] = []


def register_answers_for(source: Callable[[Membership], list[str]]) -> None:
    """Add ``source(membership)``, the names of what the member answers for (the agents they are the
    party of: :func:`agents.members.answered_for`), to :func:`answers_for`; how the pages of
    tenancy show it without ``parley`` importing the app that owns it."""
    if source not in _answers_for:
        _answers_for.append(source)


def answers_for(*, membership: Membership) -> list[str]:
    """The names of what the member answers for, each registered source's in turn."""
    return [name for source in _answers_for for name in source(membership)]


def member_by_username(*, tenant: Tenant, username: str) -> Membership | None:
    """The tenant's membership of the account named ``username`` (in any case), with its user, or
    ``None``."""
    return (
        Membership.objects.filter(tenant=tenant, user__username__iexact=username)
        .select_related("user")
        .first()
    )


def member_by_address(*, tenant: Tenant, email: str) -> Membership | None:
    """The tenant's membership of an account that has ``email`` (in any case) as its address or as one
    of its verified addresses, or ``None``."""
    verified = EmailAddress.objects.filter(email__iexact=email, verified=True).values("user_id")
    return (
        Membership.objects.filter(tenant=tenant)
        .filter(Q(user__email__iexact=email) | Q(user_id__in=verified))
        .select_related("user")
        .first()
    )


def invitation_by_token(token: str) -> Invitation | None:
    """The invitation whose link carries ``token``, with its tenant and inviter, or ``None``.

    The token is what an invitation page is reached by, so this is the one
    lookup not scoped to a tenant; a token that is no string of ours
    (over 200 characters) is not hashed.
    """
    if len(token) > keys.MAX_KEY_CHARS:
        return None
    return (
        Invitation.across_tenants.select_related("tenant", "invited_by", "for_member__user")
        .filter(token_hash=keys.secret_hash(token))
        .first()
    )


def invitations_of(*, tenant: Tenant) -> QuerySet[Invitation]:
    """The tenant's open invitations (pending or expired, not accepted, not revoked), newest first,
    with who sent them and the placeholder member each is for, if any."""
    invitations = Invitation.objects.for_tenant(tenant)
    return invitations.filter(accepted_at__isnull=True, revoked_at__isnull=True).select_related(
        "invited_by", "for_member__user"
    )


def invitations_to(user: AbstractBaseUser) -> QuerySet[Invitation]:
    """The pending invitations to ``user``'s addresses (:func:`addresses_of`) to tenants they are not in,
    with their tenants and inviters, newest first."""
    addresses = addresses_of(user)
    if not addresses:
        return Invitation.objects.none()
    match = Q()
    for address in addresses:
        match |= Q(email__iexact=address)
    return (
        # Invitations to the user's addresses from tenants they are not in, so across tenants.
        Invitation.across_tenants.filter(match, accepted_at__isnull=True, revoked_at__isnull=True)
        .filter(expires_at__gt=timezone.now())
        .exclude(tenant__memberships__user_id=user.pk)
        .select_related("tenant", "invited_by", "for_member__user")
        .order_by("-created_at", "-pk")
    )


def accounts_by_address(email: str) -> list[User]:
    """The active accounts whose address ``email`` is (in any case): those that verified it, else
    those given it with no address on record (made outside sign-up). For trusted callers (commands)."""
    active = User.objects.filter(is_active=True).order_by("pk")
    verified = list(active.filter(emailaddress__email=email.lower(), emailaddress__verified=True))
    if verified:
        return verified
    return list(active.filter(email__iexact=email, emailaddress__isnull=True))
