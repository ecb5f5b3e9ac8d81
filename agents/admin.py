from django.contrib import admin
from django.db import models

from agents.models import Agent, Intent, Run


class IntentInline(admin.TabularInline):
    model = Intent
    extra = 1
    fields = ("statement", "external_id")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "tenant", "model", "principal")
    list_filter = ("tenant",)
    search_fields = ("slug", "name", "party_id")
    inlines = [IntentInline]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

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
