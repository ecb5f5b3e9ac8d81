"""Forms of the operator's pages for an agent's public face: grounding documents and inbound keys."""

from __future__ import annotations

from typing import Any

from django import forms

from a2a_gateway.models import GroundingDocument, InboundKey
from agents.models import Agent

NAME_LENGTH = InboundKey._meta.get_field("name").max_length


class GroundingDocumentForm(forms.ModelForm):
    """A grounding document of ``agent``: public text its representative may answer visitors from.

    The row is the agent's, in the agent's tenant, whatever was posted.
    """

    class Meta:
        model = GroundingDocument
        fields = ["title", "text"]
        help_texts = {"text": "Public text only: visitors may be told anything in it."}
        widgets = {"text": forms.Textarea(attrs={"rows": 12})}
        error_messages = {
            "title": {"required": "Title: give the document one.", "max_length": "Title: too long."},
            "text": {"required": "Text: the document is empty."},
        }

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.instance.agent = agent
        self.instance.tenant_id = agent.tenant_id


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
