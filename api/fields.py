"""Serializer fields and filter querysets that read only the API key's tenant's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Model, QuerySet
from rest_framework import serializers


class TenantRowField(serializers.PrimaryKeyRelatedField):
    """A row of the API key's tenant by its id (``queryset`` names the model and serves the schema):
    another tenant's id is refused as no such row, a 400 at this field, never that tenant's row."""

    def __init__(self, *, queryset: QuerySet[Any], **kwargs: Any) -> None:
        meta = queryset.model._meta
        if meta.pk is not None and meta.pk.get_internal_type() == "UUIDField":
            kwargs["pk_field"] = serializers.UUIDField()  # a malformed id is a 400, not Django's error
        missing = f"This tenant has no {meta.verbose_name} with the id {{pk_value}}."
        error_messages = {"does_not_exist": missing, **kwargs.pop("error_messages", {})}
        super().__init__(queryset=queryset, error_messages=error_messages, **kwargs)

    def get_queryset(self) -> QuerySet[Any]:
        assert self.queryset is not None
        return self.queryset.model.objects.for_tenant(self.context["view"].tenant)


def of_tenant(model: type[Model]) -> Callable[[Any], QuerySet[Any]]:
    """A django-filter ``queryset`` callable: the request's tenant's rows of ``model``, so a filter
    naming another tenant's row is a 400 at that filter."""

    def rows(request: Any) -> QuerySet[Any]:
        return model.objects.for_tenant(request.user.tenant)  # type: ignore[attr-defined]

    return rows
