from typing import Any

from django import forms
from django.contrib import admin
from django.db import models

from agents.config_forms import CheckedModelForm
from agents.models import Agent, Intent, ModelEndpoint, Run, Tool
from agents.services import host_names


class IntentInline(admin.TabularInline):
    model = Intent
    extra = 1
    fields = ("statement", "external_id")


class AgentForm(CheckedModelForm):
    """The admin's agent form, refusing tools of another tenant."""

    evaluation_url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text=Agent._meta.get_field("evaluation_url").help_text,
    )

    class Meta:
        model = Agent
        exclude: list[str] = []

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant, chosen = cleaned.get("tenant"), cleaned.get("tools")
        if tenant is not None and chosen is not None and chosen.exclude(tenant=tenant).exists():
            self.add_error("tools", "Choose tools of the agent's own tenant.")
        return cleaned


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = ("slug", "name", "tenant", "model", "principal")
    list_filter = ("tenant",)
    search_fields = ("slug", "name", "party_id")
    inlines = [IntentInline]
    filter_horizontal = ("tools",)
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    readonly_fields = ("host_name_token", "host_name_verified_at")

    def save_model(self, request, obj, form, change):  # type: ignore[no-untyped-def]
        # A new host name needs a new proof here too, as on the operator's pages.
        host_names.claim(obj, previous=form.initial.get("host_name"))
        super().save_model(request, obj, form, change)

    def save_formset(self, request, form, formset, change):  # type: ignore[no-untyped-def]
        # Intents belong to the agent's tenant; the inline does not ask for it.
        for intent in formset.save(commit=False):
            intent.tenant_id = form.instance.tenant_id
            intent.save()
        formset.save_m2m()
        for deleted in formset.deleted_objects:
            deleted.delete()


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("pk", "agent", "status", "step_count", "created_at")
    list_filter = ("status", "tenant")
    readonly_fields = [f.name for f in Run._meta.fields]


class ToolForm(CheckedModelForm):
    class Meta:
        model = Tool
        exclude: list[str] = []


class ModelEndpointForm(CheckedModelForm):
    class Meta:
        model = ModelEndpoint
        exclude: list[str] = []


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    form = ToolForm
    list_display = ("name", "kind", "tenant", "suspends", "requires_approval")
    list_filter = ("tenant", "kind")
    search_fields = ("name", "description")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    form = ModelEndpointForm
    list_display = ("name", "upstream_model", "base_url", "tenant")
    list_filter = ("tenant",)
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
