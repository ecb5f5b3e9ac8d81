"""Organisations and invitations, as services: creating a tenant (its creator its owner, its slug
checked), inviting an address in a role (a hashed token, an expiry, the e-mail after commit), revoking,
and accepting (the rules that refuse it, each named)."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone

from parley import keys, services
from parley.models import Invitation, Membership, Tenant
from tests.conftest import make_user
from tests.parley.tenancy import member, tenancy_rows

User = get_user_model()
ORIGIN = "https://parley.example"


def token_of(link: str) -> str:
    """The token an invitation link carries: ``<origin>/invitations/<token>/``."""
    prefix = f"{ORIGIN}/invitations/"
    assert link.startswith(prefix)
    assert link.endswith("/")
    return link[len(prefix) : -1]


def invite(tenant: Tenant, email: str, role: str, owner: AbstractUser) -> services.IssuedInvitation:
    return services.invitation_create(tenant=tenant, email=email, role=role, user=owner, origin=ORIGIN)  # type: ignore[arg-type]


# Tenants.


class TestTenantCreate:
    def test_the_creator_is_its_owner_and_the_slug_comes_from_the_name(self, db: None) -> None:
        nina = make_user("nina")

        tenant = services.tenant_create(slug="", name="  Nina's Bakery ", owner=nina)  # type: ignore[arg-type]

        assert (tenant.slug, tenant.name) == ("ninas-bakery", "Nina's Bakery")
        assert list(Membership.objects.values_list("tenant__slug", "user__username", "role")) == [
            ("ninas-bakery", "nina", "owner")
        ]

    def test_a_slug_given_is_kept(self, db: None) -> None:
        tenant = services.tenant_create(slug="bakery-2", name="Nina's Bakery", owner=make_user("nina"))  # type: ignore[arg-type]

        assert tenant.slug == "bakery-2"

    @pytest.mark.parametrize(
        "slug", ["Acme", "-acme", "acme-", "acme_robotics", "acme robotics", "acmé", "a" * 64, "a/b"]
    )
    def test_a_slug_that_cannot_be_an_address_is_refused_at_its_field(self, db: None, slug: str) -> None:
        with pytest.raises(ValidationError) as refused:
            services.tenant_create(slug=slug, name="Acme", owner=make_user("nina"))  # type: ignore[arg-type]

        assert refused.value.message_dict == {
            "slug": [
                f"{slug!r} cannot be an address: use up to 63 lower-case letters (a-z), digits and hyphens, "
                "starting and ending with a letter or digit."
            ]
        }
        assert not Tenant.objects.exists()

    def test_a_taken_slug_and_a_blank_name_are_named_at_once_and_nothing_is_created(
        self, tenant: Tenant
    ) -> None:
        before = tenancy_rows()

        with pytest.raises(ValidationError) as refused:
            services.tenant_create(slug="acme", name="  ", owner=make_user("nina"))  # type: ignore[arg-type]

        assert refused.value.message_dict == {
            "name": ["Give the organisation a name."],
            "slug": ["The address 'acme' is taken: choose another."],
        }
        assert Tenant.objects.count() == 1
        assert tenancy_rows()["memberships"] == before["memberships"]

    def test_a_name_that_makes_no_slug_asks_for_one(self, db: None) -> None:
        with pytest.raises(ValidationError) as refused:
            services.tenant_create(slug="", name="東京", owner=make_user("nina"))  # type: ignore[arg-type]

        assert refused.value.message_dict == {
            "slug": ["Give the organisation an address: lower-case letters, digits and hyphens."]
        }


# Inviting.


class TestInvite:
    def test_the_token_is_kept_hashed_and_the_link_works_for_the_configured_days(
        self, tenant: Tenant, owner: AbstractUser, settings: Any
    ) -> None:
        settings.INVITATION_DAYS = 3
        before = timezone.now()

        issued = invite(tenant, "  Oscar@Example.org ", "operator", owner)

        invitation = Invitation.across_tenants.get()
        token = token_of(issued.link)
        assert invitation.token_hash == keys.secret_hash(token)
        assert token not in str(Invitation.across_tenants.values().get())
        assert (invitation.tenant, invitation.email, invitation.role, invitation.invited_by) == (
            tenant,
            "Oscar@Example.org",
            "operator",
            owner,
        )
        assert before + timedelta(days=3) <= invitation.expires_at <= timezone.now() + timedelta(days=3)
        assert invitation.status == Invitation.Status.PENDING
        assert str(invitation) == "Oscar@Example.org to acme (operator, pending)"

    def test_the_e_mail_carries_the_link_once_the_transaction_commits(
        self, tenant: Tenant, owner: AbstractUser, django_capture_on_commit_callbacks: Any
    ) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            issued = invite(tenant, "oscar@example.org", "operator", owner)
            assert mail.outbox == []
            assert not issued.mailed

        assert issued.mailed
        assert issued.mail_error == ""
        [sent] = mail.outbox
        assert sent.to == ["oscar@example.org"]
        assert sent.subject == "[Parley] ona invites you to join Acme Robotics on Parley"
        assert "ona invites you to join Acme Robotics on Parley as operator." in sent.body
        assert f"\n{issued.link}\n" in sent.body

    def test_an_e_mail_that_cannot_be_sent_is_reported_and_the_invitation_stands(
        self, tenant: Tenant, owner: AbstractUser, settings: Any, django_capture_on_commit_callbacks: Any
    ) -> None:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", port, 5

        with django_capture_on_commit_callbacks(execute=True):
            issued = invite(tenant, "oscar@example.org", "operator", owner)

        assert not issued.mailed
        assert "Connection refused" in issued.mail_error
        assert Invitation.across_tenants.get().status == Invitation.Status.PENDING

    def test_inviting_an_address_again_revokes_the_earlier_link(
        self, tenant: Tenant, owner: AbstractUser
    ) -> None:
        first = invite(tenant, "oscar@example.org", "viewer", owner).invitation

        second = invite(tenant, "OSCAR@example.org", "operator", owner).invitation

        first.refresh_from_db()
        assert (first.status, first.revoked_by) == (Invitation.Status.REVOKED, owner)
        assert second.status == Invitation.Status.PENDING

    @pytest.mark.parametrize(
        ("email", "role", "errors"),
        [
            ("not-an-address", "viewer", {"email": ["'not-an-address' is not an e-mail address."]}),
            (
                "x@example.org",
                "admin",
                {"role": ["Unknown role 'admin': choose owner, operator, principal or viewer."]},
            ),
            (
                "TOMAS@example.com",
                "viewer",
                {"email": ["TOMAS@example.com is a member already: tomas (principal)."]},
            ),
        ],
    )
    def test_refusals_name_the_field_and_change_nothing(
        self, tenant: Tenant, owner: AbstractUser, principal: AbstractUser, email: str, role: str, errors: Any
    ) -> None:
        before = tenancy_rows()

        with pytest.raises(ValidationError) as refused:
            invite(tenant, email, role, owner)

        assert refused.value.message_dict == errors
        assert tenancy_rows() == before

    def test_a_members_verified_second_address_counts_as_theirs(
        self, tenant: Tenant, owner: AbstractUser, principal: AbstractUser
    ) -> None:
        EmailAddress.objects.create(user=principal, email="tomas@home.example", verified=True)

        with pytest.raises(ValidationError) as refused:
            invite(tenant, "Tomas@Home.example", "viewer", owner)

        assert refused.value.message_dict == {
            "email": ["Tomas@Home.example is a member already: tomas (principal)."]
        }

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_only_an_owner_invites(self, tenant: Tenant, role: str) -> None:
        someone = member(tenant, "sam", role)

        with pytest.raises(services.NotAllowed):
            invite(tenant, "x@example.org", "viewer", someone)

        assert not Invitation.across_tenants.exists()


# Accepting and revoking.


@pytest.fixture
def oscar(db: None) -> AbstractUser:
    """An account that is no member of acme, its address oscar@example.com verified."""
    return make_user("oscar")


@pytest.fixture
def invitation(tenant: Tenant, owner: AbstractUser) -> Invitation:
    return invite(tenant, "oscar@example.com", "operator", owner).invitation


class TestAccept:
    def test_the_invited_account_joins_in_the_role(self, invitation: Invitation, oscar: AbstractUser) -> None:
        membership = services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

        assert (membership.tenant.slug, membership.user, membership.role) == ("acme", oscar, "operator")
        assert str(membership) == "oscar in acme (operator)"
        invitation.refresh_from_db()
        assert invitation.status == Invitation.Status.ACCEPTED
        assert invitation.accepted_by == oscar

    def test_an_account_made_outside_sign_up_is_matched_by_its_address(self, invitation: Invitation) -> None:
        made_in_the_admin = User.objects.create_user("oscar", email="Oscar@Example.com", password="x" * 12)

        services.invitation_accept(invitation=invitation, user=made_in_the_admin)

        assert Membership.objects.filter(user=made_in_the_admin, role="operator").exists()

    @pytest.mark.parametrize(
        ("change", "code", "message"),
        [
            (
                {"expires_at": timezone.now() - timedelta(seconds=1)},
                "expired",
                "This invitation to Acme Robotics expired: ask its owners for a new one.",
            ),
            (
                {"revoked_at": timezone.now()},
                "revoked",
                "This invitation to Acme Robotics was revoked: ask its owners for a new one.",
            ),
            (
                {"accepted_at": timezone.now()},
                "accepted",
                "This invitation to Acme Robotics was used already.",
            ),
        ],
    )
    def test_a_closed_invitation_is_refused_saying_why(
        self, invitation: Invitation, oscar: AbstractUser, change: dict[str, Any], code: str, message: str
    ) -> None:
        Invitation.across_tenants.filter(pk=invitation.pk).update(**change)
        before = tenancy_rows()

        with pytest.raises(services.InvitationUnusable) as refused:
            services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

        assert (refused.value.code, refused.value.messages) == (code, [message])
        assert tenancy_rows() == before

    def test_another_account_is_refused_and_told_to_log_out(self, invitation: Invitation) -> None:
        gus = make_user("gus")
        EmailAddress.objects.create(user=gus, email="oscar@example.com", verified=False)
        before = tenancy_rows()

        with pytest.raises(services.InvitationUnusable) as refused:
            services.invitation_accept(invitation=invitation, user=gus)  # type: ignore[arg-type]

        assert refused.value.code == "wrong_account"
        assert refused.value.messages == [
            "This invitation is for oscar@example.com, and you are logged in as gus: "
            "log out, then open the link again."
        ]
        assert tenancy_rows() == before

    def test_a_member_already_keeps_their_role(self, tenant: Tenant, invitation: Invitation) -> None:
        oscar = member(tenant, "oscar", Membership.Role.VIEWER)
        before = tenancy_rows()

        with pytest.raises(services.InvitationUnusable) as refused:
            services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

        assert refused.value.code == "already_member"
        assert refused.value.messages == ["You are a member of Acme Robotics already (viewer)."]
        assert tenancy_rows() == before

    def test_a_second_accept_is_refused(self, invitation: Invitation, oscar: AbstractUser) -> None:
        services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

        with pytest.raises(services.InvitationUnusable) as refused:
            services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

        assert refused.value.code == "accepted"
        assert Membership.objects.filter(user=oscar).count() == 1


class TestRevoke:
    def test_an_owner_revokes_and_the_link_stops_working(
        self, invitation: Invitation, owner: AbstractUser, oscar: AbstractUser
    ) -> None:
        revoked = services.invitation_revoke(invitation=invitation, user=owner)  # type: ignore[arg-type]

        assert (revoked.status, revoked.revoked_by) == (Invitation.Status.REVOKED, owner)
        with pytest.raises(services.InvitationUnusable):
            services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

    def test_revoking_twice_keeps_the_first(
        self, invitation: Invitation, tenant: Tenant, owner: AbstractUser
    ) -> None:
        first = services.invitation_revoke(invitation=invitation, user=owner)  # type: ignore[arg-type]
        otto = member(tenant, "otto", Membership.Role.OWNER)

        again = services.invitation_revoke(invitation=invitation, user=otto)  # type: ignore[arg-type]

        assert (again.revoked_at, again.revoked_by) == (first.revoked_at, owner)

    def test_an_accepted_invitation_is_not_revoked(
        self, invitation: Invitation, owner: AbstractUser, oscar: AbstractUser
    ) -> None:
        services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]

        with pytest.raises(ValidationError) as refused:
            services.invitation_revoke(invitation=invitation, user=owner)  # type: ignore[arg-type]

        assert refused.value.messages == [
            "oscar@example.com accepted the invitation already; remove the member instead."
        ]

    def test_only_an_owner_revokes(self, tenant: Tenant, invitation: Invitation) -> None:
        olga = member(tenant, "olga", Membership.Role.OPERATOR)

        with pytest.raises(services.NotAllowed):
            services.invitation_revoke(invitation=invitation, user=olga)  # type: ignore[arg-type]

        invitation.refresh_from_db()
        assert invitation.status == Invitation.Status.PENDING
