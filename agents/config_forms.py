"""Forms of the operator's configuration pages: the agents, tools and model endpoints of one tenant.

They parse what the operator typed into the models' shapes (JSON, ordered model names, the
actions' rows) and offer only the tenant's own rows. Whether a configuration is usable is the
models' own ``clean`` — with the checks other apps add through
:func:`agents.models.register_agent_check` — which ``ModelForm`` runs, so these pages and the
admin refuse the same things in the same words, each at its field.

Every error message starts with the field's label ("Term guards: …").
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
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agents import host_operations
from agents.models import AGENT_SETTINGS, ANSWERING_ROLES, OFFLINE, Agent, ModelEndpoint, Tool, agents_naming
from parley import keys, strict_json
from parley.models import Tenant

# The A2A task states a terminal action may leave the task in (A2A 0.3 names; the terminal ones).
END_STATES = ("completed", "rejected", "canceled", "failed")
# Fallback selects shown at most (more when the agent already names more).
FALLBACK_SLOTS = 4
# Blank action rows offered below the agent's actions: fill one in to add an action.
EXTRA_ACTIONS = 2
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


class PrettyJSONField(forms.JSONField):
    """JSON in a textarea, shown indented; empty input is ``empty()`` (``[]`` or ``{}``), never null.

    Text that is not JSON is refused with the label, the parser's reason and where:
    "Term guards: not valid JSON (Expecting ',' delimiter, line 2 column 5)."; so is JSON that
    Postgres cannot store (:func:`parley.strict_json.loads`): "Term guards: not valid JSON (NaN
    is not a JSON number)." What the JSON must look like is the model's to say.
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
        try:
            return strict_json.loads(value)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                "%(label)s: not valid JSON (%(reason)s, line %(line)d column %(column)d).",
                code="invalid",
                params={"label": self.label, "reason": exc.msg, "line": exc.lineno, "column": exc.colno},
            ) from exc
        except ValueError as exc:
            raise forms.ValidationError(
                "%(label)s: not valid JSON (%(reason)s).",
                code="invalid",
                params={"label": self.label, "reason": str(exc)},
            ) from exc

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


class TenantModelForm(forms.ModelForm):
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
        super()._update_errors(errors)  # type: ignore[misc]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        field = self.unique_per_tenant
        value = cleaned.get(field)
        if field and value:
            rows = self._meta.model._default_manager.filter(tenant=self.tenant, **{field: value})
            if rows.exclude(pk=self.instance.pk).exists():
                label = self.fields[field].label
                self.add_error(field, f"{label}: this tenant already has one named {value!r}.")
        return cleaned


# --- Agents -----------------------------------------------------------------------------------------


class ActionForm(forms.Form):
    """One allowed action: ``{name, description, terminal, state}`` (see ``agents.models.DEFAULT_ACTIONS``).

    A terminal action ends the negotiation and leaves the A2A task in its ``state``; an open one has
    no state.
    """

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


class BaseActionFormSet(forms.BaseFormSet):
    """The agent's allowed actions, in order; rows marked for deletion and blank rows left out."""

    def clean(self) -> None:
        if any(self.errors):
            return
        names = [form.cleaned_data["name"] for form in self._kept()]
        if not names:
            raise forms.ValidationError("Allowed actions: the agent needs at least one action.")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise forms.ValidationError(f"Allowed actions: {', '.join(repeated)} named more than once.")

    def _kept(self) -> list[forms.Form]:
        # A blank extra row is valid with empty cleaned_data: it adds nothing.
        return [form for form in self.forms if form.cleaned_data and not form.cleaned_data.get("DELETE")]

    def actions(self) -> list[dict[str, object]]:
        """The actions as ``Agent.allowed_actions`` stores them; call after ``is_valid()``."""
        return [
            {
                "name": form.cleaned_data["name"],
                "description": form.cleaned_data["description"],
                "terminal": bool(form.cleaned_data["terminal"]),
                "state": form.cleaned_data["state"] if form.cleaned_data["terminal"] else "",
            }
            for form in self._kept()
        ]


ActionFormSet = cast(
    type[BaseActionFormSet],
    forms.formset_factory(
        ActionForm,
        formset=BaseActionFormSet,
        extra=EXTRA_ACTIONS,
        can_delete=True,
        max_num=50,
        validate_max=True,
    ),
)


class AgentForm(TenantModelForm):
    """Create or edit an agent of ``tenant``: every setting an operator configures.

    The allowed actions come from their own formset (:attr:`actions`, prefix ``actions``); the
    model and fallbacks are chosen among ``offline`` and the tenant's endpoints; the principal and
    the intake owner among the tenant's members; the tools among the tenant's tools. The fields
    are grouped as :attr:`FIELDSETS` lists them (``actions`` is the formset's place).
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
            ["terms", "term_guards", "strategy", "max_turns", "turn_timeout", "evaluation_url"],
        ),
        ("actions", "Allowed actions", []),
        ("model", "Model", ["model", "fallback_models"]),
        ("runs", "Runs", ["max_steps", "history", "history_window", "on_busy", "guardrails"]),
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

    # Filled from the actions formset in clean(); never posted itself.
    allowed_actions = forms.JSONField(disabled=True, required=False)
    term_guards = PrettyJSONField(
        empty=list,
        label="Term guards",
        help_text='Hard limits checked on every outgoing move: a JSON list of {"term", "op" (<=, >=, ==, '
        'in), "value"}, optional "currency" and "aspiration", e.g. '
        '[{"term": "amount", "op": "<=", "value": 1200, "currency": "EUR"}].',
    )
    guardrails = PrettyJSONField(empty=list, label="Guardrails", help_text=Agent.guardrails.field.help_text)
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
            roles=ANSWERING_ROLES,
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
        self.actions: BaseActionFormSet = ActionFormSet(
            self.data if self.is_bound else None,
            prefix="actions",
            initial=None if self.is_bound else list(agent.allowed_actions),
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.actions.is_valid():
            cleaned["allowed_actions"] = self.actions.actions()
        else:
            self.add_error("allowed_actions", "Allowed actions: correct the actions marked below.")
        return cleaned

    def fieldsets(self) -> list[tuple[str, str, list[forms.BoundField]]]:
        """(id, legend, bound fields) per group, in page order."""
        return [(key, legend, [self[name] for name in names]) for key, legend, names in self.FIELDSETS]


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

    def clean_parameters(self) -> Any:
        schema = self.cleaned_data["parameters"]
        try:
            host_operations.check_schema(schema)
        except forms.ValidationError as exc:
            raise forms.ValidationError([f"Parameters: {m}" for m in exc.messages], code="invalid") from exc
        return schema

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("secret"):
            # Set before the model's check, which wants a host operation to have one.
            self.new_secret = self.instance.secret = keys.new_secret()
        return cleaned


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
