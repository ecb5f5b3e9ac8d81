from django.contrib import admin

from negotiations.models import CounterpartyCredential, Negotiation, Turn


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


@admin.register(CounterpartyCredential)
class CounterpartyCredentialAdmin(admin.ModelAdmin):
    """What the tenant's agents present to counterparties; the secret is taken, never listed."""

    list_display = ("url_prefix", "agent", "tenant", "scheme", "header", "updated_at")
    list_filter = ("tenant", "scheme")
    search_fields = ("url_prefix",)
    fields = ("tenant", "agent", "url_prefix", "scheme", "header", "secret")
    list_select_related = ("agent", "tenant")
