"""Writes of tenancy: a tenant's members and their roles, and its API keys.

Only a tenant's owners manage them: every function takes the acting ``user``
and raises :class:`NotAllowed` unless they are an owner when it runs. Each
runs in one transaction holding the tenant's row lock, so two owners acting at
once are serialised and cannot, say, demote each other and leave none.

Refusals raise ``django.core.exceptions.ValidationError``, keyed by the
parameter at fault where there is one (``{"role": [...]}``), and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from agents.models import Agent
from parley import keys
from parley.models import ApiKey, Membership, Tenant


class NotAllowed(PermissionDenied):
    """The acting user is not an owner of the tenant (a view answers 403 with the message)."""


def _lock_as_owner(*, tenant_id: int, user: User) -> None:
    """Take the tenant's row lock, then raise :class:`NotAllowed` unless ``user`` is its owner now."""
    list(Tenant.objects.select_for_update().filter(pk=tenant_id).values_list("pk", flat=True))
    owners = Membership.objects.filter(tenant_id=tenant_id, role=Membership.Role.OWNER)
    if not owners.filter(user_id=user.pk).exists():
        raise NotAllowed("Only an owner of this tenant can manage its members and API keys.")


def _check_role(role: str) -> None:
    if role not in Membership.Role.values:
        raise ValidationError(
            {"role": f"Unknown role {role!r}: choose owner, operator, principal or viewer."}
        )


# Members.


def member_add(*, tenant: Tenant, account: User, role: str, user: User) -> Membership:
    """Make the existing ``account`` a member of ``tenant`` in ``role``; returns the membership.

    Raises:
        NotAllowed: ``user`` is not an owner of ``tenant``.
        ValidationError: ``{"role": …}`` not a role; ``{"account": …}`` the account is
            deactivated, or already a member (in whichever role).
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=tenant.pk, user=user)
        _check_role(role)
        if not account.is_active:
            raise ValidationError({"account": f"{account.get_username()}'s account is deactivated."})
        existing = Membership.objects.filter(tenant=tenant, user=account).first()
        if existing is not None:
            raise ValidationError(
                {"account": f"{account.get_username()} is already a member ({existing.role})."}
            )
        return Membership.objects.create(tenant=tenant, user=account, role=role)


def member_create(
    *, tenant: Tenant, username: str, email: str, password: str, role: str, user: User
) -> Membership:
    """Open a new account (``username``, ``email``, ``password``) and make it a member of ``tenant`` in
    ``role``; returns the membership, its ``user`` the new account.

    The password must pass ``AUTH_PASSWORD_VALIDATORS``. Nothing is created
    unless everything is valid.

    Raises:
        NotAllowed: ``user`` is not an owner of ``tenant``.
        ValidationError: keyed ``role``, ``username`` (invalid, or taken, in any case),
            ``email`` (invalid, or an account has it already: add that one instead) and
            ``password`` (each validator's message), every problem at once.
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=tenant.pk, user=user)
        _check_role(role)
        account = User(username=username, email=email)
        errors: dict[str, list[str]] = {}
        for field, check in (
            ("username", lambda: User.username_validator(username)),
            ("email", lambda: validate_email(email)),
            ("password", lambda: validate_password(password, user=account)),
        ):
            try:
                check()
            except ValidationError as exc:
                errors[field] = exc.messages
        if "username" not in errors and User.objects.filter(username__iexact=username).exists():
            errors["username"] = [f"The username {username!r} is taken."]
        if "email" not in errors and User.objects.filter(email__iexact=email).exists():
            errors["email"] = ["An account with this e-mail exists: add it as an existing account."]
        if errors:
            raise ValidationError(errors)
        account.set_password(password)
        try:
            with transaction.atomic():
                account.save()
        except IntegrityError as exc:  # taken between the check and the insert
            raise ValidationError({"username": [f"The username {username!r} is taken."]}) from exc
        return Membership.objects.create(tenant=tenant, user=account, role=role)


def member_role_change(*, membership: Membership, role: str, user: User) -> Membership:
    """Give the member ``role``; returns the membership as saved (unchanged if it had that role).

    Raises:
        NotAllowed: ``user`` is not an owner of the membership's tenant.
        ValidationError: ``{"role": …}`` not a role; the member is the tenant's last owner
            and ``role`` is not owner; ``role`` is viewer and the member is an agent's
            party (a viewer cannot answer for it; the message names the agents); the
            member was removed meanwhile.
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=membership.tenant_id, user=user)
        _check_role(role)
        current = _current(membership)
        if current.role == role:
            return current
        if current.role == Membership.Role.OWNER:
            _check_not_last_owner(current, doing="demote")
        if role == Membership.Role.VIEWER:
            parties = _names(_agents_of(current).filter(principal_id=current.user_id))
            if parties:
                raise ValidationError(
                    {
                        "role": f"{current.user.get_username()} answers for {parties}; a viewer cannot. "
                        "Give those agents another party first."
                    }
                )
        current.role = role
        current.save(update_fields=["role", "updated_at"])
        return current


def member_remove(*, membership: Membership, user: User) -> None:
    """Take the member out of the tenant (their account stays).

    Raises:
        NotAllowed: ``user`` is not an owner of the membership's tenant.
        ValidationError: the member is the tenant's last owner; is an agent's party or
            intake owner (the message names the agents); was removed meanwhile.
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=membership.tenant_id, user=user)
        current = _current(membership)
        if current.role == Membership.Role.OWNER:
            _check_not_last_owner(current, doing="remove")
        agents = _agents_of(current)
        parties = _names(agents.filter(principal_id=current.user_id))
        intake = _names(agents.filter(intake_owner_id=current.user_id))
        if parties or intake:
            duties = []
            if parties:
                duties.append(f"the party of {parties}")
            if intake:
                duties.append(f"the intake owner of {intake}")
            raise ValidationError(
                f"{current.user.get_username()} is {' and '.join(duties)}. "
                "Give those agents someone else first, then remove them."
            )
        current.delete()


def _current(membership: Membership) -> Membership:
    """The membership as it is now, locked; refuses if it is gone."""
    current = (
        Membership.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(pk=membership.pk, tenant_id=membership.tenant_id)
        .first()
    )
    if current is None:
        raise ValidationError("That person is no longer a member.")
    return current


def _check_not_last_owner(membership: Membership, *, doing: str) -> None:
    others = Membership.objects.filter(tenant_id=membership.tenant_id, role=Membership.Role.OWNER).exclude(
        pk=membership.pk
    )
    if not others.exists():
        raise ValidationError(
            f"Cannot {doing} {membership.user.get_username()}: they are the tenant's last owner. "
            "Make another member an owner first."
        )


def _agents_of(membership: Membership) -> QuerySet[Agent]:
    """The tenant's agents the member is the party or the intake owner of."""
    agents: QuerySet[Agent] = Agent.objects.for_tenant(membership.tenant_id).filter(
        Q(principal_id=membership.user_id) | Q(intake_owner_id=membership.user_id)
    )
    return agents


def _names(agents: Iterable[Agent]) -> str:
    """``"Alpha, Beta"`` for the agents by name, or ``""``."""
    return ", ".join(sorted(a.name for a in agents))


# API keys.


def api_key_create(*, tenant: Tenant, name: str, scopes: Iterable[str], user: User) -> tuple[ApiKey, str]:
    """Issue an API key of ``tenant`` named ``name`` with ``scopes`` (read, write, admin).

    Returns the row and the key as shown once, ``"<prefix>.<secret>"``: the
    only time the secret exists; only its keyed hash is stored
    (:mod:`parley.keys`). Scopes are stored in the
    order read, write, admin.

    Raises:
        NotAllowed: ``user`` is not an owner of ``tenant``.
        ValidationError: ``{"name": …}`` blank or too long; ``{"scopes": …}`` none, an
            unknown one, or one twice.
    """
    secret = keys.new_secret()
    with transaction.atomic():
        _lock_as_owner(tenant_id=tenant.pk, user=user)
        key = ApiKey(
            tenant=tenant,
            name=name.strip(),
            scopes=list(scopes),
            secret_hash=keys.secret_hash(secret),
            created_by=user,
        )
        key.full_clean(exclude=["prefix"])
        key.scopes = [s for s in ApiKey.Scope.values if s in key.scopes]

        def insert(prefix: str) -> None:
            key.prefix = prefix
            key.save(force_insert=True)

        keys.issue(insert)
        return key, f"{key.prefix}.{secret}"


def api_key_revoke(*, key: ApiKey, user: User) -> ApiKey:
    """Revoke ``key`` from now on; returns it as saved. Revoking it again keeps the first
    ``revoked_at`` and ``revoked_by``.

    Raises:
        NotAllowed: ``user`` is not an owner of the key's tenant.
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=key.tenant_id, user=user)
        now = timezone.now()
        ApiKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=user, updated_at=now
        )
    key.refresh_from_db(fields=["revoked_at", "revoked_by", "updated_at"])
    return key


def api_key_authenticate(raw: str) -> ApiKey | None:
    """The live API key ``raw`` (``"<prefix>.<secret>"``) is, with its tenant loaded, or ``None``.

    This is where a REST request's tenant comes from, so it is the one lookup
    not scoped to a tenant. An unknown prefix, a wrong secret, a revoked key and
    malformed input (see :func:`parley.keys.split`) all answer ``None``; the
    secret is compared in constant time. ``last_used_at`` is written at most
    once a minute per key, so a busy key costs one ``UPDATE`` a minute, not one
    a request.
    """
    parts = keys.split(raw)
    if parts is None:
        return None
    prefix, secret = parts
    key = ApiKey.objects.select_related("tenant").filter(prefix=prefix, revoked_at__isnull=True).first()
    if key is None or not keys.matches(secret, key.secret_hash):
        return None
    now = timezone.now()
    if keys.use_is_stale(key.last_used_at, now):
        written = (
            ApiKey.objects.for_tenant(key.tenant_id)
            .filter(keys.stale_use(now), pk=key.pk)
            .update(last_used_at=now)
        )
        if written:
            key.last_used_at = now
    return key
