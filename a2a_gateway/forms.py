"""Forms of the operator's pages for an agent's public face: its inbound keys and its Agent
Exchange profile."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from a2a_gateway.models import InboundKey
from agents.config_forms import read_json
from exchange.models import ExchangeProfile

NAME_LENGTH = InboundKey._meta.get_field("name").max_length
ISSUER_LENGTH = ExchangeProfile._meta.get_field("issuer").max_length
AUDIENCE_LENGTH = ExchangeProfile._meta.get_field("audience").max_length
SCOPE_LENGTH = ExchangeProfile._meta.get_field("scope").max_length
DEFAULT_SCOPE = ExchangeProfile._meta.get_field("scope").default


class InboundKeyForm(forms.Form):
    """Who a new inbound key is for (``name``); the key itself is made by the service."""

    name = forms.CharField(
        label="Held by",
        max_length=NAME_LENGTH,
        strip=True,
        help_text="Who gets the key, e.g. the counterparty's name. It is shown once, after you issue it.",
        error_messages={
            "required": "Held by: say who gets the key.",
            "max_length": "Held by: at most %(limit_value)d characters.",
        },
    )


class ExchangeProfileForm(forms.Form):
    """An agent's Agent Exchange profile (:class:`exchange.models.ExchangeProfile`), prefilled from
    ``profile`` (None: the defaults). ``jwks`` is read as strict JSON
    (:func:`parley.strict_json.loads`); whether it is a usable key set is
    :func:`exchange.services.profile_save`'s to say."""

    mode = forms.ChoiceField(
        label="Mode",
        choices=[
            (ExchangeProfile.Mode.OPTIONAL, "Optional: the agent negotiates too"),
            (ExchangeProfile.Mode.REQUIRED, "Required: the agent takes Agent Exchange messages only"),
        ],
        initial=ExchangeProfile.Mode.OPTIONAL,
        help_text="Its card lists the extension as required, or not; required refuses every other message.",
        error_messages={"required": "Mode: choose one.", "invalid_choice": "Mode: choose one of the two."},
    )
    issuer = forms.CharField(
        label="Token issuer",
        max_length=ISSUER_LENGTH,
        strip=True,
        help_text="The iss of the delegation tokens it accepts: the party's authorisation server.",
        error_messages={
            "required": "Token issuer: give the iss tokens must have.",
            "max_length": "Token issuer: at most %(limit_value)d characters.",
        },
    )
    audience = forms.CharField(
        label="Audience",
        max_length=AUDIENCE_LENGTH,
        strip=True,
        required=False,
        help_text="The aud tokens must have. Leave it blank for the agent's A2A URL.",
        error_messages={"max_length": "Audience: at most %(limit_value)d characters."},
    )
    scope = forms.CharField(
        label="Scope",
        max_length=SCOPE_LENGTH,
        strip=True,
        initial=DEFAULT_SCOPE,
        help_text="A scope every delegation token must carry.",
        error_messages={
            "required": "Scope: give the scope tokens must carry.",
            "max_length": "Scope: at most %(limit_value)d characters.",
        },
    )
    jwks = forms.CharField(
        label="JSON Web Key Set",
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "json"}),
        help_text='The public keys that sign the tokens and mandates it accepts, as JSON: {"keys": [...]}.',
        error_messages={"required": "JSON Web Key Set: paste the key set."},
    )

    def __init__(self, *args: Any, profile: ExchangeProfile | None = None, **kwargs: Any) -> None:
        if profile is not None:
            kwargs.setdefault(
                "initial",
                {
                    "mode": profile.mode,
                    "issuer": profile.issuer,
                    "audience": profile.audience,
                    "scope": profile.scope,
                    "jwks": json.dumps(profile.jwks, indent=2, ensure_ascii=False),
                },
            )
        super().__init__(*args, **kwargs)

    def clean_jwks(self) -> Any:
        return read_json(self.cleaned_data["jwks"], label="JSON Web Key Set")
