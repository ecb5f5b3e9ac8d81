"""Dashboard forms of negotiations: the board's filters."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils.text import capfirst

from agents.forms import IntentChoiceField
from agents.models import Agent, Intent
from negotiations.models import Negotiation

# Longest counterparty name or URL part the board searches for, in characters.
MAX_COUNTERPARTY = 200


class OwnChoice(forms.ModelChoiceField):
    """A row of the tenant, by id: a malformed id is the same ``invalid_choice`` error as an unknown one."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except ValidationError as exc:
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice") from exc


class AgentChoiceField(OwnChoice):
    """An agent by its name."""

    def label_from_instance(self, obj: Agent) -> str:
        return obj.name


class BoardIntentChoiceField(OwnChoice, IntentChoiceField):
    """An intent by its agent and statement: the board lists every agent's intents in one select."""

    def label_from_instance(self, obj: Intent) -> str:
        return f"{obj.agent.name}: {super().label_from_instance(obj)}"


class BoardFilterForm(forms.Form):
    """The board's GET filters, every one optional; an empty form shows every negotiation.

    The agent and intent are chosen among ``agents`` (those the member sees, of one
    tenant) and theirs: any other id (another tenant's or party's, a deleted one,
    not a UUID) is an error at its field, never a match.
    ``cleaned_data`` has exactly the keyword arguments of
    :func:`negotiations.selectors.board` other than ``tenant``.
    """

    agent = AgentChoiceField(
        queryset=Agent.objects.none(),
        required=False,
        empty_label="Any agent",
        error_messages={"invalid_choice": "Choose one of this tenant's agents."},
    )
    intent = BoardIntentChoiceField(
        queryset=Intent.objects.none(),
        required=False,
        empty_label="Any intent",
        error_messages={"invalid_choice": "Choose one of this tenant's intents."},
    )
    status = forms.ChoiceField(
        choices=[
            ("", "Any status"),
            *((value, capfirst(label)) for value, label in Negotiation.Status.choices),
        ],
        required=False,
        error_messages={"invalid_choice": "Choose a status from the list."},
    )
    direction = forms.ChoiceField(
        choices=[("", "Both directions"), *Negotiation.Direction.choices],
        required=False,
        error_messages={"invalid_choice": "Choose a direction from the list."},
    )
    counterparty = forms.CharField(
        required=False,
        max_length=MAX_COUNTERPARTY,
        strip=True,
        help_text="Part of the counterparty's name or URL.",
        error_messages={"max_length": "Search for at most %(limit_value)d characters."},
    )

    def __init__(self, *args: Any, agents: QuerySet[Agent], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent_field = self.fields["agent"]
        intent_field = self.fields["intent"]
        assert isinstance(agent_field, forms.ModelChoiceField)
        assert isinstance(intent_field, forms.ModelChoiceField)
        agent_field.queryset = agents.order_by("name", "pk")
        intent_field.queryset = (
            Intent.objects.filter(agent__in=agents).select_related("agent").order_by("-created_at", "pk")
        )

    def query(self) -> dict[str, str]:
        """The filters as given, empty ones left out: for links that keep them (pages, live source)."""
        return {name: str(self.data[name]) for name in self.fields if self.data.get(name)}
