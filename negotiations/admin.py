from django.contrib import admin

from negotiations.models import Negotiation, Turn


class TurnInline(admin.TabularInline):
    model = Turn
    extra = 0
    fields = ("seq", "side", "action", "message", "terms", "offer_id", "accepts_offer_id")
    readonly_fields = fields
    can_delete = False


@admin.register(Negotiation)
class NegotiationAdmin(admin.ModelAdmin):
    list_display = ("pk", "agent", "direction", "counterparty_name", "status", "turn_count")
    list_filter = ("direction", "status", "tenant")
    readonly_fields = [f.name for f in Negotiation._meta.fields]
    inlines = [TurnInline]
