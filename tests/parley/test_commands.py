"""``manage.py create_organisation`` and ``manage.py invite``, for operators who script onboarding: what
they print (the link last), and refusals that name what was wrong, exit non-zero and leave nothing."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core import mail
from django.core.management import CommandError, call_command

from parley import devstack, selectors, services
from parley.models import Invitation, Membership, Tenant
from tests.conftest import PASSWORD, make_user
from tests.parley.tenancy import tenancy_rows

# The commands' transactions commit: their e-mail goes after the commit, as in production.
pytestmark = pytest.mark.django_db(transaction=True)


def run(*arguments: str) -> list[str]:
    out = io.StringIO()
    call_command(*arguments, stdout=out)
    return out.getvalue().splitlines()


def token_of(link: str, settings: Any) -> str:
    prefix = f"{settings.PUBLIC_BASE_URL}/invitations/"
    assert link.startswith(prefix), link
    return link.removeprefix(prefix).removesuffix("/")


def test_create_organisation_makes_an_existing_account_its_owner(settings: Any) -> None:
    make_user("nina")

    lines = run(
        "create_organisation", "bakery", "--name", "Nina's Bakery", "--owner-email", "Nina@Example.com"
    )

    assert lines == [
        "Created the organisation bakery (Nina's Bakery).",
        "Its owner is nina (Nina@Example.com).",
    ]
    tenant = Tenant.objects.get(slug="bakery")
    assert list(Membership.objects.filter(tenant=tenant).values_list("user__username", "role")) == [
        ("nina", "owner")
    ]
    assert mail.outbox == []


def test_create_organisation_invites_an_owner_who_has_no_account(settings: Any) -> None:
    lines = run(
        "create_organisation", "bakery", "--name", "Nina's Bakery", "--owner-email", "nina@example.org"
    )

    tenant = Tenant.objects.get(slug="bakery")
    invitation = Invitation.across_tenants.get()
    assert lines[:3] == [
        "Created the organisation bakery (Nina's Bakery).",
        "No account has confirmed the address nina@example.org: its owner is whoever accepts this "
        "invitation, signing up from the link, or logging in from it to an account with the address "
        "(which confirms it).",
        f"Invited nina@example.org to bakery (Nina's Bakery) as owner, until "
        f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC; e-mailed. The link:",
    ]
    assert selectors.invitation_by_token(token_of(lines[3], settings)) == invitation
    assert (invitation.tenant, invitation.role, invitation.invited_by) == (tenant, "owner", None)
    assert not Membership.objects.filter(tenant=tenant).exists()
    [sent] = mail.outbox
    assert sent.subject == "[Parley] You are invited to join Nina's Bakery on Parley"
    assert lines[3] in sent.body


def test_create_organisation_says_no_account_has_confirmed_an_address_one_has_unconfirmed(
    settings: Any,
) -> None:
    y = get_user_model().objects.create_user("y", email="y@example.org", password=PASSWORD)
    y.emailaddress_set.create(email="y@example.org", verified=False, primary=True)

    lines = run("create_organisation", "initech5", "--name", "Initech", "--owner-email", "y@example.org")

    assert lines[1] == (
        "No account has confirmed the address y@example.org: its owner is whoever accepts this "
        "invitation, signing up from the link, or logging in from it to an account with the address "
        "(which confirms it)."
    )
    assert Invitation.across_tenants.get().email == "y@example.org"
    assert not Membership.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (
            ["Bakery", "--name", "B", "--owner-email", "nina@example.org"],
            "slug: 'Bakery' cannot be an address: use up to 63 lower-case letters (a-z), digits and hyphens, "
            "starting and ending with a letter or digit.",
        ),
        (["acme", "--name", "B", "--owner-email", "nina@example.org"], "slug: The address 'acme' is taken"),
        (
            ["bakery", "--name", " ", "--owner-email", "nina@example.org"],
            "name: Give the organisation a name.",
        ),
        (
            ["bakery", "--name", "B", "--owner-email", "nina"],
            "--owner-email 'nina' is not an e-mail address.",
        ),
    ],
)
def test_create_organisation_refusals_name_what_was_wrong_and_leave_nothing(
    tenant: Tenant, arguments: list[str], refusal: str
) -> None:
    before = (list(Tenant.objects.values()), tenancy_rows())

    with pytest.raises(CommandError) as refused:
        run("create_organisation", *arguments)

    assert refusal in str(refused.value)
    assert (list(Tenant.objects.values()), tenancy_rows()) == before


def test_create_organisation_will_not_guess_between_two_accounts_with_the_address(db: None) -> None:
    for name in ("nina", "nina2"):
        get_user_model().objects.create_user(name, email="nina@example.org", password="x" * 12)

    with pytest.raises(CommandError) as refused:
        run("create_organisation", "bakery", "--name", "B", "--owner-email", "nina@example.org")

    assert (
        str(refused.value)
        == "Several accounts have the address nina@example.org (nina, nina2): none was chosen."
    )
    assert not Tenant.objects.exists()


def test_invite_prints_the_link_last(tenant: Tenant, owner: AbstractUser, settings: Any) -> None:
    lines = run("invite", "acme", "oscar@example.org", "--role", "operator")

    invitation = Invitation.across_tenants.get()
    assert lines[0] == (
        f"Invited oscar@example.org to acme (Acme Robotics) as operator, until "
        f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC; e-mailed. The link:"
    )
    assert selectors.invitation_by_token(token_of(lines[1], settings)) == invitation
    assert len(lines) == 2
    oscar = make_user("oscar")
    oscar.emailaddress_set.create(email="oscar@example.org", verified=True)
    services.invitation_accept(invitation=invitation, user=oscar)  # type: ignore[arg-type]
    assert Membership.objects.get(user=oscar).role == "operator"


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (["globex", "x@example.org", "--role", "viewer"], "No organisation has the slug 'globex'"),
        (["acme", "tomas@example.com", "--role", "viewer"], "email: tomas@example.com is a member already"),
        (["acme", "x", "--role", "viewer"], "email: 'x' is not an e-mail address."),
        (["acme", "x@example.org", "--role", "admin"], "argument --role: invalid choice: 'admin'"),
    ],
)
def test_invite_refusals_name_what_was_wrong(
    principal: AbstractUser, arguments: list[str], refusal: str
) -> None:
    before = tenancy_rows()

    with pytest.raises(CommandError) as refused:
        run("invite", *arguments)

    assert refusal in str(refused.value)
    assert tenancy_rows() == before


def test_a_refusal_exits_non_zero_with_the_reason() -> None:
    """As an operator's script sees it: its own process, the message on stderr, exit status 1."""
    arguments = ["create_organisation", "bakery", "--name", "B", "--owner-email", "nina"]
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=devstack.ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    assert done.stderr.strip() == "CommandError: --owner-email 'nina' is not an e-mail address."
