"""Forms of the operator's configuration pages: the agents, tools and model endpoints of one tenant.

They parse what the operator typed into the models' shapes (JSON, ordered model names, the
actions' rows) and offer only the tenant's own rows. Whether a configuration is usable is judged
by the configuration service (:func:`agents.configuration.full_clean`, with the checks other apps
add through :func:`agents.configuration.register_agent_check`), which these forms run where
``ModelForm`` runs the model's checks, so these pages, the admin and the host API refuse the same
things in the same words, each at its field. The pages then save through that service too
(:meth:`TenantModelForm.values`).

The form's own error messages start with the field's label ("Term guards: …"); what the rules
refuse is shown at its field in their own words, the words the host API answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast
from zoneinfo import available_timezones

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import Model, Q, QuerySet
from django.forms.fields import InvalidJSONInput
from django.forms.models import construct_instance
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agents import configuration
from agents.guardrails import Action, Match, Stage
from agents.models import (
    AGENT_SETTINGS,
    OFFLINE,
    Agent,
    ModelEndpoint,
    Tool,
    agents_naming,
    entry_of,
)
from parley import keys, strict_json
from parley.models import Tenant, TenantOwnedModel
from parley.roles import ANSWER

# The A2A task states a terminal action may leave the task in (A2A 0.3 names; the terminal ones).
END_STATES = ("completed", "rejected", "canceled", "failed")
# Fallback selects shown at most (more when the agent already names more).
FALLBACK_SLOTS = 4
# Blank rows offered below a list's rows (actions, term guards, guardrails): fill one in to add one.
EXTRA_ROWS = 2
# Rows a list setting may have on the page.
MAX_ROWS = 50
# A2A action names travel in moves, whose ``action`` is at most 64 characters (negotiations.wire).
ACTION_NAME_LENGTH = 64


def tenant_members(tenant: Tenant, *, roles: Iterable[str] | None = None, keep: Any = None) -> QuerySet[Any]:
    """The users who are members of ``tenant``, by username: in any role, or in one of ``roles``
    (the member whose pk is ``keep`` in any role)."""
    users = get_user_model()
    member = Q(memberships__tenant=tenant)
    if roles is not None:
        # One filter() call: the role is that of the membership in this tenant.
        member &= Q(memberships__role__in=list(roles)) | Q(pk=keep)
    return users.objects.filter(member).order_by(users.USERNAME_FIELD)


def read_json(text: str, *, label: str) -> Any:
    """The JSON value typed as ``text`` (:func:`parley.strict_json.loads`).

    Raises ``forms.ValidationError`` with the field's ``label``, the parser's reason and where it
    broke: "Term guards: not valid JSON (Expecting ',' delimiter, line 2 column 5).", or "…: not
    valid JSON (NaN is not a JSON number)." for JSON Postgres cannot store.
    """
    try:
        return strict_json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            "%(label)s: not valid JSON (%(reason)s, line %(line)d column %(column)d).",
            code="invalid",
            params={"label": label, "reason": exc.msg, "line": exc.lineno, "column": exc.colno},
        ) from exc
    except ValueError as exc:
        raise forms.ValidationError(
            "%(label)s: not valid JSON (%(reason)s).",
            code="invalid",
            params={"label": label, "reason": str(exc)},
        ) from exc


class PrettyJSONField(forms.JSONField):
    """JSON in a textarea, shown indented; empty input is ``empty()`` (``[]`` or ``{}``), never null.

    Text that is not JSON is refused with the label, the parser's reason and where
    (:func:`read_json`): "Card fields: not valid JSON (Expecting ',' delimiter, line 2 column
    5)."; so is JSON that Postgres cannot store. What the JSON must look like is the model's to say.
    """

    def __init__(self, *, empty: Callable[[], Any], rows: int = 6, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "widget", forms.Textarea(attrs={"rows": rows, "spellcheck": "false", "class": "json"})
        )
        super().__init__(**kwargs)
        self.empty = empty

    def to_python(self, value: Any) -> Any:
        if self.disabled or not isinstance(value, str):
            return value
        if not value.strip():
            return self.empty()
        return read_json(value, label=str(self.label))

    def bound_data(self, data: Any, initial: Any) -> Any:
        # Shown again as typed when refused; Django's own reading raises on deep nesting.
        if self.disabled or not isinstance(data, str):
            return super().bound_data(data, initial)
        try:
            return strict_json.loads(data)
        except ValueError:
            return InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        # A new row's form has no initial value: show the empty one, which saves as it stands.
        return json.dumps(self.empty() if value is None else value, indent=2, ensure_ascii=False)


class MemberChoiceField(forms.ModelChoiceField):
    """A member of the tenant, by username and role; with ``roles``, one in those roles, or the
    member ``keep`` (the saved choice, so that the form shows it and the model's check names it)."""

    def __init__(
        self, *, tenant: Tenant, roles: Iterable[str] | None = None, keep: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(queryset=tenant_members(tenant, roles=roles, keep=keep), required=False, **kwargs)
        self.roles = dict(tenant.memberships.values_list("user_id", "role"))

    def label_from_instance(self, obj: Model) -> str:
        assert isinstance(obj, AbstractBaseUser)
        return f"{obj.get_username()} ({self.roles.get(obj.pk, 'member')})"


class OrderedSelects(forms.MultiWidget):
    """One labelled select per position ("Fallback 1", "Fallback 2", …): an ordered list of choices.

    Rendered here rather than by a template: Django's default form renderer does not read the
    project's template directories.
    """

    def __init__(self, *, size: int, choices: list[tuple[str, str]], item_label: str) -> None:
        super().__init__([forms.Select(choices=choices) for _ in range(size)])
        self.item_label = item_label

    def decompress(self, value: Any) -> list[Any]:
        values = list(value or [])
        return values + [""] * (len(self.widgets) - len(values))

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        values = value if isinstance(value, list) else self.decompress(value)
        attrs = dict(attrs or {})
        base_id = attrs.pop("id", f"id_{name}")
        rows = []
        for index, widget in enumerate(self.widgets):
            select_id = f"{base_id}_{index}"
            current = values[index] if index < len(values) else ""
            select = widget.render(f"{name}_{index}", current, {**attrs, "id": select_id}, renderer)
            rows.append((select_id, self.item_label, index + 1, select))
        items = format_html_join(
            "", '<div class="ordered-choice"><label for="{}">{} {}</label>{}</div>', rows
        )
        return format_html('<div class="ordered-choices" id="{}">{}</div>', base_id, items)


class OrderedChoicesField(forms.MultiValueField):
    """An ordered list of distinct choices, blanks skipped: ``["house-model", "offline"]``."""

    def __init__(
        self, *, label: str, item_label: str, choices: list[tuple[str, str]], size: int, **kwargs: Any
    ):
        options = [("", "—"), *choices]
        fields = [
            forms.ChoiceField(
                choices=options,
                required=False,
                error_messages={"invalid_choice": f"{label}: %(value)s is not one of the choices."},
            )
            for _ in range(size)
        ]
        super().__init__(
            fields,
            label=label,
            required=False,
            require_all_fields=False,
            widget=OrderedSelects(size=size, choices=options, item_label=item_label),
            **kwargs,
        )
        self.choice_label = label

    def compress(self, data_list: list[Any]) -> list[str]:
        chosen = [value for value in data_list if value]
        if len(set(chosen)) != len(chosen):
            raise forms.ValidationError(f"{self.choice_label}: name each one once.", code="duplicate")
        return chosen


def model_choices(tenant: Tenant, named: Iterable[str]) -> list[tuple[str, str]]:
    """``offline`` and the tenant's model endpoints by name; a name in ``named`` that has no endpoint
    stays offered, marked, so that the form shows what is saved and the model's check names it."""
    endpoints = ModelEndpoint.objects.for_tenant(tenant).exclude(name=OFFLINE).order_by("name")
    choices = [(OFFLINE, "offline (built in, no network)")]
    choices += [(e.name, f"{e.name} ({e.upstream_model})") for e in endpoints]
    known = {value for value, _ in choices}
    choices += [(n, f"{n} (no model endpoint has this name)") for n in dict.fromkeys(named) if n not in known]
    return choices


class CheckedModelForm(forms.ModelForm):
    """A ModelForm whose row is judged by the configuration's rules
    (:func:`agents.configuration.full_clean`), which it shows in the rules' own words.

    ``ModelForm`` replaces every message of the model whose code the form field also knows
    ("invalid", "required") with the field's stock text: "guardrails: must be a list." would read
    "Enter a valid JSON.", and "Enter an http:// or https:// URL." "Enter a valid URL.". The
    rules' words are the ones the host API answers. (The operator's pages and the admin use it.)
    """

    def _post_clean(self) -> None:
        # ModelForm's, but for the judge: the configuration's full_clean where it calls the model's.
        exclude = self._get_validation_exclusions()  # type: ignore[attr-defined]
        try:
            self.instance = construct_instance(self, self.instance, self._meta.fields, self._meta.exclude)
        except ValidationError as exc:
            self._update_errors(exc)
        try:
            configuration.full_clean(self.instance, exclude=exclude, validate_unique=False)
        except ValidationError as exc:
            self._update_errors(exc)
        if self._validate_unique:  # type: ignore[attr-defined]
            self.validate_unique()

    def _update_errors(self, errors: ValidationError) -> None:
        self.add_error(None, errors)


class TenantModelForm(CheckedModelForm):
    """A ModelForm for a row of ``tenant``: the row is the tenant's whatever was posted, and the
    value of ``unique_per_tenant`` (a field) that another row of the tenant has is refused there."""

    unique_per_tenant: ClassVar[str] = ""

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.instance.tenant = tenant

    def _update_errors(self, errors: ValidationError) -> None:
        # ModelForm's hook for the model's errors. The model checked the saved value of a field this
        # form already refused, so what it says of that field is not about what was sent.
        if hasattr(errors, "error_dict"):
            kept = {
                f: e for f, e in errors.error_dict.items() if f == NON_FIELD_ERRORS or f not in self.errors
            }
            if not kept:
                return
            errors = ValidationError(kept)
        super()._update_errors(errors)

    def values(self) -> dict[str, Any]:
        """What the configuration service is to write (``agents.configuration``'s ``values``): each
        model field the form edits, as validating set it on :attr:`instance`. Call after
        ``is_valid()``."""
        concrete = {field.name for field in self._meta.model._meta.concrete_fields}
        return {name: getattr(self.instance, name) for name in self._meta.fields or () if name in concrete}

    def refused(self, error: ValidationError) -> None:
        """Show the configuration service's refusal to write :meth:`values` at the fields it names,
        as the form's own check shows them (a change that came in between made them refusable)."""
        self._update_errors(error)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        field = self.unique_per_tenant
        value = cleaned.get(field)
        if field and value:
            model = self._meta.model
            assert issubclass(model, TenantOwnedModel)
            rows = model.objects.for_tenant(self.tenant).filter(**{field: value})
            if rows.exclude(pk=self.instance.pk).exists():
                label = self.fields[field].label
                self.add_error(field, f"{label}: this tenant already has one named {value!r}.")
        return cleaned


# --- Agents: the settings edited row by row -----------------------------------------------------------


class RowForm(forms.Form):
    """One entry of a list setting, edited as a row: :meth:`entry` is the entry as the agent stores it.

    A row with nothing typed in its :attr:`content` fields adds nothing (a blank new row, or a row
    cleared to remove it).
    """

    content: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def initial_for(cls, entry: object) -> dict[str, object]:
        """The row's initial data for a stored ``entry`` (one that is no object shows as a blank row)."""
        return dict(entry) if isinstance(entry, dict) else {}

    def is_blank(self) -> bool:
        """Whether nothing was typed in the row; call after ``is_valid()``."""
        return not any(self.cleaned_data.get(name) for name in self.content)

    def entry(self) -> dict[str, object]:
        """The entry the row stands for; call after ``is_valid()`` on a row that is not blank."""
        raise NotImplementedError

    def show(self, field: str, problem: str, message: str) -> None:
        """Show a check's ``problem`` with the entry at the row's ``field`` ("Pattern: does not
        compile …"); the whole ``message`` above the row when it has no such field."""
        if field in self.fields:
            self.add_error(field, f"{self.fields[field].label}: {problem}")
        else:
            self.add_error(None, message)


class BaseRowFormSet(forms.BaseFormSet):
    """A list setting edited row by row, in order; rows marked for deletion and blank rows left out.

    ``noun`` names one row ("Term guard"), ``help`` says what the rows are. Checks of the whole list
    that name an entry (:func:`agents.models.entry_error`) are shown at its row by :meth:`place`.
    """

    noun: ClassVar[str] = ""
    help: ClassVar[str] = ""
    form: type[RowForm]

    def kept(self) -> list[RowForm]:
        """The rows that make the list, in order; call after ``is_valid()``."""
        return [
            form
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE") and not form.is_blank()
        ]

    def entries(self) -> list[dict[str, object]]:
        """The list as the agent stores it; call after ``is_valid()``."""
        return [form.entry() for form in self.kept()]

    def place(self, errors: list[ValidationError]) -> list[ValidationError]:
        """Show each of ``errors`` that is about an entry at the entry's row; return the others."""
        rows = self.kept()
        unplaced = []
        for error in errors:
            found = entry_of(error)
            if found is None or not 0 <= found[0] < len(rows):
                unplaced.append(error)
                continue
            index, field, problem = found
            rows[index].show(field, problem, error.messages[0])
        return unplaced


def row_formset(form: type[RowForm], formset: type[BaseRowFormSet], *, extra: int) -> type[BaseRowFormSet]:
    """The formset class of ``form`` rows: ``extra`` blank rows to add with, a Delete box on each,
    at most :data:`MAX_ROWS`."""
    made = forms.formset_factory(
        form, formset=formset, extra=extra, can_delete=True, max_num=MAX_ROWS, validate_max=True
    )
    return cast(type[BaseRowFormSet], made)


class ActionForm(RowForm):
    """One allowed action: ``{name, description, terminal, state}`` (see ``agents.models.DEFAULT_ACTIONS``).

    A terminal action ends the negotiation and leaves the A2A task in its ``state``; an open one has
    no state.
    """

    content = ("name", "description", "terminal", "state")

    name = forms.CharField(
        max_length=ACTION_NAME_LENGTH,
        strip=True,
        error_messages={
            "required": "Name: every action needs one.",
            "max_length": "Name: at most %(limit_value)d characters.",
        },
    )
    description = forms.CharField(required=False, max_length=500, strip=True)
    terminal = forms.BooleanField(required=False, label="Ends the negotiation")
    state = forms.ChoiceField(
        label="End state",
        required=False,
        choices=[("", "— (open action)"), *((s, s) for s in END_STATES)],
        error_messages={"invalid_choice": "End state: %(value)s is not a state a task ends in."},
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        terminal, state = cleaned.get("terminal"), cleaned.get("state")
        if terminal and not state:
            self.add_error("state", f"End state: a terminal action ends the task {', '.join(END_STATES)}.")
        elif state and not terminal:
            self.add_error("state", "End state: only an action that ends the negotiation has one.")
        return cleaned

    def entry(self) -> dict[str, object]:
        terminal = bool(self.cleaned_data["terminal"])
        return {
            "name": self.cleaned_data["name"],
            "description": self.cleaned_data["description"],
            "terminal": terminal,
            "state": self.cleaned_data["state"] if terminal else "",
        }


class BaseActionFormSet(BaseRowFormSet):
    """The agent's allowed actions, in order."""

    noun = "Action"
    help = (
        "The moves the agent may make, in order. An open action keeps the negotiation going; an action "
        "that ends it leaves the task completed (a deal) or rejected, canceled or failed (no deal)."
    )

    def clean(self) -> None:
        if any(self.errors):
            return
        names = [form.cleaned_data["name"] for form in self.kept()]
        if not names:
            raise forms.ValidationError("Allowed actions: the agent needs at least one action.")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise forms.ValidationError(f"Allowed actions: {', '.join(repeated)} named more than once.")


ActionFormSet = row_formset(ActionForm, BaseActionFormSet, extra=EXTRA_ROWS)


def guard_value_text(value: object) -> str:
    """A term guard's value as its row shows it, which :func:`read_guard_value` reads back as it is:
    text as it stands, anything else (a number, true, null) as JSON; text that would read as
    something else is quoted ("1200"); a list of such values separated by commas, or as JSON."""
    if isinstance(value, list) and value:
        items = [_scalar_text(item) for item in value]
        if all("," not in item and not item.startswith("[") for item in items):
            return ", ".join(items)
    return _scalar_text(value)


def _scalar_text(value: object) -> str:
    if isinstance(value, str) and value and _read_scalar(value) == value and not value.startswith("["):
        return value
    return json.dumps(value, ensure_ascii=False)


def read_guard_value(text: str, *, many: bool, label: str) -> object:
    """The value typed in a term guard's row: JSON when it reads as JSON (a number, "quoted text",
    true, false, null), else the text itself; a [JSON list] as such; with ``many`` (the ``in``
    operator), values separated by commas, each read so. Raises ``forms.ValidationError`` for
    text that opens a list and is not JSON."""
    text = text.strip()
    if text.startswith("["):
        return read_json(text, label=label)
    if many:
        return [_read_scalar(part) for part in text.split(",") if part.strip()]
    return _read_scalar(text)


def _read_scalar(text: str) -> object:
    text = text.strip()
    try:
        return strict_json.loads(text)
    except ValueError:
        return text


# The operators a term guard may use (negotiations.negotiator.GuardOp), in the words of a limit.
GUARD_OPS = [("<=", "<= (at most)"), (">=", ">= (at least)"), ("==", "== (exactly)"), ("in", "in (one of)")]


class TermGuardForm(RowForm):
    """One term guard: ``{term, op, value, currency?, aspiration?}``, what
    :func:`negotiations.negotiator.parse_guards` reads; whether it is one is that check's to say.

    The value is typed as :func:`read_guard_value` reads it; a currency code is taken in
    capitals; an empty currency or opening value is left out.
    """

    content = ("term", "value", "currency", "aspiration")

    term = forms.CharField(label="Term", required=False, strip=True)
    op = forms.CharField(
        label="Operator", initial="<=", strip=True, widget=forms.Select(choices=GUARD_OPS), required=False
    )
    value = forms.CharField(label="Value", required=False, strip=True)
    currency = forms.CharField(label="Currency", required=False, strip=True)
    aspiration = forms.CharField(label="Opening value", required=False, strip=True)

    @classmethod
    def initial_for(cls, guard: object) -> dict[str, object]:
        """The row's initial data for a stored ``guard``."""
        if not isinstance(guard, dict):
            return {}
        aspiration = guard.get("aspiration")
        return {
            "term": guard.get("term") or "",
            "op": guard.get("op") or "",
            "value": guard_value_text(guard.get("value")) if "value" in guard else "",
            "currency": guard.get("currency") or "",
            "aspiration": "" if aspiration is None else json.dumps(aspiration),
        }

    def clean_currency(self) -> str:
        # Codes are written in capitals (ISO 4217): "eur" is EUR, as for model endpoints.
        currency: str = self.cleaned_data["currency"]
        return currency.upper() if len(currency) == 3 and currency.isalpha() else currency

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors or self.is_blank():
            return cleaned
        if not cleaned["value"]:
            self.add_error("value", "Value: give the limit.")
            return cleaned
        try:
            many = cleaned["op"] == "in"
            cleaned["parsed"] = read_guard_value(cleaned["value"], many=many, label="Value")
        except ValidationError as exc:
            self.add_error("value", exc)
        return cleaned

    def entry(self) -> dict[str, object]:
        data = self.cleaned_data
        guard: dict[str, object] = {"term": data["term"], "op": data["op"], "value": data["parsed"]}
        if data["currency"]:
            guard["currency"] = data["currency"]
        if data["aspiration"]:
            guard["aspiration"] = _read_scalar(data["aspiration"])
        return guard


class BaseTermGuardFormSet(BaseRowFormSet):
    """The agent's term guards, in order."""

    noun = "Term guard"
    help = (
        "The party's hard limits, checked on every outgoing move from any model: a move that breaks "
        "one never reaches the counterparty (an intent may add its own). The value is a number, a "
        "date (2030-01-31, today, tomorrow, next friday) or text; for in, several separated by "
        'commas. Quote text that reads as a number: "1200". A currency makes a move naming the term '
        "name it too; the opening value is where the offline model opens. Both are optional."
    )


TermGuardFormSet = row_formset(TermGuardForm, BaseTermGuardFormSet, extra=EXTRA_ROWS)


def _choices_or_none(choices: list[tuple[str, str]]) -> forms.Select:
    return forms.Select(choices=[("", "—"), *choices])


class GuardrailForm(RowForm):
    """One guardrail: ``{name, stage, action, match, pattern?}``, what :func:`agents.guardrails.validate`
    reads; whether it is one is that check's to say. A choice left at "—" is left out."""

    content = ("name", "stage", "action", "match", "pattern")

    name = forms.CharField(label="Name", required=False, strip=True)
    stage = forms.CharField(label="Stage", required=False, widget=_choices_or_none(Stage.choices))
    action = forms.CharField(label="Action", required=False, widget=_choices_or_none(Action.choices))
    match = forms.CharField(label="Match", required=False, widget=_choices_or_none(Match.choices))
    pattern = forms.CharField(
        label="Pattern",
        required=False,
        strip=False,
        widget=forms.TextInput(attrs={"spellcheck": "false", "class": "code"}),
    )

    @classmethod
    def initial_for(cls, guardrail: object) -> dict[str, object]:
        """The row's initial data for a stored ``guardrail``."""
        if not isinstance(guardrail, dict):
            return {}
        return {name: guardrail.get(name) or "" for name in cls.content}

    def entry(self) -> dict[str, object]:
        return {name: self.cleaned_data[name] for name in self.content if self.cleaned_data[name]}


class BaseGuardrailFormSet(BaseRowFormSet):
    """The agent's guardrails, applied in order."""

    noun = "Guardrail"
    help = (
        "Checks where text crosses the platform's edge, applied in order: an input guardrail sees text "
        "entering the model, an output guardrail text leaving the platform. Block refuses the whole "
        "text; redact replaces each match. A regular expression matches its pattern (Python re "
        "syntax); the other matches take none."
    )


GuardrailFormSet = row_formset(GuardrailForm, BaseGuardrailFormSet, extra=EXTRA_ROWS)


class RowsWidget(forms.Widget):
    """The widget of a setting filled from its rows (never rendered): the rows are its data.

    Django's ``construct_instance`` keeps a model field's default when the field's widget says it
    was left out of the POST and its value is empty, so without this the last row deleted would
    leave the saved list as it was ("Saved", and the row still there).
    """

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return False


# The agent's list settings edited row by row: setting -> (its group on the page, the rows' prefix,
# their formset).
ROW_SETTINGS: dict[str, tuple[str, str, type[BaseRowFormSet]]] = {
    "term_guards": ("term-guards", "term_guards", TermGuardFormSet),
    "allowed_actions": ("actions", "actions", ActionFormSet),
    "guardrails": ("guardrails", "guardrails", GuardrailFormSet),
}


class AgentForm(TenantModelForm):
    """Create or edit an agent of ``tenant``: every setting an operator configures.

    The allowed actions, term guards and guardrails are edited row by row, each by its formset in
    :attr:`rows` (:data:`ROW_SETTINGS`: the setting, its group and the formset's prefix); the
    checks of the whole list show what they say of an entry at its row. The model and fallbacks
    are chosen among ``offline`` and the tenant's endpoints; the principal and the intake owner
    among the tenant's members; the tools among the tenant's tools. The fields are grouped as
    :attr:`FIELDSETS` lists them (a group of :data:`ROW_SETTINGS` holds its rows).
    """

    unique_per_tenant = "slug"
    FIELDSETS: ClassVar[list[tuple[str, str, list[str]]]] = [
        (
            "identity",
            "Identity",
            ["name", "slug", "party_id", "description", "version", "principal", "timezone", "host_name"],
        ),
        ("instructions", "Instructions", ["system_prompt"]),
        (
            "negotiation",
            "Negotiation",
            ["terms", "strategy", "max_turns", "turn_timeout", "evaluation_url"],
        ),
        ("term-guards", "Term guards", []),
        ("actions", "Allowed actions", []),
        ("model", "Model", ["model", "fallback_models"]),
        ("runs", "Runs", ["max_steps", "history", "history_window", "on_busy"]),
        ("guardrails", "Guardrails", []),
        ("tools", "Tools", ["tools"]),
        (
            "endpoint",
            "Public endpoint",
            [
                "inbound_auth",
                "max_concurrency",
                "max_input_chars",
                "max_turns_per_context",
                "max_contexts",
                "rate_limit",
                "cors_origins",
                "try_again_text",
            ],
        ),
        ("card", "AgentCard", ["publish_tools", "card_skills", "card_fields"]),
        ("intake", "Intake", ["intake_owner"]),
    ]

    # Filled from their rows in clean(); never posted themselves.
    allowed_actions = forms.JSONField(
        label="Allowed actions", disabled=True, required=False, widget=RowsWidget
    )
    term_guards = forms.JSONField(label="Term guards", disabled=True, required=False, widget=RowsWidget)
    guardrails = forms.JSONField(label="Guardrails", disabled=True, required=False, widget=RowsWidget)
    card_skills = PrettyJSONField(
        empty=list, label="Card skills", help_text=Agent.card_skills.field.help_text
    )
    card_fields = PrettyJSONField(
        empty=dict, label="Card fields", help_text=Agent.card_fields.field.help_text
    )
    cors_origins = PrettyJSONField(
        empty=list,
        rows=3,
        label="CORS origins",
        help_text='Browser origins allowed to call, as a JSON list: ["https://app.example.com"]; "*" is any.',
    )
    evaluation_url = forms.URLField(
        label="Evaluation URL",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text=Agent.evaluation_url.field.help_text,
    )

    class Meta:
        model = Agent
        fields = list(AGENT_SETTINGS)
        labels = {
            "party_id": "Party id",
            "system_prompt": "System prompt",
            "terms": "Terms description",
            "max_turns": "Max turns",
            "turn_timeout": "Turn timeout (seconds)",
            "max_steps": "Max steps",
            "history_window": "History window (N)",
            "on_busy": "When a thread is busy",
            "inbound_auth": "Inbound auth",
            "max_turns_per_context": "Max turns per context",
            "rate_limit": "Rate limit (per caller per minute)",
            "try_again_text": "Try-again text",
            "publish_tools": "Publish its tools as card skills",
        }
        help_texts = {
            "terms": 'The structured terms it negotiates over, as "name (type, unit), name", e.g. "amount '
            '(number, EUR per day), currency" (types: number, integer, string, boolean, date). Its card '
            "publishes these names, types and units, and a counterparty's move must give each a value "
            "of its type. Prose declares nothing; empty: prose only.",
        }
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "system_prompt": forms.Textarea(attrs={"rows": 8}),
            "terms": forms.Textarea(attrs={"rows": 2}),
            "try_again_text": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, tenant=tenant, **kwargs)
        agent: Agent = self.instance
        fallbacks = [str(name) for name in agent.fallback_models or []]
        choices = model_choices(tenant, [agent.model, *fallbacks])
        self.fields["model"] = forms.ChoiceField(
            label="Model",
            choices=choices,
            help_text="What its loop calls: the built-in offline model or one of the tenant's endpoints.",
            error_messages={"invalid_choice": "Model: %(value)s is not one of the choices."},
        )
        self.fields["fallback_models"] = OrderedChoicesField(
            label="Fallback models",
            item_label="Fallback",
            choices=choices,
            size=max(len(fallbacks), min(len(choices), FALLBACK_SLOTS)),
            help_text="Tried in this order once the model's attempts are spent.",
        )
        zones = sorted(available_timezones() | {agent.timezone})
        self.fields["timezone"] = forms.ChoiceField(
            label="Timezone",
            choices=[(z, z) for z in zones],
            initial="UTC",
            help_text="Its today and its clock, in the system message.",
        )
        self.fields["principal"] = MemberChoiceField(
            tenant=tenant,
            roles=ANSWER,
            keep=agent.principal_id,
            label="Principal",
            help_text="The member who answers its questions (its party); a viewer cannot.",
            empty_label="Nobody",
            error_messages={
                "invalid_choice": "Principal: choose a member of this tenant who can answer (not a viewer)."
            },
        )
        self.fields["intake_owner"] = MemberChoiceField(
            tenant=tenant,
            label="Intake owner",
            help_text="The member who receives requests visitors leave (the intake tool).",
            empty_label="Nobody",
            error_messages={"invalid_choice": "Intake owner: choose a member of this tenant."},
        )
        self.fields["tools"] = forms.ModelMultipleChoiceField(
            label="Tools it offers",
            queryset=Tool.objects.for_tenant(tenant).order_by("name"),
            required=False,
            widget=forms.CheckboxSelectMultiple,
            help_text="None chosen: the defaults (ask_user, negotiate, answer).",
            error_messages={
                "invalid_choice": "Tools it offers: %(value)s is not a tool of this tenant.",
                "invalid_pk_value": "Tools it offers: %(pk)s is not a tool of this tenant.",
            },
        )
        data = self.data if self.is_bound else None
        self.rows: dict[str, BaseRowFormSet] = {}
        for setting, (_, prefix, formset) in ROW_SETTINGS.items():
            stored = getattr(agent, setting)
            initial = (
                [formset.form.initial_for(entry) for entry in stored] if isinstance(stored, list) else []
            )
            self.rows[setting] = formset(data, prefix=prefix, initial=None if self.is_bound else initial)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for setting, rows in self.rows.items():
            if rows.is_valid():
                cleaned[setting] = rows.entries()
            else:
                self.add_error(setting, self._correct_rows(setting))
        return cleaned

    def _update_errors(self, errors: ValidationError) -> None:
        # What the checks say of one entry of a list edited row by row is shown at its row; the
        # setting itself points there.
        if hasattr(errors, "error_dict"):
            for setting, rows in self.rows.items():
                problems = errors.error_dict.get(setting)
                if not problems or setting in self.errors:
                    continue
                unplaced = rows.place(problems)
                if len(unplaced) < len(problems):
                    unplaced.insert(0, ValidationError(self._correct_rows(setting)))
                errors.error_dict[setting] = unplaced
        super()._update_errors(errors)

    def _correct_rows(self, setting: str) -> str:
        return f"{self.fields[setting].label}: correct the {self.rows[setting].noun.lower()}s marked below."

    def fieldsets(
        self,
    ) -> list[tuple[str, str, list[forms.BoundField], BaseRowFormSet | None, forms.BoundField | None]]:
        """(id, legend, bound fields, the rows it holds and their setting or None twice) per group, in
        page order."""
        settings = {group: setting for setting, (group, _, _) in ROW_SETTINGS.items()}
        groups = []
        for key, legend, names in self.FIELDSETS:
            setting = settings.get(key)
            rows = self.rows[setting] if setting else None
            groups.append(
                (key, legend, [self[name] for name in names], rows, self[setting] if setting else None)
            )
        return groups

    def anchor(self, name: str) -> str:
        """The id on the page where the field ``name`` is shown (the error summary links it): a
        setting edited row by row is its group."""
        row_setting = ROW_SETTINGS.get(name)
        field = self[name]
        return f"group-{row_setting[0]}" if row_setting else field.id_for_label or field.auto_id


# --- Tools ------------------------------------------------------------------------------------------


class ToolForm(TenantModelForm):
    """Create or edit a tool of ``tenant``.

    ``parameters`` must be a JSON Schema (:func:`agents.host_operations.check_schema`). The secret
    is never shown: the ``secret`` box asks for a new one, which :attr:`new_secret` then holds, to
    be shown once. The target agent is one of the tenant's.
    """

    unique_per_tenant = "name"

    parameters = PrettyJSONField(
        empty=dict,
        rows=8,
        label="Parameters (JSON Schema)",
        help_text='The JSON Schema of its arguments, e.g. {"type": "object", "properties": {"order": '
        '{"type": "string"}}, "required": ["order"]}.',
    )
    url = forms.URLField(
        label="URL",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="A host operation's HTTPS endpoint: the call is POSTed there, signed.",
    )
    secret = forms.BooleanField(
        label="Generate a new secret",
        required=False,
        help_text="A host operation signs its calls with it. It is shown once, after saving.",
    )

    class Meta:
        model = Tool
        fields = [
            "name",
            "kind",
            "description",
            "parameters",
            "url",
            "timeout",
            "target_agent",
            "suspends",
            "requires_approval",
        ]
        labels = {"timeout": "Timeout (seconds)", "requires_approval": "Requires the party's approval"}
        help_texts = {
            "suspends": "Hands the arguments to the party and waits for their answer.",
            "target_agent": "For an agent tool: the agent of this tenant it runs.",
        }
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, tenant=tenant, **kwargs)
        self.new_secret = ""
        self.has_secret = bool(self.instance.secret)
        if not self.instance.pk and not self.is_bound:
            self.fields["secret"].initial = True
        target = self.fields["target_agent"]
        assert isinstance(target, forms.ModelChoiceField)
        target.queryset = Agent.objects.for_tenant(tenant).order_by("name")
        target.error_messages["invalid_choice"] = "Target agent: choose an agent of this tenant."

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("secret"):
            # Set before the model's check, which wants a host operation to have one.
            self.new_secret = self.instance.secret = keys.new_secret()
        return cleaned

    def values(self) -> dict[str, Any]:
        """The tool's fields, and the new secret when one was generated (else the saved one stays)."""
        values = super().values()
        if self.new_secret:
            values["secret"] = self.new_secret
        return values


# --- Model endpoints --------------------------------------------------------------------------------


class ModelEndpointForm(TenantModelForm):
    """Create or edit a model endpoint of ``tenant``. The API key is write-only: a blank field keeps
    the saved key, ``clear_api_key`` removes it. A name the tenant's agents use cannot change. The
    currency is taken in capitals ("eur" is EUR); the model's ``clean`` checks the rest."""

    unique_per_tenant = "name"

    api_key = forms.CharField(
        label="API key",
        required=False,
        strip=True,
        max_length=500,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Never shown again. Leave empty to keep the saved key.",
    )
    clear_api_key = forms.BooleanField(label="Remove the saved API key", required=False)
    base_url = forms.URLField(
        label="Base URL",
        max_length=500,
        assume_scheme="https",
        help_text=ModelEndpoint.base_url.field.help_text,
    )

    class Meta:
        model = ModelEndpoint
        fields = [
            "name",
            "base_url",
            "upstream_model",
            "input_price",
            "output_price",
            "currency",
            "timeout",
            "attempts",
        ]
        labels = {
            "upstream_model": "Upstream model",
            "input_price": "Input price (per million tokens)",
            "output_price": "Output price (per million tokens)",
            "timeout": "Timeout (seconds)",
        }
        help_texts = {"currency": "Its ISO 4217 code, e.g. EUR. An agent's models share one currency."}

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, tenant=tenant, **kwargs)
        self.saved_name = self.instance.name
        self.has_api_key = bool(self.instance.api_key)

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if self.instance.pk and name != self.saved_name:
            users = [a.name for a in agents_naming(self.tenant.pk, self.saved_name)]
            if users:
                raise forms.ValidationError(
                    f"Name: {', '.join(users)} use{'s' if len(users) == 1 else ''} the name "
                    f"{self.saved_name!r}; choose another model for them first."
                )
        return name

    def clean_currency(self) -> str:
        # Codes are written in capitals (ISO 4217); "eur" means EUR.
        currency: str = self.cleaned_data["currency"]
        return currency.upper()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("clear_api_key"):
            self.instance.api_key = ""
        elif cleaned.get("api_key"):
            self.instance.api_key = cleaned["api_key"]
        return cleaned

    def values(self) -> dict[str, Any]:
        """The endpoint's fields, and its API key when one was given or removed (else it stays)."""
        values = super().values()
        if self.cleaned_data.get("clear_api_key") or self.cleaned_data.get("api_key"):
            values["api_key"] = self.instance.api_key
        return values
