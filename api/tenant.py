"""``GET /api/v1/tenant``: which tenant and key a request is made as."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import TenantScoped


class KeySerializer(serializers.Serializer[object]):
    name = serializers.CharField()
    prefix = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())


class TenantSerializer(serializers.Serializer[object]):
    slug = serializers.SlugField()
    name = serializers.CharField()
    key = KeySerializer()


class TenantView(TenantScoped):
    """The tenant the API key belongs to, and the key's name, prefix and scopes."""

    @extend_schema(responses=TenantSerializer, operation_id="tenant_retrieve")
    def get(self, request: Request) -> Response:
        return Response(
            TenantSerializer({"slug": self.tenant.slug, "name": self.tenant.name, "key": self.api_key}).data
        )
