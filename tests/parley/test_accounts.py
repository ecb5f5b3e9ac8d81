"""Accounts through django-allauth, as this Parley configures it: sign-up with a mandatory e-mail
confirmation, login by username or address, login throttling, password reset, closed sign-up, and
the addresses of accounts made before sign-up existed."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core import mail
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from negotiations import demo
from parley.mail import local_mail_note
from tests.conftest import PASSWORD, make_user

User = get_user_model()
SIGNUP = {"email": "nina@example.org", "username": "nina", "password1": PASSWORD, "password2": PASSWORD}


@pytest.fixture(autouse=True)
def fresh_rate_limits() -> None:
    """allauth counts attempts in the cache: each test starts with none."""
    cache.clear()


def link_in(body: str, path: str) -> str:
    """The path of the first link in ``body`` to ``path``…"""
    found = re.search(rf"https?://[^/\s]+({re.escape(path)}\S+)", body)
    assert found, body
    return found.group(1)


def test_sign_up_asks_to_confirm_the_address_and_logs_in_once_it_is(client: Client, db: None) -> None:
    response = client.post(reverse("account_signup"), SIGNUP, follow=True)

    assert response.redirect_chain == [(reverse("account_email_verification_sent"), 302)]
    page = response.content.decode()
    assert "<h1>Confirm your e-mail address</h1>" in page
    assert "Open it to confirm that the address is yours. Opened in this browser, it logs you in too;" in page
    assert client.get(reverse("home"))["Location"].startswith(reverse("login"))  # not logged in yet
    assert not EmailAddress.objects.get(email="nina@example.org").verified
    [sent] = mail.outbox
    assert sent.to == ["nina@example.org"]
    confirm = link_in(sent.body, "/confirm-email/")

    assert "Confirm" in client.get(confirm).content.decode()
    confirmed = client.post(confirm, follow=True)

    assert EmailAddress.objects.get(email="nina@example.org").verified
    assert confirmed.redirect_chain[-1] == (reverse("organisations"), 302)
    assert "You are not a member of any organisation on this Parley yet." in confirmed.content.decode()


@pytest.mark.parametrize(
    ("username", "password", "refusal"),
    [
        ("y", "password", "This password is too common."),
        ("nina", "20250101123", "This password is entirely numeric."),
        ("ninabakery", "ninabakery7", "The password is too similar to the username."),
        ("nina", "k7-Qx!", "This password is too short. It must contain at least 8 characters."),
    ],
)
def test_sign_up_refuses_a_weak_password(
    client: Client, db: None, username: str, password: str, refusal: str
) -> None:
    form = {**SIGNUP, "username": username, "password1": password, "password2": password}

    response = client.post(reverse("account_signup"), form)

    assert response.status_code == 200
    assert refusal in response.context["form"].errors["password1"]
    assert not User.objects.exists()
    assert mail.outbox == []


@pytest.mark.parametrize(
    ("username", "email", "first_name", "password"),
    [
        ("tomas", "tomas@acme.example", "Tomas", demo.TOMAS_PASSWORD),
        (demo.OPERATOR_USERNAME, "maya@acme.example", "Maya", demo.OPERATOR_PASSWORD),
        ("nina", "nina@example.com", "", PASSWORD),
    ],
)
def test_the_passwords_the_demo_and_the_suite_give_pass_the_validators(
    username: str, email: str, first_name: str, password: str
) -> None:
    """The demo prints these logins, and the suite signs up with :data:`PASSWORD`: a password change
    or a sign-up with them must not be refused."""
    validate_password(password, User(username=username, email=email, first_name=first_name))


def test_a_link_opened_in_another_browser_confirms_the_address_and_that_one_logs_in(
    client: Client, db: None
) -> None:
    """The confirmation page promises a login only in the browser that signed up: allauth logs in on
    confirmation only where the sign-up's session is."""
    client.post(reverse("account_signup"), SIGNUP)
    [sent] = mail.outbox
    phone = Client()

    confirmed = phone.post(link_in(sent.body, "/confirm-email/"), follow=True)

    assert confirmed.redirect_chain[-1] == (reverse("login"), 302)
    assert "You have confirmed nina@example.org." in confirmed.content.decode()
    assert EmailAddress.objects.get(email="nina@example.org").verified
    assert phone.get(reverse("home"))["Location"].startswith(reverse("login"))
    logged_in = phone.post(reverse("login"), {"login": "nina", "password": PASSWORD})
    assert (logged_in.status_code, logged_in["Location"]) == (302, reverse("home"))


def test_an_unconfirmed_account_cannot_log_in(client: Client, db: None) -> None:
    client.post(reverse("account_signup"), SIGNUP)
    again = Client()

    response = again.post(reverse("login"), {"login": "nina", "password": PASSWORD}, follow=True)

    assert response.redirect_chain == [(reverse("account_email_verification_sent"), 302)]
    assert again.get(reverse("home"))["Location"].startswith(reverse("login"))
    # allauth sends a new link at a login at most every 3 minutes: the first one is still on its way.
    assert len(mail.outbox) == 1


def test_one_logs_in_by_e_mail_address_too(client: Client, db: None) -> None:
    make_user("nina")

    response = client.post(reverse("login"), {"login": "Nina@Example.com", "password": PASSWORD})

    assert (response.status_code, response["Location"]) == (302, reverse("home"))


def test_failed_logins_are_throttled(client: Client, db: None) -> None:
    make_user("nina")
    wrong = {"login": "nina", "password": "not-the-password"}
    for _ in range(5):
        refused = client.post(reverse("login"), wrong)
        assert "The username and/or password you specified are not correct." in refused.content.decode()

    throttled = client.post(reverse("login"), {"login": "nina", "password": PASSWORD})

    assert throttled.status_code == 200
    assert "Too many failed login attempts. Try again later." in throttled.content.decode()


def test_a_password_is_reset_through_an_e_mailed_link(client: Client, db: None) -> None:
    make_user("nina")

    done = client.post(reverse("account_reset_password"), {"email": "nina@example.com"}, follow=True)

    assert "<h1>Reset your password</h1>" in done.content.decode()
    [sent] = mail.outbox
    reset = client.get(link_in(sent.body, "/password/reset/key/"), follow=True)
    form_url = reset.redirect_chain[-1][0]
    changed = client.post(form_url, {"password1": "a-new-long-secret", "password2": "a-new-long-secret"})
    assert changed.status_code == 302
    assert User.objects.get(username="nina").check_password("a-new-long-secret")


def test_a_closed_sign_up_says_so_and_creates_nothing(client: Client, db: None, settings: Any) -> None:
    make_user("ona")
    settings.ACCOUNT_SIGNUP_ENABLED = False

    response = client.post(reverse("account_signup"), SIGNUP)

    assert "<h1>Sign-up is closed</h1>" in response.content.decode()
    assert not User.objects.filter(username="nina").exists()


def test_a_closed_sign_up_lets_the_first_account_of_a_deployment_in(
    client: Client, db: None, settings: Any
) -> None:
    settings.ACCOUNT_SIGNUP_ENABLED = False

    client.post(reverse("account_signup"), SIGNUP)

    assert User.objects.filter(username="nina").exists()


def test_the_login_page_is_the_dashboards_with_labelled_fields(client: Client, db: None) -> None:
    page = client.get(reverse("login")).content.decode()

    assert "<title>Log in · Parley</title>" in page
    assert '<a class="skip-link" href="#main">Skip to content</a>' in page
    assert '<label for="id_login">Username or e-mail:</label>' in page
    assert "placeholder" not in page
    assert f'href="{reverse("account_signup")}">No account yet? Sign up</a>' in page


@pytest.mark.parametrize(
    ("backend", "note"),
    [
        (
            "django.core.mail.backends.filebased.EmailBackend",
            "This Parley does not send e-mail: it writes each message to a file in /srv/mail. "
            "Open the newest file there.",
        ),
        (
            "django.core.mail.backends.console.EmailBackend",
            "This Parley does not send e-mail: it prints each message on its console, where it runs.",
        ),
        ("django.core.mail.backends.smtp.EmailBackend", ""),
    ],
)
def test_the_note_says_where_local_mail_goes(settings: Any, backend: str, note: str) -> None:
    settings.EMAIL_BACKEND, settings.EMAIL_FILE_PATH = backend, "/srv/mail"

    assert local_mail_note() == note


def test_accounts_made_before_sign_up_keep_logging_in(db: None) -> None:
    """The data migration records each existing account's address as verified, once per address."""
    migration = importlib.import_module("parley.migrations.0009_existing_accounts_addresses")
    old = User.objects.create_user("old", email="Old@Example.com", password=PASSWORD)
    twin = User.objects.create_user("twin", email="old@example.com", password=PASSWORD)
    bare = User.objects.create_user("bare", password=PASSWORD)
    signed_up = make_user("nina")

    migration.verify_existing(apps, None)

    rows = EmailAddress.objects.order_by("user__username").values_list("user__username", "email", "verified")
    assert list(rows) == [("nina", "nina@example.com", True), ("old", "old@example.com", True)]
    assert not EmailAddress.objects.filter(user__in=[twin, bare]).exists()
    assert signed_up.emailaddress_set.count() == 1
    assert Client().post(reverse("login"), {"login": old.username, "password": PASSWORD}).status_code == 302
