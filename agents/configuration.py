"""Writes of a tenant's configuration: agents, their intents, tools and model endpoints.

What the host API calls (the dashboard's pages save through their forms, which check the same).
Every write is one transaction: the row is locked (``select_for_update``), the new values are
set, the model's ``full_clean`` judges them — ``Agent.clean`` with the checks other apps register
(:func:`agents.models.register_agent_check`), ``Tool.clean``, ``ModelEndpoint.clean``,
``Intent.clean`` — and the row is saved; an agent's tools are set in the same transaction. The
rules the operator's forms add to the models' (:mod:`agents.config_forms`) are kept here too, so
the API refuses what the pages refuse: a slug or name another row of the tenant has, fallback
models the tenant does not serve or names twice, renaming a model endpoint agents use.

Errors: ``django.core.exceptions.ValidationError`` keyed by field (nothing written), and
:class:`InUse` for a delete the tenant's other rows refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, transaction

from agents.models import OFFLINE, Agent, Intent, ModelEndpoint, Run, Tool, agents_naming
from parley.models import Tenant, TenantOwnedModel

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
    _set(agent, values)
    chosen = None if tools is None else list(tools)
    errors = _errors(agent, unique={"slug": "an agent"})
    errors |= {f: [m] for f, m in _model_choice_errors(agent).items() if f not in errors}
    if chosen is not None and any(tool.tenant_id != agent.tenant_id for tool in chosen):
        errors.setdefault("tools", ["Choose tools of this tenant."])
    if errors:
        raise ValidationError(errors)
    _save(agent)
    if chosen is not None:
        agent.tools.set(chosen)
    return agent


def _model_choice_errors(agent: Agent) -> dict[str, str]:
    """What the operator's page refuses of the model choices beyond ``Agent.clean``: fallbacks are
    ``offline`` or the tenant's endpoints, each named once (``Agent.clean`` checks the fallbacks
    only when the model is not ``offline``)."""
    fallbacks = agent.fallback_models
    if not isinstance(fallbacks, list) or not all(isinstance(name, str) for name in fallbacks):
        return {}  # Agent.clean says so
    served = {OFFLINE, *ModelEndpoint.objects.for_tenant(agent.tenant_id).values_list("name", flat=True)}
    unknown = [name for name in dict.fromkeys(fallbacks) if name not in served]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        return {"fallback_models": f"No model endpoint of this tenant is named {listed}."}
    if len(set(fallbacks)) != len(fallbacks):
        return {"fallback_models": "Name each fallback model once."}
    return {}


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
    another tool of the tenant has, or a tool that cannot run as its kind says (``Tool.clean``).
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
    ``ModelEndpoint.clean`` refuses (the built-in model's name, credentials in the URL, a currency
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
    """What ``full_clean`` says of ``row``, by field; and, for each field of ``unique`` (a field
    unique per tenant, with what the row is called), that another row of the tenant has its value.

    The unique constraints are checked here rather than by ``full_clean``, which names no field for
    a constraint over (tenant, field).
    """
    errors: dict[str, list[str]] = {}
    try:
        row.full_clean(validate_constraints=False)
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
