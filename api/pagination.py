"""Cursor pagination for every list: stable under inserts, opaque ``cursor`` links."""

from rest_framework.pagination import CursorPagination


class NewestFirst(CursorPagination):
    """Pages of ``page_size`` rows (default 50, at most 200), newest first; ``next`` and
    ``previous`` are full URLs carrying an opaque ``cursor``. The primary key breaks ties between
    rows created in the same microsecond."""

    ordering = ("-created_at", "-pk")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
