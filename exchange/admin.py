"""Admin for Agent Exchange: what was prepared and sent, read only; never the requests' secrets."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from exchange.models import OutboundExchange, PreparedExchange


class ReadOnly(admin.ModelAdmin):
    """Rows the exchange itself writes: listed for support, never added or changed here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(PreparedExchange)
class PreparedExchangeAdmin(ReadOnly):
    list_display = ("created_at", "agent", "exchange_id", "caller", "executed_at")
    list_filter = ("tenant",)
    search_fields = ("exchange_id", "reference")
    # The request holds the delegation token and protected values until it is executed.
    exclude = ("request",)


@admin.register(OutboundExchange)
class OutboundExchangeAdmin(ReadOnly):
    list_display = ("created_at", "agent", "exchange_id", "url", "status")
    list_filter = ("tenant", "status")
    search_fields = ("exchange_id", "reference", "url")
    exclude = ("request",)
