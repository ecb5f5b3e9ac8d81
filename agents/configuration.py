"""Writes of a tenant's configuration: agents, their intents, tools and model endpoints; and the
rules that judge them.

The host API and the operator's pages both save through here (the pages' forms parse what was
typed and show these rules' refusals at their fields; the admin's forms judge by them too). Every
write is one transaction: the row is locked (``select_for_update``), the new values are set,
:func:`full_clean` judges them — the fields' own checks, then the rules of its kind kept here
(an agent's people, guardrails, models and the checks other apps register with
:func:`register_agent_check`; a tool's kind; a model endpoint's currency; an intent's checks) —
and the row is saved; an agent's tools are set in the same transaction, and a new host name gets a
new claim (:func:`agents.services.host_names.claim`: a new token, not yet proved). The models hold only
the checks of their own fields. The rules the writes add: a slug or name another row of the
tenant has, renaming a model endpoint agents use.

Errors: ``django.core.exceptions.ValidationError`` keyed by field (nothing written), and
:class:`InUse` for a delete the tenant's other rows refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, TypeVar, cast

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, models, transaction

from agents import guardrails, host_operations, tools
from agents.llm import ModelError, model_for
from agents.models import OFFLINE, Agent, Intent, ModelEndpoint, Run, Tool, agents_naming
from agents.services import host_names
from parley import roles
from parley.models import Membership, Tenant, TenantOwnedModel

RACED = "Not saved: another change took this name a moment ago. Check the names and save again."
UNIQUE_VIOLATION = "23505"  # Postgres's SQLSTATE for a unique constraint refusing a row


def is_unique_violation(exc: IntegrityError) -> bool:
    """Whether ``exc`` is a unique constraint refusing a value (Postgres SQLSTATE 23505, or
    SQLite's "UNIQUE constraint failed" in the embedded default), not another constraint."""
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate is not None:
        return bool(sqlstate == UNIQUE_VIOLATION)
    return str(cause).startswith("UNIQUE constraint failed")


_R = TypeVar("_R", bound=TenantOwnedModel)


class InUse(Exception):
    """A row other rows of the tenant depend on cannot be deleted now; the message says which and what
    to do first."""


# --- Judging a row ----------------------------------------------------------------------------------

_agent_checks: list[Callable[[Agent], None]] = []
_intent_checks: list[Callable[[Intent], None]] = []


def register_agent_check(check: Callable[[Agent], None]) -> None:
    """Run ``check(agent)`` in :func:`full_clean` of an agent: how apps above ``agents`` validate the
    fields they read (the public endpoint's card overrides, host name, CORS origins) without
    ``agents`` importing them. ``check`` raises ``ValidationError`` keyed by field."""
    if check not in _agent_checks:
        _agent_checks.append(check)


def register_intent_check(check: Callable[[Intent], None]) -> None:
    """Run ``check(intent)`` in :func:`full_clean` of an intent, as :func:`register_agent_check` does
    for agents (the negotiator reads an intent's term guards). ``check`` raises ``ValidationError``
    keyed by field."""
    if check not in _intent_checks:
        _intent_checks.append(check)


def full_clean(
    row: models.Model,
    *,
    exclude: Iterable[str] | None = None,
    validate_unique: bool = True,
    validate_constraints: bool = True,
) -> None:
    """``row.full_clean()``, with the rules of its kind judged where Django calls ``Model.clean``:
    after the fields' own checks, before the unique checks and constraints (which then skip the
    fields refused). The arguments are ``Model.full_clean``'s.

    The rules: an agent's (:func:`_agent_rules`), a tool's (:func:`_tool_rules`), a model
    endpoint's (:func:`_model_endpoint_rules`) and an intent's (the registered checks); any other
    row has only its fields' checks. Raises ``ValidationError`` keyed by field with every problem
    found.
    """
    errors: dict[str, list[ValidationError]] = {}
    try:
        row.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    rules = _RULES.get(type(row))
    if rules is not None:
        try:
            rules(row)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
    last = [(row.validate_unique, validate_unique), (row.validate_constraints, validate_constraints)]
    for validate, wanted in last:
        if wanted:
            refused = {name for name in errors if name != NON_FIELD_ERRORS}
            try:
                validate(exclude={*(exclude or ()), *refused})
            except ValidationError as exc:
                errors = exc.update_error_dict(errors)
    if errors:
        raise ValidationError(errors)


def _agent_rules(agent: Agent) -> None:
    """What an agent cannot work with beyond its fields' own checks: a null JSON setting, a
    principal who is not a member of the tenant who may answer (:data:`parley.roles.ANSWER`), an
    intake owner who is not a member, its guardrails, the checks other apps register, models and
    fallbacks its tenant does not serve (in one currency), and fallbacks named twice.

    Raises every problem found at once, each field's first: the people and nulls are checked
    first (the other checks read the fields), then the guardrails, the checks other apps
    register, in order up to the first that refuses (one may read what an earlier one checks:
    the card is built from the actions), and the models.
    """
    errors: dict[str, list[ValidationError]] = {}

    def refused(check: Callable[[], None]) -> bool:
        try:
            check()
        except ValidationError as exc:
            for field, problems in exc.update_error_dict({}).items():
                errors.setdefault(field, problems)
            return True
        return False

    if not refused(partial(_check_people_and_nulls, agent)):
        refused(partial(_check_guardrails, agent))
        for check in _agent_checks:
            if refused(partial(check, agent)):
                break
        refused(partial(_check_models, agent))
    if "fallback_models" not in errors:
        refused(partial(_check_model_choices, agent))
    if errors:
        raise ValidationError(errors)


def _check_people_and_nulls(agent: Agent) -> None:
    errors: dict[str, str] = {}
    for field in agent._meta.concrete_fields:
        # clean_fields lets a blank field be null, which its NOT NULL column then refuses.
        blank_not_null = isinstance(field, models.JSONField) and field.blank and not field.null
        if blank_not_null and getattr(agent, field.attname) is None:
            errors[field.name] = "Give a JSON value, not null."
    if agent.tenant_id is not None:
        members = dict(
            Membership.objects.filter(
                tenant_id=agent.tenant_id, user_id__in=[agent.principal_id, agent.intake_owner_id]
            ).values_list("user_id", "role")
        )
        if agent.principal_id is not None and agent.principal_id not in members:
            errors["principal"] = "The principal must be a member of this tenant."
        elif agent.principal_id is not None and members[agent.principal_id] not in roles.ANSWER:
            errors["principal"] = "A viewer cannot answer for an agent; choose a member who can."
        if agent.intake_owner_id is not None and agent.intake_owner_id not in members:
            errors["intake_owner"] = "The intake owner must be a member of this tenant."
    if errors:
        raise ValidationError(errors)


def _check_guardrails(agent: Agent) -> None:
    try:
        guardrails.validate(agent.guardrails)
    except ValidationError as exc:
        raise ValidationError({"guardrails": exc.error_list}) from exc


def _check_models(agent: Agent) -> None:
    if not isinstance(agent.fallback_models, list) or not all(
        isinstance(name, str) and name for name in agent.fallback_models
    ):
        raise ValidationError({"fallback_models": "List the fallback models' names, in order."})
    if agent.tenant_id is not None:
        try:
            model_for(agent)
        except ModelError as exc:
            raise ValidationError({"model": str(exc)}) from exc


def _check_model_choices(agent: Agent) -> None:
    """Fallbacks are ``offline`` or the tenant's endpoints, each named once (:func:`_check_models`
    checks the fallbacks only when the model is not ``offline``)."""
    fallbacks = agent.fallback_models
    if not isinstance(fallbacks, list) or not all(isinstance(name, str) for name in fallbacks):
        return  # _check_people_and_nulls or _check_models says so
    if agent.tenant_id is None:
        return  # the tenant's field says so
    served = {OFFLINE, *ModelEndpoint.objects.for_tenant(agent.tenant_id).values_list("name", flat=True)}
    unknown = [name for name in dict.fromkeys(fallbacks) if name not in served]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        raise ValidationError({"fallback_models": f"No model endpoint of this tenant is named {listed}."})
    if len(set(fallbacks)) != len(fallbacks):
        raise ValidationError({"fallback_models": "Name each fallback model once."})


def _tool_rules(tool: Tool) -> None:
    """That the tool can run as its kind says, that its parameters are a JSON Schema, and that only
    a built-in has a built-in's name (:func:`agents.tools.builtin_names`). Raises the first problem."""
    try:
        host_operations.check_schema(tool.parameters)
    except ValidationError as exc:
        raise ValidationError({"parameters": exc.error_list}) from exc
    builtins = tools.builtin_names()
    if tool.kind == Tool.Kind.BUILTIN and tool.name not in builtins:
        raise ValidationError({"name": f"Built-in tools are {', '.join(builtins)}."})
    if tool.kind != Tool.Kind.BUILTIN and tool.name in builtins:
        # The loop and the negotiator know a built-in by its name: another tool of that name
        # would be offered in its place, or be taken for it.
        raise ValidationError(
            {
                "name": f"{tool.name!r} is the name of a built-in tool ({', '.join(builtins)}): "
                'choose another name, or the kind "Built in" to offer the built-in.'
            }
        )
    if tool.kind == Tool.Kind.HOST and not tool.url:
        raise ValidationError({"url": "A host operation needs the URL it calls."})
    # Plain http only: any other scheme is the field's validator's to refuse.
    plain_http = tool.url.lower().startswith("http://")
    if tool.kind == Tool.Kind.HOST and plain_http and not host_operations.scheme_allowed(tool.url):
        raise ValidationError({"url": "A host operation's URL must be https://, not plain http."})
    if tool.kind == Tool.Kind.HOST and not tool.secret:
        raise ValidationError({"secret": "A host operation needs a secret to sign its calls."})
    if tool.requires_approval and (tool.suspends or tool.name == "ask_user"):
        asking = "A tool that asks the party needs no approval: the answer is the approval."
        raise ValidationError({"requires_approval": asking})
    if tool.kind == Tool.Kind.AGENT and (
        tool.target_agent is None or tool.target_agent.tenant_id != tool.tenant_id
    ):
        raise ValidationError({"target_agent": "Choose an agent of this tenant to run."})


def _model_endpoint_rules(endpoint: ModelEndpoint) -> None:
    """A currency that differs from that of another model an agent names with this one (a run's
    cost adds up one currency; see :func:`agents.llm.model_for`)."""
    if endpoint.tenant_id is not None and (clash := _currency_clash(endpoint)):
        raise ValidationError({"currency": clash})


def _currency_clash(endpoint: ModelEndpoint) -> str:
    """Which agents name this model with another priced in another currency, or ""."""
    users = agents_naming(endpoint.tenant_id, endpoint.name)
    named = {agent.pk: {agent.model, *(agent.fallback_models or [])} for agent in users}
    others = set().union(*named.values())
    currencies = dict(
        ModelEndpoint.objects.for_tenant(endpoint.tenant_id)
        .filter(name__in=others - {endpoint.name})
        .exclude(currency=endpoint.currency)
        .values_list("name", "currency")
    )
    clashing = [agent.name for agent in users if named[agent.pk] & currencies.keys()]
    if not clashing:
        return ""
    priced = ", ".join(f"{name} in {currency}" for name, currency in sorted(currencies.items()))
    return (
        f"{', '.join(clashing)} also use{'s' if len(clashing) == 1 else ''} {priced}; an agent's "
        "models are priced in one currency. Choose other models for them first."
    )


def _intent_rules(intent: Intent) -> None:
    """The checks other apps register (:func:`register_intent_check`), in order."""
    for check in _intent_checks:
        check(intent)


_RULES: dict[type[models.Model], Callable[[Any], None]] = {
    Agent: _agent_rules,
    Tool: _tool_rules,
    ModelEndpoint: _model_endpoint_rules,
    Intent: _intent_rules,
}


# --- Agents -----------------------------------------------------------------------------------------


def agent_create(*, tenant: Tenant, values: Mapping[str, Any], tools: Iterable[Tool] | None = None) -> Agent:
    """A new agent of ``tenant`` with ``values`` (model field names; the rest keep their defaults)
    offering ``tools`` (none: the defaults).

    Raises ``ValidationError`` keyed by field for any value the agent cannot work with (see the
    module docstring), the tenant's other agent with this slug, or a tool of another tenant.
    """
    with transaction.atomic():
        agent = Agent(tenant=tenant)
        return _agent_save(agent, values, tools)


def agent_update(*, agent: Agent, values: Mapping[str, Any], tools: Iterable[Tool] | None = None) -> Agent:
    """``agent`` with ``values`` set, and offering exactly ``tools`` unless ``tools`` is None (kept).

    The agent is re-read under a row lock, so a concurrent change is not lost. Raises as
    :func:`agent_create`; the whole agent is judged, not only the values given.
    """
    with transaction.atomic():
        locked = _locked(agent)
        return _agent_save(locked, values, tools)


def agent_delete(*, agent: Agent) -> None:
    """Delete ``agent`` with everything that is its own: intents, runs and their messages and
    questions, negotiations and settlements, grounding documents, inbound keys, A2A tasks.

    Raises :class:`InUse` while a run of the agent has not ended (pending, queued, running,
    waiting on the party or on negotiations: cancel it first), or while a tool runs the agent
    (deleting the agent would silently delete that tool from the agents that offer it).
    """
    with transaction.atomic():
        agent = _locked(agent)
        unfinished = Run.objects.for_tenant(agent.tenant_id).filter(agent=agent).exclude(status__in=Run.ENDED)
        if count := unfinished.count():
            raise InUse(f"{agent.name} has runs that have not ended ({count}); cancel them first.")
        runners = _names(Tool.objects.for_tenant(agent.tenant_id).filter(target_agent=agent))
        if runners:
            raise InUse(f"Tools run {agent.name} ({runners}); delete them or give them another agent first.")
        agent.delete()


def _agent_save(agent: Agent, values: Mapping[str, Any], tools: Iterable[Tool] | None) -> Agent:
    previous = agent.host_name
    _set(agent, values)
    host_names.claim(agent, previous=previous)
    chosen = None if tools is None else list(tools)
    errors = _errors(agent, unique={"slug": "an agent"})
    if chosen is not None and any(tool.tenant_id != agent.tenant_id for tool in chosen):
        errors.setdefault("tools", ["Choose tools of this tenant."])
    if errors:
        raise ValidationError(errors)
    _save(agent)
    if chosen is not None:
        agent.tools.set(chosen)
    return agent


# --- Intents ----------------------------------------------------------------------------------------


def intent_add(
    *, agent: Agent, statement: str, external_id: str = "", term_guards: list[Any] | None = None
) -> Intent:
    """A new intent of ``agent``: what it works on (``statement``), the host's own id for it
    (``external_id``, unique per agent when given) and hard limits added to the agent's
    (``term_guards``, checked as the negotiator reads them).

    Raises ``ValidationError`` keyed by field (nothing written).
    """
    intent = Intent(tenant_id=agent.tenant_id, agent=agent)
    with transaction.atomic():
        values = {"statement": statement, "external_id": external_id, "term_guards": term_guards or []}
        return _intent_save(intent, values)


def intent_update(*, intent: Intent, values: Mapping[str, Any]) -> Intent:
    """``intent`` with ``values`` (``statement``, ``external_id``, ``term_guards``) set, under a row
    lock. Raises as :func:`intent_add`. The change applies from the next step of a run of it."""
    with transaction.atomic():
        return _intent_save(_locked(intent), values)


def _intent_save(intent: Intent, values: Mapping[str, Any]) -> Intent:
    _set(intent, values)
    errors = _errors(intent)
    if "external_id" not in errors and intent.external_id:
        others = Intent.objects.for_tenant(intent.tenant_id).filter(
            agent_id=intent.agent_id, external_id=intent.external_id
        )
        if others.exclude(pk=intent.pk).exists():
            errors["external_id"] = ["This agent already has an intent with this external id."]
    if errors:
        raise ValidationError(errors)
    _save(intent)
    return intent


# --- Tools ------------------------------------------------------------------------------------------


def tool_create(*, tenant: Tenant, values: Mapping[str, Any]) -> Tool:
    """A new tool of ``tenant`` with ``values``.

    Raises ``ValidationError`` keyed by field: parameters that are not a JSON Schema, a name
    another tool of the tenant has, or a tool that cannot run as its kind says (:func:`_tool_rules`).
    """
    with transaction.atomic():
        return _tool_save(Tool(tenant=tenant), values)


def tool_update(*, tool: Tool, values: Mapping[str, Any]) -> Tool:
    """``tool`` with ``values`` set, under a row lock; raises as :func:`tool_create`. Runs already
    under way call it as it is when they call it."""
    with transaction.atomic():
        return _tool_save(_locked(tool), values)


def tool_delete(*, tool: Tool) -> None:
    """Delete ``tool``. Raises :class:`InUse` while agents offer it: without it, an agent would
    offer other tools (or the defaults, had it no other) without anyone choosing so."""
    with transaction.atomic():
        tool = _locked(tool)
        offering = _names(Agent.objects.for_tenant(tool.tenant_id).filter(tools=tool))
        if offering:
            raise InUse(f"Agents offer {tool.name} ({offering}); take it off them first.")
        tool.delete()


def _tool_save(tool: Tool, values: Mapping[str, Any]) -> Tool:
    _set(tool, values)
    errors = _errors(tool, unique={"name": "a tool"})
    if errors:
        raise ValidationError(errors)
    _save(tool)
    return tool


# --- Model endpoints --------------------------------------------------------------------------------


def model_endpoint_create(*, tenant: Tenant, values: Mapping[str, Any]) -> ModelEndpoint:
    """A new model endpoint of ``tenant`` with ``values``.

    Raises ``ValidationError`` keyed by field: a name another endpoint of the tenant has, or what
    :func:`full_clean` refuses (the built-in model's name, credentials in the URL, a currency
    other than that of a model an agent uses with it).
    """
    with transaction.atomic():
        return _model_endpoint_save(ModelEndpoint(tenant=tenant), values)


def model_endpoint_update(*, endpoint: ModelEndpoint, values: Mapping[str, Any]) -> ModelEndpoint:
    """``endpoint`` with ``values`` set, under a row lock; raises as :func:`model_endpoint_create`,
    and on ``name`` when the name changes while agents name it."""
    with transaction.atomic():
        endpoint = _locked(endpoint)
        saved_name = endpoint.name
        if "name" in values and values["name"] != saved_name:
            users = [agent.name for agent in agents_naming(endpoint.tenant_id, saved_name)]
            if users:
                raise ValidationError(
                    {
                        "name": f"{', '.join(users)} use{'s' if len(users) == 1 else ''} the name "
                        f"{saved_name!r}; choose another model for them first."
                    }
                )
        return _model_endpoint_save(endpoint, values)


def model_endpoint_delete(*, endpoint: ModelEndpoint) -> None:
    """Delete ``endpoint``. Raises :class:`InUse` while agents name it as their model or a fallback:
    their runs would fail on the missing model."""
    with transaction.atomic():
        endpoint = _locked(endpoint)
        users = [agent.name for agent in agents_naming(endpoint.tenant_id, endpoint.name)]
        if users:
            raise InUse(
                f"{', '.join(users)} use{'s' if len(users) == 1 else ''} {endpoint.name}; "
                "choose another model for them first."
            )
        endpoint.delete()


def _model_endpoint_save(endpoint: ModelEndpoint, values: Mapping[str, Any]) -> ModelEndpoint:
    _set(endpoint, values)
    errors = _errors(endpoint, unique={"name": "a model endpoint"})
    if errors:
        raise ValidationError(errors)
    _save(endpoint)
    return endpoint


# --- Shared -----------------------------------------------------------------------------------------


def _locked(row: _R) -> _R:
    """``row`` re-read under a row lock (inside a transaction); gone meanwhile is ``DoesNotExist``."""
    locked = type(row).objects.for_tenant(row.tenant_id).select_for_update().get(pk=row.pk)
    return cast(_R, locked)


def _set(row: TenantOwnedModel, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        setattr(row, name, value)


def _errors(row: TenantOwnedModel, *, unique: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """What :func:`full_clean` says of ``row``, by field; and, for each field of ``unique`` (a field
    unique per tenant, with what the row is called), that another row of the tenant has its value.

    The unique constraints are checked here rather than by ``full_clean``, which names no field for
    a constraint over (tenant, field).
    """
    errors: dict[str, list[str]] = {}
    try:
        full_clean(row, validate_constraints=False)
    except ValidationError as exc:
        errors = dict(exc.message_dict)
    for field, called in (unique or {}).items():
        value = getattr(row, field)
        if field in errors or not value:
            continue
        others = type(row).objects.for_tenant(row.tenant_id).filter(**{field: value}).exclude(pk=row.pk)
        if others.exists():
            errors[field] = [f"This tenant already has {called} with the {field} {value!r}."]
    return errors


def _save(row: TenantOwnedModel) -> None:
    """Save ``row``; a unique value taken by a concurrent write after the check is refused as the
    dashboard refuses it."""
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        raise ValidationError({NON_FIELD_ERRORS: [RACED]}) from exc


def _names(rows: Any) -> str:
    return ", ".join(rows.order_by("name").values_list("name", flat=True))
