"""Forms of the operator's pages for an agent's representative face: its grounding documents."""

from __future__ import annotations

from typing import Any

from django import forms

from agents.models import Agent
from representative.models import GroundingDocument


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
