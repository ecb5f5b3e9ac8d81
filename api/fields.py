"""Serializer fields and filter querysets that read only the API key's tenant's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers

from parley.models import TenantOwnedModel


class TenantRowField(serializers.PrimaryKeyRelatedField):
    """A row of ``model`` of the API key's tenant by its id: another tenant's id is refused as no
    such row, a 400 at this field, never that tenant's row."""

    def __init__(self, *, model: type[TenantOwnedModel], **kwargs: Any) -> None:
        self.model = model
        meta = model._meta
        if meta.pk is not None and meta.pk.get_internal_type() == "UUIDField":
            kwargs["pk_field"] = serializers.UUIDField()  # a malformed id is a 400, not Django's error
        missing = f"This tenant has no {meta.verbose_name} with the id {{pk_value}}."
        error_messages = {"does_not_exist": missing, **kwargs.pop("error_messages", {})}
        # The queryset only names the model (for the schema); rows come from get_queryset.
        super().__init__(queryset=model.objects.none(), error_messages=error_messages, **kwargs)

    def get_queryset(self) -> QuerySet[Any]:
        return self.model.objects.for_tenant(self.context["view"].tenant)


def of_tenant(model: type[TenantOwnedModel]) -> Callable[[Any], QuerySet[Any]]:
    """A django-filter ``queryset`` callable: the request's tenant's rows of ``model``, so a filter
    naming another tenant's row is a 400 at that filter."""

    def rows(request: Any) -> QuerySet[Any]:
        return model.objects.for_tenant(request.user.tenant)

    return rows
