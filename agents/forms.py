"""Dashboard forms of the agent loop: they parse what the party typed; the services judge it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any, cast
from zoneinfo import ZoneInfo

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms.models import ModelChoiceIterator
from django.forms.renderers import BaseRenderer
from django.forms.utils import flatatt
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agents.models import Agent, Intent, Run
from agents.services import runs
from parley import strict_json
from parley.models import Tenant

# Longest task, answer or reason the dashboard takes, in characters.
MAX_TEXT = 4000
# How many of the newest intents a select offers (and the one chosen, if older).
INTENTS_SHOWN = 100
# What the system-message preview will show: years a datetime can be moved between timezones in.
PREVIEW_YEARS = (1900, 2999)


class AnswerForm(forms.Form):
    """The party's answer to a question."""

    answer = forms.CharField(
        max_length=MAX_TEXT,
        strip=True,
        error_messages={"required": "The answer is empty."},
    )


class ApprovalForm(forms.Form):
    """The party's decision on a tool call waiting for approval, with an optional reason."""

    decision = forms.ChoiceField(
        choices=[("approve", "Approve"), ("reject", "Reject")],
        error_messages={
            "required": "Choose Approve or Reject.",
            "invalid_choice": "Choose Approve or Reject.",
        },
    )
    reason = forms.CharField(
        required=False,
        max_length=MAX_TEXT,
        strip=True,
        error_messages={"max_length": "The reason is longer than %(limit_value)d characters."},
    )


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


class AgentChoiceForm(forms.Form):
    """Which agent to start work with: one of ``agents`` (those the member may act for)."""

    agent = AgentChoiceField(
        queryset=Agent.objects.none(),
        empty_label=None,
        error_messages={
            "required": "Agent: choose one of the agents you may start.",
            "invalid_choice": "Agent: choose one of the agents you may start.",
        },
    )

    def __init__(self, *args: Any, agents: QuerySet[Agent], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agents = agents
        agent_field = self.fields["agent"]
        assert isinstance(agent_field, AgentChoiceField)
        agent_field.queryset = agents


class InAgentTimezone(forms.Form):
    """A form whose date-times without an offset are read in ``agent``'s timezone, not the server's."""

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent = agent

    def full_clean(self) -> None:
        # DateTimeField makes naive input aware in the current timezone; the party thinks in the agent's.
        with timezone.override(ZoneInfo(self.agent.timezone)):
            super().full_clean()


def agent_intents(agent: Agent) -> QuerySet[Intent]:
    """The intents a form offers for ``agent``, newest first."""
    return Intent.objects.for_tenant(agent.tenant_id).filter(agent=agent).order_by("-created_at")


class NewestChoices(ModelChoiceIterator):
    """A select's choices of the newest :data:`INTENTS_SHOWN` rows of the field's query set (ordered newest
    first), and the one chosen (:meth:`IntentChoiceField.keep`) if it is older: however many an agent
    has, the page renders a bounded select. Validation still accepts any row of the query set."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self.field.empty_label is not None:
            yield ("", self.field.empty_label)
        # The columns the labels read, alone: a select of a hundred needs no agent's whole row.
        labelled = self.queryset.only(*cast(IntentChoiceField, self.field).label_fields)
        shown = list(labelled[:INTENTS_SHOWN])
        kept = getattr(self.field, "kept", None)
        if kept is not None and all(str(row.pk) != kept for row in shown):
            shown += list(labelled.filter(pk=kept))
        for row in shown:
            yield self.choice(row)

    def __len__(self) -> int:
        return (self.field.empty_label is not None) + min(self.queryset.count(), INTENTS_SHOWN)


class ManyOptionsSelect(forms.Select):
    """A select, without option groups, whose options are written in one pass: Django's renders a
    template for each option, and a select of intents offers a hundred. The same HTML as Django's."""

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: BaseRenderer | None = None
    ) -> SafeString:
        widget = self.get_context(name, value, attrs)["widget"]
        options = format_html_join(
            "",
            '\n  <option value="{}"{}>{}</option>',
            (
                (str(option["value"]), flatatt(option["attrs"]), option["label"])
                for _group, group_options, _index in widget["optgroups"]
                for option in group_options
            ),
        )
        return format_html(
            '<select name="{}"{}>{}\n</select>', widget["name"], flatatt(widget["attrs"]), options
        )


class IntentChoiceField(forms.ModelChoiceField):
    """An intent by its statement, cut to fit a select, which offers the newest :data:`INTENTS_SHOWN`
    and the one chosen (:class:`NewestChoices`)."""

    iterator = NewestChoices
    widget = ManyOptionsSelect
    kept: str | None = None
    # What :meth:`label_from_instance` reads of a row (:meth:`~django.db.models.QuerySet.only`'s names).
    label_fields: tuple[str, ...] = ("statement",)

    def keep(self, value: Any) -> None:
        """Offer the intent ``value`` (its id as given, or "" / None for none) even if it is older
        than the newest shown; a malformed or unknown id offers nothing more."""
        try:
            self.kept = str(uuid.UUID(str(value))) if value else None
        except ValueError:
            self.kept = None

    def label_from_instance(self, obj: Intent) -> str:
        statement = " ".join(obj.statement.split())
        return statement if len(statement) <= 80 else f"{statement[:79]}…"


class FilterIntentChoiceField(OwnChoice, IntentChoiceField):
    """An intent by its agent and statement: a list's filter offers every agent's intents in one select."""

    label_fields = ("statement", "agent__name")

    def label_from_instance(self, obj: Intent) -> str:
        return f"{obj.agent.name}: {super().label_from_instance(obj)}"


class AgentIntentFilterForm(forms.Form):
    """GET filters of a list by agent and intent, both optional; subclasses add their own.

    The agent and intent are chosen among ``agents`` (those the member sees, of
    ``tenant``) and theirs: any other id (another tenant's or party's, a deleted
    one, not a UUID) is an error at its field, never a match.
    """

    agent = AgentChoiceField(
        queryset=Agent.objects.none(),
        required=False,
        empty_label="Any agent",
        error_messages={"invalid_choice": "Choose one of this tenant's agents."},
    )
    intent = FilterIntentChoiceField(
        queryset=Intent.objects.none(),
        required=False,
        empty_label="Any intent",
        error_messages={"invalid_choice": "Choose one of this tenant's intents."},
    )

    def __init__(self, *args: Any, tenant: Tenant, agents: QuerySet[Agent], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent_field = self.fields["agent"]
        intent_field = self.fields["intent"]
        assert isinstance(agent_field, forms.ModelChoiceField)
        assert isinstance(intent_field, forms.ModelChoiceField)
        agent_field.queryset = agents.order_by("name", "pk")
        intent_field.queryset = (
            Intent.objects.for_tenant(tenant)
            .filter(agent__in=agents)
            .select_related("agent")
            .order_by("-created_at", "pk")
        )
        assert isinstance(intent_field, IntentChoiceField)
        intent_field.keep(self["intent"].value())

    def query(self) -> dict[str, str]:
        """The filters as given, empty ones left out: for links that keep them (pages, live source)."""
        return {name: str(self.data[name]) for name in self.fields if self.data.get(name)}


class RunFilterForm(AgentIntentFilterForm):
    """The runs list's GET filters: agent, intent and ``status`` (a :class:`Run.Status` value), all
    optional. ``cleaned_data`` has exactly the keyword arguments of :func:`agents.selectors.runs_list`
    other than ``membership``."""

    status = forms.ChoiceField(
        choices=[("", "Any status"), *Run.Status.choices],
        required=False,
        error_messages={"invalid_choice": "Choose a status from the list."},
    )


class RunStartForm(InAgentTimezone):
    """Start a run: an existing intent or a new one, the task, and optional limits.

    ``cleaned_data`` holds ``intent`` (an :class:`Intent` or None), ``statement``
    (the new intent's text when no intent is chosen), ``task``,
    ``output_schema`` (a dict or None), ``max_tokens``, ``max_cost`` and
    ``deadline`` (aware, read in the agent's timezone). Whether the limits are
    usable (a valid JSON Schema, a deadline to come) is the service's call.
    """

    intent = IntentChoiceField(
        queryset=Intent.objects.none(),
        required=False,
        empty_label="A new intent (write it below)",
        error_messages={"invalid_choice": "Intent: choose one of this agent's intents."},
    )
    statement = forms.CharField(
        label="New intent",
        required=False,
        max_length=MAX_TEXT,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the agent works on, when you start a new thread.",
        error_messages={"max_length": "New intent: at most %(limit_value)d characters."},
    )
    task = forms.CharField(
        max_length=MAX_TEXT,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="The message your agent starts from.",
        error_messages={
            "required": "Task: say what the agent should do.",
            "max_length": "Task: at most %(limit_value)d characters.",
        },
    )
    output_schema = forms.CharField(
        label="Output JSON Schema",
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text='Optional. The final answer must be JSON meeting it, e.g. {"type": "object"}.',
    )
    max_tokens = forms.IntegerField(
        label="Max tokens",
        required=False,
        min_value=1,
        max_value=runs.MAX_TOKEN_BUDGET,
        help_text="Optional. Input and output tokens together.",
        error_messages={
            "invalid": "Max tokens: enter a whole number.",
            "min_value": "Max tokens: at least %(limit_value)s.",
            "max_value": "Max tokens: at most %(limit_value)s.",
        },
    )
    max_cost = forms.DecimalField(
        label="Max cost",
        required=False,
        max_digits=14,
        decimal_places=6,
        help_text="Optional. In the model endpoint's currency.",
        error_messages={
            "invalid": "Max cost: enter a number.",
            "max_digits": "Max cost: at most %(max)s digits.",
            "max_decimal_places": "Max cost: at most %(max)s decimal places.",
            "max_whole_digits": "Max cost: at most %(max)s digits before the point.",
        },
    )
    deadline = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        error_messages={"invalid": "Deadline: enter a date and time."},
    )

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, agent=agent, **kwargs)
        intent_field = self.fields["intent"]
        assert isinstance(intent_field, IntentChoiceField)
        intent_field.queryset = agent_intents(agent)
        intent_field.keep(self["intent"].value())
        # Django's field template marks help text safe: escape what the operator typed.
        self.fields["deadline"].help_text = format_html(
            "Optional. In the agent's timezone, {}.", agent.timezone
        )

    def clean_output_schema(self) -> dict[str, Any] | None:
        text: str = self.cleaned_data["output_schema"]
        if not text:
            return None
        try:
            schema = strict_json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"Output JSON Schema: not valid JSON ({exc.msg}, line {exc.lineno})."
            ) from exc
        except ValueError as exc:
            raise forms.ValidationError(f"Output JSON Schema: not valid JSON ({exc}).") from exc
        if not isinstance(schema, dict):
            raise forms.ValidationError("Output JSON Schema: must be a JSON object.")
        return schema

    def clean_max_cost(self) -> Decimal | None:
        cost: Decimal | None = self.cleaned_data["max_cost"]
        if cost is not None and cost <= 0:
            raise forms.ValidationError("Max cost: must be more than 0.")
        return cost

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "intent" in self.errors or "statement" in self.errors:
            return cleaned
        if cleaned.get("intent") is None and not cleaned.get("statement"):
            self.add_error("statement", "New intent: choose an intent or write a new one.")
        elif cleaned.get("intent") is not None and cleaned.get("statement"):
            self.add_error("statement", "New intent: leave it empty when you choose an existing intent.")
        return cleaned


class SystemMessagePreviewForm(InAgentTimezone):
    """Which intent and moment to build the system message for (a GET form; every field optional)."""

    intent = IntentChoiceField(
        queryset=Intent.objects.none(),
        required=False,
        empty_label=None,
        error_messages={"invalid_choice": "Intent: choose one of this agent's intents."},
    )
    statement = forms.CharField(
        label="Intent",
        required=False,
        max_length=MAX_TEXT,
        strip=True,
        help_text="The agent has no intent yet: the preview uses this text.",
    )
    at = forms.DateTimeField(
        label="At",
        required=False,
        help_text="ISO 8601, e.g. 2025-06-02T09:30; without an offset, in the agent's timezone. Empty: now.",
        error_messages={"invalid": "At: enter an ISO 8601 date and time, e.g. 2025-06-02T09:30."},
    )

    def clean_at(self) -> datetime | None:
        at: datetime | None = self.cleaned_data["at"]
        # Dates at the ends of the calendar cannot be moved between timezones.
        if at is not None and not PREVIEW_YEARS[0] <= at.year <= PREVIEW_YEARS[1]:
            raise forms.ValidationError(
                f"At: pick a time between the years {PREVIEW_YEARS[0]} and {PREVIEW_YEARS[1]}."
            )
        return at

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, agent=agent, **kwargs)
        intent_field = self.fields["intent"]
        assert isinstance(intent_field, IntentChoiceField)
        intent_field.queryset = agent_intents(agent)
        intent_field.keep(self["intent"].value())
