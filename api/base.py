"""The base every API view starts from: the key's tenant resolved once, scopes, idempotency, ETags."""

from __future__ import annotations

from typing import Any

from rest_framework import viewsets
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import idempotency
from api.authentication import ApiKeyAuthentication, Host
from api.models import IdempotencyKey
from api.pagination import NewestFirst
from api.permissions import HasScope
from parley.models import ApiKey, Tenant


class TenantScoped(APIView):
    """An API view of one tenant: the API key's.

    ``self.tenant`` and ``self.api_key`` are set before any handler runs;
    querysets start from ``Model.objects.for_tenant(self.tenant)``, so another
    tenant's id is a 404. Reads need the ``read`` scope, writes
    ``write_scope`` (see :mod:`api.permissions`). A POST with an
    ``Idempotency-Key`` is answered once (see :mod:`api.idempotency`). A
    successful GET carries an ``ETag`` (a hash of the body) and answers 304 to
    a matching ``If-None-Match``: Django's ``ConditionalGetMiddleware``.
    """

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [HasScope]
    pagination_class: type[BasePagination] | None = NewestFirst
    write_scope: str = ApiKey.Scope.WRITE
    action_scopes: dict[str, str] = {}
    # Response fields answered once (secrets): an Idempotency-Key replay answers them as null.
    shown_once: tuple[str, ...] = ()

    tenant: Tenant
    api_key: ApiKey
    _idempotency: IdempotencyKey | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        host = request.user
        assert isinstance(host, Host)  # HasScope let nothing else through
        self.api_key, self.tenant = host.key, host.tenant
        self._idempotency = idempotency.begin(request, api_key=self.api_key)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, idempotency.Replay):
            return idempotency.replay(exc.record)
        try:
            return super().handle_exception(exc)
        except Exception:
            # A server error: no response to keep, so a retry with the key runs again.
            if self._idempotency is not None:
                self._idempotency.delete()
                self._idempotency = None
            raise

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        if self._idempotency is not None:
            idempotency.finish(self._idempotency, response, shown_once=self.shown_once)
            self._idempotency = None
        return response


class TenantViewSet(TenantScoped, viewsets.GenericViewSet):
    """A viewset of one tenant's rows (see :class:`TenantScoped`); mix in DRF's list/retrieve/…
    mixins and give ``get_queryset`` from ``for_tenant(self.tenant)``."""
