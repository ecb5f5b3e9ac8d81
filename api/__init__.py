"""The host REST API (``/api/v1/``): everything the dashboard does, for a host's backend.

Requests authenticate with a tenant API key (:mod:`api.authentication`); the
key's tenant is the request's tenant, resolved once in :class:`api.base.TenantScoped`.
Views are thin: they validate with a serializer, call one service, serialise.
"""
