"""Dashboard forms of tenancy: they parse what an owner typed; :mod:`parley.services` judges it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from parley.models import ApiKey, Membership, WebhookDelivery, WebhookEndpoint, WebhookEventType


class TenantCreateForm(forms.Form):
    """A new organisation: its name and the address (slug) in its URLs; blank makes one from the name."""

    name = forms.CharField(
        max_length=200,
        strip=True,
        help_text="As your members will see it, e.g. “Acme Robotics”.",
        error_messages={"required": "Give the organisation a name."},
    )
    slug = forms.CharField(
        label="Address",
        max_length=63,
        required=False,
        strip=True,
        help_text="In every URL of the organisation and its agents (/t/acme/, /a2a/acme/…): lower-case "
        "letters, digits and hyphens. Leave it blank to make one from the name.",
    )


class InvitationForm(forms.Form):
    """Whom to invite, by e-mail address, and in which role."""

    email = forms.EmailField(
        label="E-mail",
        max_length=254,
        error_messages={"required": "Give the e-mail address to invite."},
        widget=forms.EmailInput(attrs={"autocomplete": "off"}),
    )
    role = forms.ChoiceField(
        choices=Membership.Role.choices,
        error_messages={"required": "Choose a role.", "invalid_choice": "Choose a role from the list."},
    )


class HandOverForm(forms.Form):
    """The own address of the person a placeholder member stands for."""

    email = forms.EmailField(
        label="Their e-mail",
        max_length=254,
        error_messages={"required": "Give the person's own e-mail address."},
        widget=forms.EmailInput(attrs={"autocomplete": "off"}),
    )


class MemberRoleForm(forms.Form):
    """A member's new role."""

    role = forms.ChoiceField(
        choices=Membership.Role.choices,
        error_messages={"required": "Choose a role.", "invalid_choice": "Choose a role from the list."},
    )


class ApiKeyForm(forms.Form):
    """A new API key: what uses it, and what it may do."""

    name = forms.CharField(max_length=200, strip=True, help_text="What will use it, e.g. “billing backend”.")
    scopes = forms.MultipleChoiceField(
        choices=ApiKey.Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one scope."},
    )


class WebhookEndpointForm(forms.Form):
    """A new webhook endpoint. The URL is taken as typed (no scheme is assumed):
    :func:`parley.webhooks.endpoints.webhook_endpoint_create` judges it, address policy included."""

    url = forms.CharField(
        label="URL",
        max_length=2000,
        strip=True,
        help_text="Where deliveries are POSTed: https, on a host with public addresses only.",
        error_messages={"required": "Give the URL that receives the webhooks."},
    )
    events = forms.MultipleChoiceField(
        choices=WebhookEventType.choices,
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "required": "Choose at least one event type.",
            "invalid_choice": "Unknown event type: %(value)s.",
        },
    )
    description = forms.CharField(
        max_length=500, required=False, strip=True, help_text="What receives them, e.g. “CRM sync”."
    )


class WebhookActiveForm(forms.Form):
    """Whether an endpoint is to be sent deliveries: ``cleaned_data["active"]`` is a bool."""

    active = forms.TypedChoiceField(
        choices=[("true", "active"), ("false", "inactive")],
        coerce=lambda value: value == "true",
        error_messages={"required": "Say whether the endpoint is to be active."},
    )


class WebhookEndpointChoiceField(forms.ModelChoiceField):
    """An endpoint of the tenant, by id: a malformed id is the same ``invalid_choice`` error as an
    unknown one."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except forms.ValidationError as exc:
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice") from exc


class WebhookDeliveryFilterForm(forms.Form):
    """GET filters of the deliveries list, both optional: a status, and an endpoint of the tenant
    (another tenant's id is not one of the choices)."""

    status = forms.ChoiceField(
        choices=[("", "Any status"), *WebhookDelivery.Status.choices],
        required=False,
        error_messages={"invalid_choice": "Choose a status from the list."},
    )
    endpoint = WebhookEndpointChoiceField(
        queryset=WebhookEndpoint.objects.none(),
        required=False,
        empty_label="Any endpoint",
        error_messages={"invalid_choice": "Choose one of this tenant's endpoints."},
    )

    def __init__(self, *args: Any, endpoints: QuerySet[WebhookEndpoint], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["endpoint"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = endpoints

    def query(self) -> dict[str, str]:
        """The valid filters that are set, as query parameters (for the pager's links)."""
        data = self.cleaned_data
        query = {"status": data.get("status") or ""}
        if data.get("endpoint") is not None:
            query["endpoint"] = str(data["endpoint"].pk)
        return {name: value for name, value in query.items() if value}
