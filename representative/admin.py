"""Admin for the public face: grounding documents (managed by operators) and intake requests (read only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from representative.models import GroundingDocument, IntakeRequest


@admin.register(GroundingDocument)
class GroundingDocumentAdmin(admin.ModelAdmin):
    """Public text an agent's representative answers visitors from. The tenant is the agent's."""

    list_display = ("title", "agent", "tenant", "updated_at")
    list_filter = ("tenant",)
    search_fields = ("title", "agent__slug", "agent__name")
    fields = ("agent", "title", "text")
    list_select_related = ("agent", "tenant")

    def save_model(self, request: HttpRequest, obj: GroundingDocument, form: Any, change: bool) -> None:
        # A document belongs to its agent's tenant; the form does not ask for it.
        obj.tenant_id = obj.agent.tenant_id
        super().save_model(request, obj, form, change)


@admin.register(IntakeRequest)
class IntakeRequestAdmin(admin.ModelAdmin):
    """Requests visitors left: as taken in, never added or edited here."""

    list_display = ("created_at", "agent", "summary", "recipient", "notified_at", "notify_error")
    list_filter = ("tenant",)
    search_fields = ("summary",)
    list_select_related = ("agent", "recipient")
    readonly_fields = (
        "tenant",
        "agent",
        "caller",
        "summary",
        "details",
        "recipient",
        "notified_at",
        "notify_error",
        "created_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: IntakeRequest | None = None) -> bool:
        return False
