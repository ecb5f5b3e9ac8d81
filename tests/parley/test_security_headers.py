"""Every page carries the content security policy (django-csp, ``CONTENT_SECURITY_POLICY``) and the
security headers of Django's middleware; the API's documentation page alone widens the policy, for
Redoc's styles and search worker."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.http import HttpResponseBase
from django.test import Client
from django.urls import reverse

from tests.conftest import run_python

# The dashboard's policy: the page's own origin for everything, no inline script or style, no plugins,
# never framed, forms posted here only; data: images (the empty favicon) and the live socket.
POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'", settings.LIVE_SOCKET_ORIGIN],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
# Django's SecurityMiddleware and XFrameOptionsMiddleware, at their defaults.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def policy(response: HttpResponseBase) -> dict[str, list[str]]:
    """The response's ``Content-Security-Policy``, directive name to its values (CSP Level 3 §2.2.1:
    directives split on ";", each a name and space-separated values)."""
    directives = {}
    for directive in response["Content-Security-Policy"].split(";"):
        name, *values = directive.split()
        directives[name] = values
    return directives


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/t/acme/", 200),  # the inbox
        ("/t/acme/?fragment=1", 200),  # its live regions, as live.js fetches them
        ("/t/acme/runs/", 200),
        ("/organisations/", 200),
        ("/admin/", 200),
        ("/t/acme/no-such-page/", 404),
        ("/api/v1/tenant", 401),
    ],
)
def test_every_page_carries_the_policy_and_the_security_headers(
    client: Client, principal: AbstractUser, path: str, status: int
) -> None:
    principal.is_staff = principal.is_superuser = True
    principal.save()
    client.force_login(principal)

    response = client.get(path)

    assert response.status_code == status
    assert policy(response) == POLICY
    assert {name: response.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS


def test_a_visitor_gets_the_policy_and_the_security_headers_too(db: None) -> None:
    """The login page; and answers that are no page of ours: a redirect to it, Django's CSRF refusal."""
    client = Client(enforce_csrf_checks=True)
    login = client.get(reverse("login"))
    sent_away = client.get("/t/acme/")
    refused = client.post(reverse("login"), {"login": "someone", "password": "secret"})

    assert (login.status_code, sent_away.status_code, refused.status_code) == (200, 302, 403)
    for response in (login, sent_away, refused):
        assert policy(response) == POLICY
        assert {name: response.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS


def test_the_api_documentation_page_allows_redocs_inline_styles_and_search_worker_only(
    client: Client, db: None
) -> None:
    response = client.get("/api/v1/docs")

    assert response.status_code == 200
    assert policy(response) == {
        **POLICY,
        "style-src": ["'self'", "'unsafe-inline'"],
        "worker-src": ["blob:"],
    }
    page = response.content.decode()
    assert "fonts.googleapis.com" not in page  # nothing from other origins: Redoc's fonts are the browser's
    assert "<title>Parley host API</title>" in page


@pytest.mark.parametrize(
    ("public_base_url", "origin"),
    [
        ("https://parley.example.com", "wss://parley.example.com"),
        ("http://127.0.0.1:8000", "ws://127.0.0.1:8000"),
    ],
)
def test_the_live_sockets_origin_is_public_base_urls(public_base_url: str, origin: str) -> None:
    """Named beside 'self' for browsers whose 'self' does not cover WebSockets (Safari before 16)."""
    read = run_python(
        "-c",
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.CONTENT_SECURITY_POLICY['DIRECTIVES']['connect-src'])",
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "parley.settings.base",
            "PUBLIC_BASE_URL": public_base_url,
        },
        check=True,
    )

    assert read.stdout.strip() == str(["'self'", origin])
