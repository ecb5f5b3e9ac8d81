"""The home page and the tenant resolution every dashboard page goes through."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from parley.models import Membership, Tenant
from tests.conftest import PASSWORD, make_user


def test_home_sends_a_member_to_their_first_tenants_inbox(
    client: Client, principal: AbstractUser, other_tenant: Tenant
) -> None:
    Membership.objects.create(user=principal, tenant=other_tenant, role=Membership.Role.VIEWER)
    client.force_login(principal)

    response = client.get(reverse("home"))

    assert response.status_code == 302
    assert response["Location"] == reverse("agents:inbox", kwargs={"tenant": "acme"})


def test_home_offers_a_user_without_a_tenant_to_create_one(client: Client, db: None) -> None:
    client.force_login(make_user("nobody"))

    response = client.get(reverse("home"), follow=True)

    assert response.redirect_chain == [(reverse("organisations"), 302)]
    page = response.content.decode()
    assert "You are not a member of any organisation on this Parley yet." in page
    assert f'<a href="{reverse("tenant-create")}">Create an organisation</a>' in page


def test_logging_in_through_the_form_lands_on_the_inbox(client: Client, principal: AbstractUser) -> None:
    page = client.get(reverse("login")).content.decode()
    assert '<label for="id_login">Username or e-mail:</label>' in page
    assert '<label for="id_password">Password:</label>' in page

    response = client.post(reverse("login"), {"login": "tomas", "password": PASSWORD}, follow=True)

    assert response.redirect_chain[-1] == (reverse("agents:inbox", kwargs={"tenant": "acme"}), 302)
    assert "<h1>Acme Robotics</h1>" in response.content.decode()


def test_a_member_of_one_tenant_gets_404_on_anothers_pages(
    client: Client, principal: AbstractUser, other_tenant: Tenant
) -> None:
    client.force_login(principal)

    for name in ("agents:inbox", "negotiations:list"):
        response = client.get(reverse(name, kwargs={"tenant": "globex"}))
        assert response.status_code == 404
        assert "Globex" not in response.content.decode()
