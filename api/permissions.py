"""Scopes: each API operation needs one scope of the key (``read``, ``write`` or ``admin``)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from api.authentication import Host
from parley.models import ApiKey


def required_scope(request: Request, view: Any) -> str:
    """The scope ``request`` needs on ``view``: ``read`` for safe methods, else the view's
    ``write_scope`` (``write`` unless the view says ``admin``). A view may name a scope per
    action in ``action_scopes`` (``{"answer": "write"}``)."""
    action_scopes: dict[str, str] = getattr(view, "action_scopes", {})
    action = getattr(view, "action", None)
    if action in action_scopes:
        return action_scopes[action]
    if request.method in SAFE_METHODS:
        return ApiKey.Scope.READ
    return str(getattr(view, "write_scope", ApiKey.Scope.WRITE))


class HasScope(BasePermission):
    """Allows a request whose API key holds :func:`required_scope`; scopes do not imply each other."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.user, Host):
            return False
        scope = required_scope(request, view)
        if scope not in request.user.key.scopes:
            self.message = f"This API key lacks the '{scope}' scope this operation needs."
            return False
        return True
