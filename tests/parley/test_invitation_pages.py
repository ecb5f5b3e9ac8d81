"""The pages of starting an organisation: create one, invite from the members page (the link shown
once), revoke, and an invitation's link for a visitor who signs up, an account that logs in, and
every way it can no longer work; the organisations page where a user with none lands."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core import mail
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from parley import services
from parley.models import Invitation, Membership, Tenant
from tests.conftest import PASSWORD, make_user
from tests.parley.tenancy import member, tenancy_rows

HTMX = {"HX-Request": "true"}
User = get_user_model()


@pytest.fixture(autouse=True)
def fresh_rate_limits() -> None:
    """allauth counts sign-ups and logins in the cache: each test starts with none."""
    cache.clear()


def invite(tenant: Tenant, email: str, role: str, owner: AbstractUser) -> tuple[Invitation, str]:
    """An invitation and the path of its link."""
    issued = services.invitation_create(
        tenant=tenant,
        email=email,
        role=role,
        user=owner,  # type: ignore[arg-type]
        origin="http://testserver",
    )
    return issued.invitation, issued.link.removeprefix("http://testserver")


def members_url(tenant: str = "acme") -> str:
    return reverse("tenant:members", kwargs={"tenant": tenant})


def membership_roles(tenant: Tenant) -> dict[str, str]:
    return dict(Membership.objects.filter(tenant=tenant).values_list("user__username", "role"))


# Creating an organisation.


def test_creating_an_organisation_makes_its_creator_the_owner_and_opens_its_members_page(
    client: Client, db: None
) -> None:
    client.force_login(make_user("nina"))
    form = client.get(reverse("tenant-create")).content.decode()
    assert '<label for="id_name">Name:</label>' in form
    assert '<label for="id_slug">Address:</label>' in form

    response = client.post(reverse("tenant-create"), {"name": "Nina's Bakery", "slug": ""}, follow=True)

    assert response.redirect_chain == [(members_url("ninas-bakery"), 302)]
    page = response.content.decode()
    assert "Nina&#x27;s Bakery is created and you are its owner. Invite the people who work in it." in page
    assert '<h2 id="invite-heading">Invite someone</h2>' in page
    assert membership_roles(Tenant.objects.get(slug="ninas-bakery")) == {"nina": "owner"}


def test_a_taken_address_is_named_at_its_field(client: Client, tenant: Tenant) -> None:
    client.force_login(make_user("nina"))

    response = client.post(reverse("tenant-create"), {"name": "Acme", "slug": "acme"})

    assert response.status_code == 200
    assert response.context["form"].errors == {"slug": ["The address 'acme' is taken: choose another."]}
    assert "Nothing was created: correct the fields marked below." in response.content.decode()
    assert list(Tenant.objects.values_list("slug", flat=True)) == ["acme"]


def test_the_organisations_page_needs_a_login(client: Client, db: None) -> None:
    for name in ("organisations", "tenant-create"):
        response = client.get(reverse(name))
        assert response["Location"].startswith(reverse("login"))


# Inviting from the members page.


@pytest.mark.django_db(transaction=True)
def test_an_owner_invites_and_sees_the_link_once(client: Client, tenant: Tenant, owner: AbstractUser) -> None:
    client.force_login(owner)

    response = client.post(
        reverse("tenant:invitation-create", kwargs={"tenant": "acme"}),
        {"invite-email": "oscar@example.org", "invite-role": "operator"},
        headers=HTMX,
    )

    page = response.content.decode()
    assert page.startswith('<div id="members">')
    assert "no-cache" in response["Cache-Control"]
    [sent] = mail.outbox
    link = re.search(r"http://testserver/invitations/\S+/", sent.body)
    assert link is not None
    assert f'value="{link.group(0)}"' in page
    assert "The link is e-mailed to oscar@example.org." in page
    assert '<th scope="row">oscar@example.org</th>' in page
    assert Invitation.across_tenants.get().role == "operator"
    # Shown once: the page never shows it again.
    assert link.group(0) not in client.get(members_url()).content.decode()


def test_an_address_that_is_a_members_is_refused_at_the_field(
    client: Client, tenant: Tenant, owner: AbstractUser, principal: AbstractUser
) -> None:
    client.force_login(owner)
    before = tenancy_rows()

    response = client.post(
        reverse("tenant:invitation-create", kwargs={"tenant": "acme"}),
        {"invite-email": "tomas@example.com", "invite-role": "viewer"},
    )

    assert response.context["invite_form"].errors == {
        "email": ["tomas@example.com is a member already: tomas (principal)."]
    }
    assert "Nobody was invited: correct the fields marked below." in response.content.decode()
    assert tenancy_rows() == before


def test_an_operator_sees_no_invitations(
    client: Client, tenant: Tenant, owner: AbstractUser, operator: AbstractUser
) -> None:
    invite(tenant, "oscar@example.org", "viewer", owner)
    client.force_login(operator)

    page = client.get(members_url()).content.decode()

    assert "oscar@example.org" not in page
    assert "Invite someone" not in page


def test_an_owner_revokes_an_open_invitation(client: Client, tenant: Tenant, owner: AbstractUser) -> None:
    invitation, _ = invite(tenant, "oscar@example.org", "viewer", owner)
    client.force_login(owner)

    response = client.post(
        reverse("tenant:invitation-revoke", kwargs={"tenant": "acme", "pk": invitation.pk}), follow=True
    )

    assert response.redirect_chain == [(members_url(), 302)]
    page = response.content.decode()
    assert "The invitation to oscar@example.org is revoked; its link no longer works." in page
    assert "No open invitations." in page
    invitation.refresh_from_db()
    assert invitation.status == Invitation.Status.REVOKED


def test_another_tenants_invitation_is_404_and_unchanged(
    client: Client, tenant: Tenant, owner: AbstractUser, other_tenant: Tenant
) -> None:
    gina = member(other_tenant, "gina", Membership.Role.OWNER)
    theirs, _ = invite(other_tenant, "x@example.org", "viewer", gina)
    client.force_login(owner)
    before = tenancy_rows()

    response = client.post(reverse("tenant:invitation-revoke", kwargs={"tenant": "acme", "pk": theirs.pk}))

    assert response.status_code == 404
    assert tenancy_rows() == before


# The link.


def test_a_visitor_signs_up_from_the_link_and_lands_in_the_organisation(
    client: Client, tenant: Tenant, owner: AbstractUser
) -> None:
    invitation, link = invite(tenant, "Oscar@Example.org", "operator", owner)

    welcome = client.get(link).content.decode()
    assert "<h1>Join Acme Robotics</h1>" in welcome
    assert "ona invites you (Oscar@Example.org) to join Acme Robotics on Parley as operator." in welcome
    assert f'<a href="{reverse("account_signup")}">Sign up with Oscar@Example.org</a>' in welcome
    signup = client.get(reverse("account_signup")).content.decode()
    assert 'value="Oscar@Example.org"' in signup

    response = client.post(
        reverse("account_signup"),
        {"email": "Oscar@Example.org", "username": "oscar", "password1": PASSWORD, "password2": PASSWORD},
        follow=True,
    )

    # The link reached them at the address: no confirmation e-mail, and they are in.
    assert mail.outbox == []
    assert response.redirect_chain[-1] == (reverse("agents:inbox", kwargs={"tenant": "acme"}), 302)
    assert "Welcome to Acme Robotics: you joined as operator." in response.content.decode()
    assert membership_roles(tenant)["oscar"] == "operator"
    invitation.refresh_from_db()
    assert invitation.status == Invitation.Status.ACCEPTED


def test_sign_up_from_the_link_is_for_the_invited_address_only(
    client: Client, tenant: Tenant, owner: AbstractUser
) -> None:
    _, link = invite(tenant, "oscar@example.org", "operator", owner)
    client.get(link)

    form = client.get(reverse("account_signup")).context["form"]
    assert form.fields["email"].disabled
    assert form.fields["email"].help_text == (
        "The invitation to Acme Robotics is for this address. To join with another, ask whoever invited "
        "you to invite that one."
    )
    # A browser sends no disabled field; a hand-made request's other address is not taken.
    client.post(
        reverse("account_signup"),
        {"email": "someone@example.org", "username": "oscar", "password1": PASSWORD, "password2": PASSWORD},
    )

    oscar = User.objects.get(username="oscar")
    assert oscar.email == "oscar@example.org"
    assert list(EmailAddress.objects.filter(user=oscar).values_list("email", "verified", "primary")) == [
        ("oscar@example.org", True, True)
    ]
    assert membership_roles(tenant)["oscar"] == "operator"
    assert not EmailAddress.objects.filter(email="someone@example.org").exists()


@pytest.mark.parametrize(
    "change",
    [{"revoked_at": timezone.now()}, {"expires_at": timezone.now() - timedelta(minutes=1)}],
)
def test_an_address_the_link_did_not_reach_is_never_recorded_as_confirmed(
    client: Client, tenant: Tenant, owner: AbstractUser, change: dict[str, Any]
) -> None:
    """The invitation stops working between opening its link and signing up: the form is no longer
    fixed to its address, and an account signed up with another is not given the invited one."""
    invitation, link = invite(tenant, "oscar@example.org", "operator", owner)
    client.get(link)
    Invitation.across_tenants.filter(pk=invitation.pk).update(**change)
    assert not client.get(reverse("account_signup")).context["form"].fields["email"].disabled

    response = client.post(
        reverse("account_signup"),
        {"email": "someone@example.org", "username": "someone", "password1": PASSWORD, "password2": PASSWORD},
        follow=True,
    )

    assert response.redirect_chain == [(reverse("account_email_verification_sent"), 302)]
    someone = User.objects.get(username="someone")
    assert someone.email == "someone@example.org"
    assert list(EmailAddress.objects.filter(user=someone).values_list("email", "verified", "primary")) == [
        ("someone@example.org", False, True)
    ]
    [sent] = mail.outbox
    assert sent.to == ["someone@example.org"]
    assert "someone" not in membership_roles(tenant)


def test_an_existing_account_logs_in_from_the_link_and_joins(
    client: Client, tenant: Tenant, owner: AbstractUser
) -> None:
    make_user("oscar")
    _, link = invite(tenant, "oscar@example.com", "principal", owner)
    welcome = client.get(link).content.decode()
    login = f"{reverse('login')}?next={link}"
    assert f'<a href="{login}">I have an account: log in</a>' in welcome

    back = client.post(login, {"login": "oscar", "password": PASSWORD, "next": link}, follow=True)

    assert back.redirect_chain == [(link, 302)]
    assert '<button type="submit">Join Acme Robotics as oscar</button>' in back.content.decode()
    joined = client.post(link, follow=True)
    assert joined.redirect_chain == [(reverse("agents:inbox", kwargs={"tenant": "acme"}), 302)]
    assert "Welcome to Acme Robotics: you joined as principal." in joined.content.decode()
    assert membership_roles(tenant)["oscar"] == "principal"


def unconfirmed_account(username: str, email: str) -> AbstractUser:
    """An account signed up with ``email`` that never confirmed it."""
    user = User.objects.create_user(username, email=email, password=PASSWORD)
    user.emailaddress_set.create(email=email, verified=False, primary=True)
    return user  # type: ignore[return-value]


def test_an_account_with_the_address_unconfirmed_logs_in_from_the_link_confirming_it_and_joins(
    client: Client, tenant: Tenant, owner: AbstractUser
) -> None:
    """The link reached the address: logging in from it needs no other e-mail to the same inbox."""
    y = unconfirmed_account("y", "y@example.org")
    _, link = invite(tenant, "y@example.org", "owner", owner)
    client.get(link)

    back = client.post(
        f"{reverse('login')}?next={link}", {"login": "y", "password": PASSWORD, "next": link}, follow=True
    )

    assert back.redirect_chain == [(link, 302)]
    assert '<button type="submit">Join Acme Robotics as y</button>' in back.content.decode()
    assert list(y.emailaddress_set.values_list("email", "verified", "primary")) == [
        ("y@example.org", True, True)
    ]
    assert mail.outbox == []
    client.post(link)
    assert membership_roles(tenant)["y"] == "owner"


@pytest.mark.parametrize("opened", ["another invitation", "no invitation"])
def test_a_login_confirms_only_the_address_of_the_invitation_opened_in_that_session(
    client: Client, tenant: Tenant, owner: AbstractUser, opened: str
) -> None:
    y = unconfirmed_account("y", "y@example.org")
    if opened == "another invitation":
        client.get(invite(tenant, "z@example.org", "viewer", owner)[1])
    else:
        invite(tenant, "y@example.org", "viewer", owner)  # its link went to y's inbox, not to this browser

    response = client.post(reverse("login"), {"login": "y", "password": PASSWORD}, follow=True)

    assert response.redirect_chain == [(reverse("account_email_verification_sent"), 302)]
    assert not y.emailaddress_set.get().verified


@pytest.mark.parametrize(
    ("change", "status", "heading", "says"),
    [
        (
            {"expires_at": timezone.now() - timedelta(minutes=1)},
            410,
            "This invitation expired",
            "This invitation to Acme Robotics expired: ask its owners for a new one.",
        ),
        (
            {"revoked_at": timezone.now()},
            410,
            "This invitation was revoked",
            "This invitation to Acme Robotics was revoked: ask its owners for a new one.",
        ),
        (
            {"accepted_at": timezone.now()},
            410,
            "This invitation was used",
            "This invitation to Acme Robotics was used already.",
        ),
    ],
)
def test_a_link_that_no_longer_works_says_why_to_anyone(
    client: Client,
    tenant: Tenant,
    owner: AbstractUser,
    change: dict[str, Any],
    status: int,
    heading: str,
    says: str,
) -> None:
    invitation, link = invite(tenant, "oscar@example.com", "operator", owner)
    Invitation.across_tenants.filter(pk=invitation.pk).update(**change)
    oscar = make_user("oscar")
    before = tenancy_rows()
    del before["users"]  # logging in writes last_login

    for user in (None, oscar):
        if user is not None:
            client.force_login(user)
        response = client.get(link)
        page = response.content.decode()
        assert response.status_code == status
        assert f"<h1>{heading}</h1>" in page
        assert says in page
        assert "Join Acme Robotics" not in page

    assert client.post(link).status_code == status
    after = tenancy_rows()
    del after["users"]
    assert after == before


def test_the_wrong_account_is_told_whose_it_is_and_offered_to_log_out(
    client: Client, tenant: Tenant, owner: AbstractUser
) -> None:
    _, link = invite(tenant, "oscar@example.com", "operator", owner)
    client.force_login(make_user("gus"))
    before = tenancy_rows()

    response = client.get(link)

    page = response.content.decode()
    assert response.status_code == 403
    assert "<h1>This invitation is for another account</h1>" in page
    assert "This invitation is for oscar@example.com, and you are logged in as gus" in page
    assert f'<input type="hidden" name="next" value="{link}">' in page
    assert client.post(link).status_code == 403
    assert tenancy_rows() == before


def test_a_member_already_is_sent_to_the_organisation(
    client: Client, tenant: Tenant, owner: AbstractUser, principal: AbstractUser
) -> None:
    _, link = invite(tenant, "tomas@elsewhere.example", "owner", owner)
    principal.emailaddress_set.create(email="tomas@elsewhere.example", verified=True)
    client.force_login(principal)

    page = client.get(link).content.decode()

    assert "You are a member of Acme Robotics already (principal)." in page
    assert f'<a href="{reverse("agents:inbox", kwargs={"tenant": "acme"})}">Go to Acme Robotics</a>' in page
    assert membership_roles(tenant)["tomas"] == "principal"


def test_an_unknown_link_is_a_404_page(client: Client, db: None) -> None:
    response = client.get(reverse("invitation", kwargs={"token": "not-a-token"}))

    assert response.status_code == 404
    assert "<h1>This invitation link does not work</h1>" in response.content.decode()


# The organisations page.


def test_invitations_to_ones_verified_addresses_are_listed_and_accepted_there(
    client: Client, tenant: Tenant, owner: AbstractUser, other_tenant: Tenant
) -> None:
    oscar = make_user("oscar")
    mine, _ = invite(tenant, "oscar@example.com", "viewer", owner)
    oscar.emailaddress_set.create(email="oscar@unverified.example", verified=False)
    gina = member(other_tenant, "gina", Membership.Role.OWNER)
    invite(other_tenant, "oscar@unverified.example", "viewer", gina)
    client.force_login(oscar)

    page = client.get(reverse("organisations")).content.decode()

    assert '<p class="question-text">Acme Robotics</p>' in page
    assert "Globex" not in page
    joined = client.post(reverse("invitation-to-me-accept", kwargs={"pk": mine.pk}), follow=True)
    assert joined.redirect_chain == [(reverse("agents:inbox", kwargs={"tenant": "acme"}), 302)]
    assert membership_roles(tenant)["oscar"] == "viewer"


def test_accepting_someone_elses_invitation_from_the_page_is_a_404(
    client: Client, tenant: Tenant, owner: AbstractUser
) -> None:
    theirs, _ = invite(tenant, "someone@example.org", "owner", owner)
    client.force_login(make_user("oscar"))
    before = tenancy_rows()

    response = client.post(reverse("invitation-to-me-accept", kwargs={"pk": theirs.pk}))

    assert response.status_code == 404
    assert tenancy_rows() == before


def test_a_member_sees_their_organisations_with_their_roles(
    client: Client, principal: AbstractUser, other_tenant: Tenant
) -> None:
    Membership.objects.create(user=principal, tenant=other_tenant, role=Membership.Role.VIEWER)
    client.force_login(principal)

    page = client.get(reverse("organisations")).content.decode()

    acme, globex = (reverse("agents:inbox", kwargs={"tenant": t}) for t in ("acme", "globex"))
    assert f'<li><a href="{acme}">Acme Robotics</a> <span class="badge">Principal</span></li>' in page
    assert f'<li><a href="{globex}">Globex</a> <span class="badge">Viewer</span></li>' in page
    assert "You are not a member" not in page
