from django.contrib import admin
from django.http import HttpRequest

from parley.models import ApiKey, Invitation, Membership, Tenant, WebhookDelivery, WebhookEndpoint


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Read-only: owners invite on the members page (operators with ``manage.py invite``), which shows
    the link once; only its hash is kept."""

    list_display = (
        "email",
        "tenant",
        "role",
        "invited_by",
        "created_at",
        "expires_at",
        "accepted_at",
        "revoked_at",
    )
    list_filter = ("tenant", "role")
    list_select_related = ("tenant", "invited_by")
    search_fields = ("email",)
    exclude = ("token_hash",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Invitation | None = None) -> bool:
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Read-only: keys are created and revoked by the tenant's owners on its API keys page."""

    list_display = ("prefix", "name", "tenant", "scopes", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    search_fields = ("prefix", "name")
    exclude = ("secret_hash",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Read-only: endpoints are made through the host API, which checks their URL; the secret is
    never shown."""

    list_display = ("url", "tenant", "events", "active", "created_at")
    list_filter = ("tenant", "active")
    search_fields = ("url", "description")
    exclude = ("secret",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WebhookEndpoint | None = None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """Read-only: what was sent, for looking into a host's complaint."""

    list_display = (
        "event_type",
        "endpoint",
        "tenant",
        "status",
        "attempts",
        "last_status_code",
        "created_at",
    )
    list_filter = ("tenant", "status", "event_type")
    list_select_related = ("endpoint", "tenant")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WebhookDelivery | None = None) -> bool:
        return False
