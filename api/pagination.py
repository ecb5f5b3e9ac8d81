"""Cursor pagination for every list: stable under inserts, opaque ``cursor`` links."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.views import APIView

BAD_CURSOR = "This cursor is not valid; start again from the first page."


class NewestFirst(CursorPagination):
    """Pages of ``page_size`` rows (default 50, at most 200), newest first; ``next`` and
    ``previous`` are full URLs carrying an opaque ``cursor``. A cursor we did not make is a 400
    at ``cursor``.

    DRF's cursor records the ``created_at`` of the page's edge and an offset among rows that
    share it, so paging forward is exact; a ``previous`` link from among rows created in the same
    microsecond (bulk writes only) may miss them.
    """

    ordering = ("-created_at", "-pk")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def paginate_queryset(
        self, queryset: QuerySet[Any], request: Request, view: APIView | None = None
    ) -> list[Any] | None:
        try:
            return super().paginate_queryset(queryset, request, view)
        except (NotFound, DjangoValidationError) as exc:  # DRF's "Invalid cursor", or a forged position
            raise ValidationError({self.cursor_query_param: [BAD_CURSOR]}) from exc
