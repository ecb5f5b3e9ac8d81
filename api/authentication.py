"""Tenant API keys on the REST API: ``Authorization: Bearer <prefix>.<secret>``."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from parley.models import ApiKey, Tenant
from parley.services import api_key_authenticate

SCHEME = "Bearer"


@dataclass(frozen=True)
class Host:
    """Who calls with an API key: the tenant's own backend, not a member. ``request.user`` on the API.

    Services take ``user=None`` for the host acting through its API; what a
    host did is recorded as "the host".
    """

    key: ApiKey

    is_authenticated = True
    is_anonymous = False

    @property
    def tenant(self) -> Tenant:
        return self.key.tenant

    def __str__(self) -> str:
        return f"API key {self.key.name} ({self.key.prefix})"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Authenticates ``Authorization: Bearer <prefix>.<secret>`` (see :mod:`parley.keys`).

    A request without the header is anonymous (and then refused 401 by the
    permission check); a header that is present but not a live key is refused
    401 at once, never treated as anonymous. Revoked keys are refused.
    """

    def authenticate(self, request: Request) -> tuple[Host, ApiKey] | None:
        header = authentication.get_authorization_header(request).split()
        if not header:
            return None
        if header[0].decode("latin-1").lower() != SCHEME.lower() or len(header) != 2:
            raise exceptions.AuthenticationFailed(f"Send the API key as 'Authorization: {SCHEME} <key>'.")
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("The API key is not valid.") from exc
        key = api_key_authenticate(raw)
        if key is None:
            raise exceptions.AuthenticationFailed("The API key is not valid or was revoked.")
        return Host(key), key

    def authenticate_header(self, request: Request) -> str:
        return f'{SCHEME} realm="api"'
