"""Handing a placeholder member over to the person it stands for: an owner invites the person's own
address for it (the members page, or ``manage.py invite --for-member``), and the account that accepts
(signing up or logging in from the link) takes its place — its membership and role, the agents it
answers for and their questions — while the placeholder account goes."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core import mail
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agents.models import Agent, Intent, Question
from agents.scenarios import scenario_import
from parley import services
from parley.models import Invitation, Membership, Tenant
from representative.models import IntakeRequest
from tests.agents.pages import QUESTION, waiting_question
from tests.conftest import PASSWORD, make_user
from tests.parley.tenancy import member, tenancy_rows

User = get_user_model()
SCENARIO = {
    "users": [
        {"id": "alice", "name": "Alice", "intents": [{"id": "cofounder", "intent": "Find a cofounder."}]},
        {"id": "bob", "name": "Bob", "intents": [{"id": "project", "intent": "Find a project."}]},
    ]
}


@pytest.fixture(autouse=True)
def fresh_rate_limits() -> None:
    """allauth counts sign-ups and logins in the cache: each test starts with none."""
    cache.clear()


@pytest.fixture
def lisbon(db: None) -> Tenant:
    """The README's tenant: its scenario imported, each user's agent answered for by a placeholder."""
    tenant = Tenant.objects.create(slug="lisbon", name="Lisbon")
    scenario_import(tenant=tenant, data=SCENARIO)
    return tenant


@pytest.fixture
def lisbon_owner(lisbon: Tenant) -> AbstractUser:
    return member(lisbon, "ona", Membership.Role.OWNER)


def placeholder(tenant: Tenant, username: str) -> Membership:
    return Membership.objects.select_related("user").get(tenant=tenant, user__username=username)


def hand_over_url(membership: Membership) -> str:
    return reverse("tenant:member-hand-over", kwargs={"tenant": membership.tenant.slug, "pk": membership.pk})


def hand_over(membership: Membership, email: str, owner: AbstractUser) -> tuple[Invitation, str]:
    """The invitation for ``membership``'s place and the path of its link."""
    issued = services.placeholder_invite(
        membership=membership,
        email=email,
        user=owner,  # type: ignore[arg-type]
        origin="http://testserver",
    )
    return issued.invitation, issued.link.removeprefix("http://testserver")


def run(*arguments: str) -> list[str]:
    out = io.StringIO()
    call_command(*arguments, stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.django_db(transaction=True)
def test_an_owner_hands_a_placeholder_over_and_the_person_signs_up_into_its_place(
    client: Client, lisbon: Tenant, lisbon_owner: AbstractUser
) -> None:
    alices = Agent.across_tenants.get(tenant=lisbon, slug="alice")
    question = waiting_question(alices, Intent.across_tenants.get(agent=alices))
    stand_in = placeholder(lisbon, "lisbon.alice")
    owner = Client()
    owner.force_login(lisbon_owner)

    members = owner.get(reverse("tenant:members", kwargs={"tenant": "lisbon"})).content.decode()
    assert (
        f'<span class="badge">placeholder</span> <a href="{hand_over_url(stand_in)}">Hand over'
        '<span class="visually-hidden"> lisbon.alice</span> to the person</a>'
    ) in members
    form = owner.get(hand_over_url(stand_in)).content.decode()
    assert "<h1>Hand lisbon.alice over to the person</h1>" in form
    assert "as principal, for a person who has no account here yet, and answers for Alice." in form
    invited = owner.post(hand_over_url(stand_in), {"email": "alice@real.example"})

    assert "no-cache" in invited["Cache-Control"]
    [sent] = mail.outbox
    link = re.search(r"http://testserver(/invitations/\S+/)", sent.body)
    assert link is not None
    assert f'value="{link.group(0)}"' in invited.content.decode()
    assert "You take the place of lisbon.alice, who stood in for you until now" in sent.body
    invitation = Invitation.across_tenants.get()
    assert (invitation.email, invitation.role, invitation.for_member) == (
        "alice@real.example",
        "principal",
        stand_in,
    )

    welcome = client.get(link.group(1)).content.decode()
    assert "as principal, in place of lisbon.alice, who stood in for you until now" in welcome
    signed_up = client.post(
        reverse("account_signup"),
        {"username": "alice", "password1": PASSWORD, "password2": PASSWORD},
        follow=True,
    )

    assert signed_up.redirect_chain[-1] == (reverse("agents:inbox", kwargs={"tenant": "lisbon"}), 302)
    assert QUESTION in signed_up.content.decode()
    alice = User.objects.get(username="alice")
    assert list(EmailAddress.objects.filter(user=alice).values_list("email", "verified")) == [
        ("alice@real.example", True)
    ]
    taken = Membership.objects.get(pk=stand_in.pk)
    assert (taken.user, taken.role) == (alice, Membership.Role.PRINCIPAL)
    alices.refresh_from_db()
    assert alices.principal == alice
    assert not User.objects.filter(username="lisbon.alice").exists()
    assert question.run.agent.principal_id == alice.pk
    # Importing the file again keeps her as the principal: no new placeholder.
    again = scenario_import(tenant=lisbon, data=SCENARIO)
    assert (again.principals_created, again.principals_kept) == ((), 2)


def test_a_person_with_an_account_logs_in_from_the_link_and_takes_the_place(
    client: Client, lisbon: Tenant, lisbon_owner: AbstractUser, other_tenant: Tenant
) -> None:
    alice = member(other_tenant, "alice", Membership.Role.OPERATOR)
    stand_in = placeholder(lisbon, "lisbon.alice")
    _, link = hand_over(stand_in, "alice@example.com", lisbon_owner)
    client.force_login(alice)

    page = client.get(link).content.decode()
    assert '<button type="submit">Join Lisbon as alice</button>' in page
    joined = client.post(link, follow=True)

    assert joined.redirect_chain == [(reverse("agents:inbox", kwargs={"tenant": "lisbon"}), 302)]
    assert "Welcome to Lisbon: you joined as principal." in joined.content.decode()
    assert Membership.objects.get(pk=stand_in.pk).user_id == alice.pk
    assert Agent.across_tenants.get(tenant=lisbon, slug="alice").principal_id == alice.pk
    assert Agent.across_tenants.get(tenant=lisbon, slug="bob").principal.username == "lisbon.bob"
    assert not User.objects.filter(username="lisbon.alice").exists()
    assert Membership.objects.get(tenant=other_tenant, user=alice).role == Membership.Role.OPERATOR


def test_taking_the_place_moves_every_row_of_the_tenant_naming_the_placeholder_and_no_other(
    lisbon: Tenant, lisbon_owner: AbstractUser, other_tenant: Tenant
) -> None:
    stand_in = placeholder(lisbon, "lisbon.alice")
    old = stand_in.user
    alices = Agent.across_tenants.get(tenant=lisbon, slug="alice")
    Agent.across_tenants.filter(pk=alices.pk).update(intake_owner=old)
    intake = IntakeRequest.objects.create(
        tenant=lisbon, agent=alices, caller="anon", summary="Call me.", recipient=old
    )
    answered = waiting_question(alices, Intent.across_tenants.get(agent=alices))
    Question.across_tenants.filter(pk=answered.pk).update(answered_by=old)
    # The same placeholder also stands in at another tenant: that place stays its own.
    Membership.objects.create(tenant=other_tenant, user=old, role=Membership.Role.PRINCIPAL)
    theirs = Agent.objects.create(
        tenant=other_tenant, slug="alice", name="Alice", principal=old, intake_owner=old
    )
    invitation, _ = hand_over(stand_in, "alice@example.com", lisbon_owner)
    alice = make_user("alice")

    services.invitation_accept(invitation=invitation, user=alice)  # type: ignore[arg-type]

    alices.refresh_from_db()
    assert (alices.principal_id, alices.intake_owner_id) == (alice.pk, alice.pk)
    assert IntakeRequest.across_tenants.get(pk=intake.pk).recipient_id == alice.pk
    assert Question.across_tenants.get(pk=answered.pk).answered_by_id == alice.pk
    assert Membership.objects.get(pk=stand_in.pk).user_id == alice.pk
    invitation.refresh_from_db()
    assert (invitation.status, invitation.accepted_by_id) == (Invitation.Status.ACCEPTED, alice.pk)
    theirs.refresh_from_db()
    assert (theirs.principal_id, theirs.intake_owner_id) == (old.pk, old.pk)
    assert Membership.objects.get(tenant=other_tenant, user=old).role == Membership.Role.PRINCIPAL


@pytest.mark.django_db(transaction=True)
def test_invite_for_member_prints_the_link_and_replaces_an_earlier_one_for_the_member(
    lisbon: Tenant, settings: Any
) -> None:
    first = run("invite", "lisbon", "alice@old.example", "--for-member", "lisbon.alice")
    lines = run("invite", "lisbon", "alice@real.example", "--for-member", "Lisbon.Alice")

    invitation = Invitation.across_tenants.get(email="alice@real.example")
    assert lines[0] == (
        "Invited alice@real.example to lisbon (Lisbon) as principal in place of lisbon.alice, until "
        f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC; e-mailed. The link:"
    )
    assert lines[1].startswith(f"{settings.PUBLIC_BASE_URL}/invitations/")
    assert invitation.for_member == placeholder(lisbon, "lisbon.alice")
    assert Invitation.across_tenants.get(email="alice@old.example").status == Invitation.Status.REVOKED
    assert first[1] != lines[1]


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (
            ["lisbon.alice@scenario.invalid", "--role", "principal"],
            "email: lisbon.alice@scenario.invalid is the placeholder address of lisbon.alice, which receives "
            "no mail: invite the person's own address for that member instead.",
        ),
        (
            ["alice@real.example", "--for-member", "ona"],
            "ona is no placeholder: it is a person's own account.",
        ),
        (["alice@real.example", "--for-member", "nobody"], "--for-member: lisbon has no member 'nobody'."),
        (
            ["alice@real.example", "--role", "principal", "--for-member", "lisbon.alice"],
            "argument --for-member: not allowed with argument --role",
        ),
        (
            ["ona@example.com", "--for-member", "lisbon.alice"],
            "email: ona@example.com is a member already: ona (owner).",
        ),
    ],
)
def test_invite_refusals_about_placeholders_name_what_was_wrong(
    lisbon_owner: AbstractUser, arguments: list[str], refusal: str
) -> None:
    before = tenancy_rows()

    with pytest.raises(CommandError) as refused:
        run("invite", "lisbon", *arguments)

    assert refusal in str(refused.value)
    assert tenancy_rows() == before


def test_the_hand_over_page_is_for_owners_and_placeholders_only(
    client: Client, lisbon: Tenant, lisbon_owner: AbstractUser, other_tenant: Tenant
) -> None:
    olga = member(lisbon, "olga", Membership.Role.OPERATOR)
    scenario_import(tenant=other_tenant, data=SCENARIO)
    theirs = placeholder(other_tenant, "globex.alice")
    own = Membership.objects.get(tenant=lisbon, user=olga)
    client.force_login(lisbon_owner)
    before = tenancy_rows()
    del before["users"]  # logging in writes last_login

    assert client.get(hand_over_url(own)).status_code == 404
    wrong = reverse("tenant:member-hand-over", kwargs={"tenant": "lisbon", "pk": theirs.pk})
    assert client.post(wrong, {"email": "alice@real.example"}).status_code == 404
    client.force_login(olga)
    assert client.get(hand_over_url(placeholder(lisbon, "lisbon.alice"))).status_code == 403
    after = tenancy_rows()
    del after["users"]
    assert after == before


def test_a_refused_address_is_shown_at_its_field(
    client: Client, lisbon: Tenant, lisbon_owner: AbstractUser
) -> None:
    client.force_login(lisbon_owner)

    response = client.post(hand_over_url(placeholder(lisbon, "lisbon.alice")), {"email": "ona@example.com"})

    assert response.status_code == 200
    assert response.context["hand_over_form"].errors == {
        "email": ["ona@example.com is a member already: ona (owner)."]
    }
    assert "Nobody was invited: correct the fields marked below." in response.content.decode()
    assert not Invitation.across_tenants.exists()


def test_a_placeholder_given_a_password_meanwhile_is_not_taken_over(
    client: Client, lisbon: Tenant, lisbon_owner: AbstractUser
) -> None:
    stand_in = placeholder(lisbon, "lisbon.alice")
    _, link = hand_over(stand_in, "alice@real.example", lisbon_owner)
    stand_in.user.set_password(PASSWORD)
    stand_in.user.save()
    before = tenancy_rows()

    response = client.get(link)

    assert response.status_code == 410
    page = response.content.decode()
    assert "<h1>This invitation no longer works</h1>" in page
    assert "This invitation was to take lisbon.alice&#x27;s place in Lisbon, which is no placeholder" in page
    assert tenancy_rows() == before
