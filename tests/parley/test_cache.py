"""The production cache (parley.cache): django-allauth's login counts in Redis, and a Redis that is
gone costs only the counting, never the login page."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD, free_port, make_user

WRONG = "The username and/or password you specified are not correct."


def use_cache(settings: Any, location: str) -> None:
    """The production settings' cache at ``location``, under a key prefix of this test's own."""
    settings.CACHES = {
        "default": {
            "BACKEND": "parley.cache.TolerantRedisCache",
            "LOCATION": location,
            "KEY_PREFIX": uuid.uuid4().hex,
        }
    }


def test_logging_in_works_while_redis_cannot_be_reached(client: Client, db: None, settings: Any) -> None:
    """Nothing listens where the cache is: a wrong password is told so (not a 500), the right one
    logs in."""
    use_cache(settings, f"redis://127.0.0.1:{free_port()}/0")
    make_user("nina")

    refused = client.post(reverse("login"), {"login": "nina", "password": "not-the-password"})
    assert refused.status_code == 200
    assert WRONG in refused.content.decode()

    logged_in = client.post(reverse("login"), {"login": "nina", "password": PASSWORD})
    assert (logged_in.status_code, logged_in["Location"]) == (302, reverse("home"))


@pytest.mark.redis
def test_failed_logins_are_counted_in_redis_when_it_answers(client: Client, db: None, settings: Any) -> None:
    use_cache(settings, django_settings.REDIS_URL)
    make_user("nina")
    for _ in range(5):
        refused = client.post(reverse("login"), {"login": "nina", "password": "not-the-password"})
        assert WRONG in refused.content.decode()

    throttled = client.post(reverse("login"), {"login": "nina", "password": PASSWORD})

    assert "Too many failed login attempts. Try again later." in throttled.content.decode()
