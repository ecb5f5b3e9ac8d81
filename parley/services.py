"""Writes of tenancy: tenants (the organisations), their members, invitations and roles, and their API keys.

Only a tenant's owners manage them: every function that changes a tenant takes
the acting ``user`` and raises :class:`NotAllowed` unless they are an owner when
it runs. Each runs in one transaction holding the tenant's row lock, so two
owners acting at once are serialised and cannot, say, demote each other and
leave none.

Refusals raise ``django.core.exceptions.ValidationError``, keyed by the
parameter at fault where there is one (``{"role": [...]}``), and change nothing.
"""

from __future__ import annotations

import logging
import re
import smtplib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import ForeignObjectRel, Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from parley import keys, selectors
from parley.models import PLACEHOLDER_EMAIL_DOMAIN, ApiKey, Invitation, Membership, Tenant

logger = logging.getLogger(__name__)


class NotAllowed(PermissionDenied):
    """The acting user is not an owner of the tenant (a view answers 403 with the message)."""


def _lock(tenant_id: int) -> None:
    """Take the tenant's row lock."""
    list(Tenant.objects.select_for_update().filter(pk=tenant_id).values_list("pk", flat=True))


def _lock_as_owner(*, tenant_id: int, user: User) -> None:
    """Take the tenant's row lock, then raise :class:`NotAllowed` unless ``user`` is its owner now."""
    _lock(tenant_id)
    owners = Membership.objects.filter(tenant_id=tenant_id, role=Membership.Role.OWNER)
    if not owners.filter(user_id=user.pk).exists():
        raise NotAllowed("Only an owner of this tenant can manage its members and API keys.")


def _check_role(role: str) -> None:
    if role not in Membership.Role.values:
        raise ValidationError(
            {"role": f"Unknown role {role!r}: choose owner, operator, principal or viewer."}
        )


# Tenants: the organisations.

# A tenant's slug is in every URL of its pages and agents (/t/<slug>/, /a2a/<slug>/<agent>): a DNS
# label's characters, so it also fits a subdomain.
SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def tenant_create(*, slug: str, name: str, owner: User | None) -> Tenant:
    """Open a tenant (an organisation) named ``name`` at ``slug``, ``owner`` its first owner; returns it.

    ``slug`` blank: made from the name. ``owner`` None opens it with no member
    (a management command, which then invites its owner).

    Raises:
        ValidationError: keyed ``name`` (blank, over 200 characters) and ``slug`` (not 1 to 63
            lower-case letters, digits and hyphens starting and ending with a letter or digit;
            taken), every problem at once. Nothing is created.
    """
    name = name.strip()
    slug = slug.strip() or slugify(name)[:63].strip("-")
    errors: dict[str, list[str]] = {}
    if not name:
        errors["name"] = ["Give the organisation a name."]
    elif len(name) > 200:
        errors["name"] = [f"Keep the name to 200 characters (it has {len(name)})."]
    taken = [f"The address {slug!r} is taken: choose another."]
    if not slug:
        errors["slug"] = ["Give the organisation an address: lower-case letters, digits and hyphens."]
    elif not SLUG.fullmatch(slug):
        errors["slug"] = [
            f"{slug!r} cannot be an address: use up to 63 lower-case letters (a-z), digits and "
            "hyphens, starting and ending with a letter or digit."
        ]
    elif Tenant.objects.filter(slug=slug).exists():
        errors["slug"] = taken
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        try:
            with transaction.atomic():
                tenant = Tenant.objects.create(slug=slug, name=name)
        except IntegrityError as exc:  # taken between the check and the insert
            raise ValidationError({"slug": taken}) from exc
        if owner is not None:
            Membership.objects.create(tenant=tenant, user=owner, role=Membership.Role.OWNER)
    return tenant


# Invitations.


@dataclass
class IssuedInvitation:
    """An invitation just made, with its ``link``: the only time its token exists (show it once).

    ``mailed`` and ``mail_error`` say whether the e-mail carrying the link was
    sent; they are set when the transaction that made the invitation commits.
    """

    invitation: Invitation
    link: str
    mailed: bool = False
    mail_error: str = ""


class InvitationUnusable(ValidationError):
    """An invitation that cannot be accepted, by anyone or by this account. ``code`` says why:
    ``expired``, ``revoked``, ``accepted`` (used already), ``not_placeholder`` (the member whose
    place it offers is no placeholder any more), ``wrong_account`` (it is for another address than
    the account's) or ``already_member``."""


def invitation_link(*, origin: str, token: str) -> str:
    """The absolute URL of the invitation page of ``token``, at ``origin`` (``https://host``)."""
    return origin.rstrip("/") + reverse("invitation", kwargs={"token": token})


def invitation_create(
    *, tenant: Tenant, email: str, role: str, user: User | None, origin: str
) -> IssuedInvitation:
    """Invite ``email`` to ``tenant`` in ``role``, valid for ``settings.INVITATION_DAYS`` days, and
    e-mail the link (at ``origin``) once the transaction commits.

    ``user`` is the inviting owner; None is an operator of the deployment at a
    management command. An open invitation to the same address is revoked: only
    the newest link works. Only a keyed hash of the token is stored.

    Raises:
        NotAllowed: ``user`` is not an owner of ``tenant``.
        ValidationError: ``{"role": …}`` not a role; ``{"email": …}`` not an address, a
            placeholder's address (it receives no mail), or the address is a member's already (the
            message gives their role).
    """
    return _invitation_issue(tenant=tenant, email=email, role=role, user=user, origin=origin)


def placeholder_invite(
    *, membership: Membership, email: str, user: User | None, origin: str
) -> IssuedInvitation:
    """Invite ``email`` to take the place of the placeholder member ``membership`` (see
    :data:`parley.models.PLACEHOLDER_EMAIL_DOMAIN`), as :func:`invitation_create` invites.

    The person accepts as any invitation is accepted (signing up from the link,
    or logging in), and their account then takes the placeholder's place in the
    tenant: its membership and role, and every row of the tenant that names it,
    so the agents it answers for and their questions become theirs (see
    :func:`invitation_accept`). An open invitation for the same member, or to the
    same address, is revoked.

    Raises:
        NotAllowed: ``user`` is not an owner of the member's tenant.
        ValidationError: the member is no placeholder (it is a person's own account) or was
            removed; ``{"email": …}`` as :func:`invitation_create`.
    """
    return _invitation_issue(
        tenant=membership.tenant, email=email, role="", user=user, origin=origin, for_member=membership
    )


def _invitation_issue(
    *,
    tenant: Tenant,
    email: str,
    role: str,
    user: User | None,
    origin: str,
    for_member: Membership | None = None,
) -> IssuedInvitation:
    """Make an invitation (``for_member``: to take that placeholder's place, in its role) and e-mail
    it on commit; see :func:`invitation_create` and :func:`placeholder_invite`."""
    email = email.strip()
    token = keys.new_secret()
    with transaction.atomic():
        if user is None:
            _lock(tenant.pk)
        else:
            _lock_as_owner(tenant_id=tenant.pk, user=user)
        if for_member is not None:
            placeholder = _current(for_member)
            if not selectors.is_placeholder(placeholder.user):
                raise ValidationError(
                    f"{placeholder.user.get_username()} is no placeholder: it is a person's own account."
                )
            role = placeholder.role
        _check_role(role)
        try:
            validate_email(email)
        except ValidationError as exc:
            raise ValidationError({"email": f"{email!r} is not an e-mail address."}) from exc
        member = selectors.member_by_address(tenant=tenant, email=email)
        if email.lower().endswith("@" + PLACEHOLDER_EMAIL_DOMAIN):
            whose = f" of {member.user.get_username()}" if member is not None else ""
            raise ValidationError(
                {
                    "email": f"{email} is the placeholder address{whose}, which receives no mail: invite "
                    "the person's own address for that member instead."
                }
            )
        if member is not None:
            raise ValidationError(
                {"email": f"{email} is a member already: {member.user.get_username()} ({member.role})."}
            )
        now = timezone.now()
        earlier = Q(email__iexact=email)
        if for_member is not None:
            earlier |= Q(for_member=for_member)
        Invitation.objects.for_tenant(tenant).filter(
            earlier, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(revoked_at=now, revoked_by=user, updated_at=now)
        invitation = Invitation.objects.create(
            tenant=tenant,
            email=email,
            role=role,
            for_member=for_member,
            invited_by=user,
            token_hash=keys.secret_hash(token),
            expires_at=now + timedelta(days=settings.INVITATION_DAYS),
        )
        issued = IssuedInvitation(invitation=invitation, link=invitation_link(origin=origin, token=token))
        transaction.on_commit(lambda: _invitation_mail(issued))
    return issued


def _invitation_mail(issued: IssuedInvitation) -> None:
    """Send the invitation's e-mail; a failure is recorded on ``issued`` (the inviter has the link)."""
    invitation = issued.invitation
    context = {"invitation": invitation, "tenant": invitation.tenant, "link": issued.link}
    subject = render_to_string("parley/email/invitation_subject.txt", context).strip()
    body = render_to_string("parley/email/invitation_message.txt", context)
    try:
        send_mail(settings.ACCOUNT_EMAIL_SUBJECT_PREFIX + subject, body, None, [invitation.email])
    except (smtplib.SMTPException, OSError) as exc:
        logger.warning("invitation %s: the e-mail was not sent: %s", invitation.pk, exc)
        issued.mail_error = str(exc) or type(exc).__name__
    else:
        issued.mailed = True


def invitation_revoke(*, invitation: Invitation, user: User) -> Invitation:
    """Revoke ``invitation``: its link no longer works. Returns it as saved; revoking it again
    keeps the first ``revoked_at`` and ``revoked_by``.

    Raises:
        NotAllowed: ``user`` is not an owner of the invitation's tenant.
        ValidationError: it was accepted (the member is removed on the members page instead).
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=invitation.tenant_id, user=user)
        current = (
            Invitation.objects.for_tenant(invitation.tenant_id).select_for_update().get(pk=invitation.pk)
        )
        if current.accepted_at is not None:
            raise ValidationError(
                f"{current.email} accepted the invitation already; remove the member instead."
            )
        if current.revoked_at is None:
            current.revoked_at = timezone.now()
            current.revoked_by = user
            current.save(update_fields=["revoked_at", "revoked_by", "updated_at"])
        return current


def invitation_refusal(*, invitation: Invitation, user: User | None) -> InvitationUnusable | None:
    """Why ``user`` cannot accept ``invitation`` now, or ``None`` when they can (``user`` None: a
    visitor not logged in, for whom only the invitation's own state counts). Changes nothing.

    An invitation can be accepted while it is open, by an account one of whose
    addresses (:func:`parley.selectors.addresses_of`) it is for, and that is not
    a member of its tenant yet.
    """
    tenant = invitation.tenant
    status = invitation.status
    if status == Invitation.Status.EXPIRED:
        return InvitationUnusable(
            f"This invitation to {tenant.name} expired: ask its owners for a new one.", code=status
        )
    if status == Invitation.Status.REVOKED:
        return InvitationUnusable(
            f"This invitation to {tenant.name} was revoked: ask its owners for a new one.", code=status
        )
    if status == Invitation.Status.ACCEPTED:
        return InvitationUnusable(f"This invitation to {tenant.name} was used already.", code=status)
    placeholder = invitation.for_member.user if invitation.for_member is not None else None
    if placeholder is not None and not selectors.is_placeholder(placeholder):
        return InvitationUnusable(
            f"This invitation was to take {placeholder.get_username()}'s place in {tenant.name}, which "
            "is no placeholder any more: ask its owners for a new one.",
            code="not_placeholder",
        )
    if user is None:
        return None
    if invitation.email.lower() not in selectors.addresses_of(user):
        return InvitationUnusable(
            f"This invitation is for {invitation.email}, and you are logged in as "
            f"{user.get_username()}: log out, then open the link again.",
            code="wrong_account",
        )
    existing = Membership.objects.filter(tenant=tenant, user=user).first()
    if existing is not None:
        return InvitationUnusable(
            f"You are a member of {tenant.name} already ({existing.role}).", code="already_member"
        )
    return None


def invited_address_confirm(*, invitation: Invitation, user: User) -> bool:
    """Record the address ``invitation`` is for as confirmed on ``user``, who has it unconfirmed,
    while the invitation is open. Returns whether it did; otherwise changes nothing.

    For an account logging in from the session that opened the invitation's link
    (:mod:`parley.accounts`): the link was e-mailed to that address, which proves
    it as allauth's own confirmation link would. An address another account has
    confirmed is left unconfirmed (allauth's rule: one account per confirmed address).
    """
    with transaction.atomic():
        address = (
            EmailAddress.objects.select_for_update()
            .filter(user_id=user.pk, email__iexact=invitation.email, verified=False)
            .first()
        )
        current = Invitation.objects.for_tenant(invitation.tenant_id).filter(pk=invitation.pk).first()
        if address is None or current is None or current.status != Invitation.Status.PENDING:
            return False
        return bool(address.set_verified())  # allauth is untyped


def invitation_accept(*, invitation: Invitation, user: User) -> Membership:
    """Make ``user`` a member of the invitation's tenant in its role; returns the membership.

    An invitation for a placeholder member (:func:`placeholder_invite`) gives
    ``user`` the placeholder's place instead: its membership, and every row of the
    tenant that names the placeholder account (the agents it is the principal or
    intake owner of, their questions and intake requests…) then names ``user``;
    the placeholder account, left in no tenant, is deleted.

    Raises:
        InvitationUnusable: :func:`invitation_refusal`'s, with the code ``expired``, ``revoked``,
            ``accepted``, ``not_placeholder``, ``wrong_account`` or ``already_member``. Nothing
            changes.
    """
    with transaction.atomic():
        _lock(invitation.tenant_id)
        current = (
            Invitation.objects.for_tenant(invitation.tenant_id)
            .select_for_update(of=("self",))
            .select_related("tenant", "for_member__user")
            .get(pk=invitation.pk)
        )
        refusal = invitation_refusal(invitation=current, user=user)
        if refusal is not None:
            raise refusal
        if current.for_member is None:
            membership = Membership.objects.create(tenant=current.tenant, user=user, role=current.role)
        else:
            membership = _place_take(placeholder=current.for_member, user=user)
        current.accepted_at = timezone.now()
        current.accepted_by = user
        current.save(update_fields=["accepted_at", "accepted_by", "updated_at"])
        return membership


def _place_take(*, placeholder: Membership, user: User) -> Membership:
    """Give ``user`` (no member of the tenant) the placeholder member's place: every row of the tenant
    that names the placeholder account (its membership among them) names ``user`` instead; then the
    placeholder account is deleted unless another tenant has it. Returns the membership, now ``user``'s.

    Every row a tenant owns carries its ``tenant``, so the rows are found through the user model's
    relations rather than listed here, and a relation added later is moved too.
    """
    account = placeholder.user
    for relation in get_user_model()._meta.get_fields(include_hidden=True):
        if not isinstance(relation, ForeignObjectRel) or isinstance(relation.related_model, str):
            continue
        model, field = relation.related_model, relation.field.name
        if any(f.name == "tenant" for f in model._meta.concrete_fields):
            rows = model._base_manager.filter(tenant_id=placeholder.tenant_id, **{field: account})
            rows.update(**{field: user})
    if not Membership.objects.filter(user=account).exists():
        account.delete()
    placeholder.refresh_from_db()
    return placeholder


def placeholder_create(*, tenant: Tenant, username: str) -> User:
    """A new placeholder account ``username`` made a ``principal`` member of ``tenant``: no usable
    password and the address ``<username>@`` :data:`parley.models.PLACEHOLDER_EMAIL_DOMAIN`, until
    an owner hands its place to the person (:func:`placeholder_invite`). For trusted callers (the
    scenario importer), which check the name is free.
    """
    account = User(username=username, email=f"{username}@{PLACEHOLDER_EMAIL_DOMAIN}")
    account.set_unusable_password()
    account.save()
    Membership.objects.create(user=account, tenant=tenant, role=Membership.Role.PRINCIPAL)
    return account


# Members.

# Checks of the apps above parley on a role change or a removal (register_member_check).
_member_checks: list[Callable[[Membership, str | None], None]] = []


def register_member_check(check: Callable[[Membership, str | None], None]) -> None:
    """Run ``check(membership, role)`` before the member gets ``role`` (:func:`member_role_change`)
    or, ``role`` None, leaves the tenant (:func:`member_remove`), in the same transaction, the
    membership locked and its user loaded: how an app above ``parley`` refuses to lose a member its
    rows need (an agent's party, its intake owner; :func:`agents.members.check_member`) without
    ``parley`` importing it. ``check`` raises ``ValidationError`` saying what to do first."""
    if check not in _member_checks:
        _member_checks.append(check)


def member_role_change(*, membership: Membership, role: str, user: User) -> Membership:
    """Give the member ``role``; returns the membership as saved (unchanged if it had that role).

    Raises:
        NotAllowed: ``user`` is not an owner of the membership's tenant.
        ValidationError: ``{"role": …}`` not a role; the member is the tenant's last owner
            and ``role`` is not owner; a check of :func:`register_member_check` refuses (the
            member is an agent's party and ``role`` may not answer, not in
            :data:`parley.roles.ANSWER`; the message names the agents); the member was removed
            meanwhile.
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=membership.tenant_id, user=user)
        _check_role(role)
        current = _current(membership)
        if current.role == role:
            return current
        if current.role == Membership.Role.OWNER:
            _check_not_last_owner(current, doing="demote")
        for check in _member_checks:
            check(current, role)
        current.role = role
        current.save(update_fields=["role", "updated_at"])
        return current


def member_remove(*, membership: Membership, user: User) -> None:
    """Take the member out of the tenant (their account stays).

    Raises:
        NotAllowed: ``user`` is not an owner of the membership's tenant.
        ValidationError: the member is the tenant's last owner; a check of
            :func:`register_member_check` refuses (the member is an agent's party or intake
            owner: the message names the agents); was removed meanwhile.
    """
    with transaction.atomic():
        _lock_as_owner(tenant_id=membership.tenant_id, user=user)
        current = _current(membership)
        if current.role == Membership.Role.OWNER:
            _check_not_last_owner(current, doing="remove")
        for check in _member_checks:
            check(current, None)
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
    key = (
        ApiKey.across_tenants.select_related("tenant").filter(prefix=prefix, revoked_at__isnull=True).first()
    )
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
