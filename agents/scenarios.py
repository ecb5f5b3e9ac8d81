"""Scenario files: a roster of users and what each is working on, imported as agents and intents.

The format is Index Network's agent-tui scenario (``packages/agent-tui`` README,
"Scenario format")::

    {"users": [{"id": str, "name": str,
                "instructions": str?,                 # earlier format: the party's private brief
                "intro": str?, "location": str?, "timezone": str?,
                "intents": [{"id": str, "intent": str}, ...]}, ...]}

User ids are unique within a file, intent ids unique within a user; there are
at least two users and every user has at least one intent. Keys outside this
shape are refused rather than ignored, so a misspelt ``instructions`` cannot
silently drop a party's brief.

Each user is a party, and an agent with nobody to ask never asks (README,
"Negotiating"), so every imported agent gets a principal: the agent's own when
it has one, else the tenant's member named ``<tenant slug>.<user slug>``, else a
new placeholder account of that name made a ``principal`` member — with no
usable password and a placeholder e-mail (``…@scenario.invalid``) until an owner
hands its place to the person (:func:`parley.services.placeholder_invite`).
The file names no e-mail addresses, so nobody outside the tenant is matched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib.auth.models import User
from django.db import models, transaction
from django.utils.text import slugify

from agents.models import Agent, Intent
from parley.jsontypes import json_type
from parley.models import Membership, Tenant
from parley.roles import ANSWER
from parley.services import placeholder_create

_TOP_KEYS = frozenset({"users"})
_USER_KEYS = frozenset({"id", "name", "instructions", "intro", "location", "timezone", "intents"})
_INTENT_KEYS = frozenset({"id", "intent"})


def _max_length(model: type[models.Model], field: str) -> int:
    column = model._meta.get_field(field)
    if not isinstance(column, models.Field) or column.max_length is None:
        raise TypeError(f"{model.__name__}.{field} has no max_length")
    return column.max_length


# Limits come from the columns the values land in, so Postgres never refuses a
# file this module accepted.
_SLUG_MAX = _max_length(Agent, "slug")
_NAME_MAX = _max_length(Agent, "name")
_EXTERNAL_ID_MAX = _max_length(Intent, "external_id")
# party_id is "<tenant slug>:user:<user id>" and must fit for the longest tenant slug.
_USER_ID_MAX = _max_length(Agent, "party_id") - len(":user:") - _max_length(Tenant, "slug")
_TIMEZONE_MAX = _max_length(Agent, "timezone")
_FALLBACK_TIMEZONE = "UTC"


class ScenarioError(ValueError):
    """The scenario breaks a rule of the format; the message names the place, e.g. ``users[2].id``."""


@dataclass(frozen=True)
class ScenarioIntent:
    id: str
    intent: str


@dataclass(frozen=True)
class ScenarioUser:
    """One user. Optional text fields are ``""`` when absent; ``slug`` is ``slugify(id)``."""

    id: str
    slug: str
    name: str
    instructions: str
    intro: str
    location: str
    timezone: str
    intents: tuple[ScenarioIntent, ...]


@dataclass(frozen=True)
class Scenario:
    users: tuple[ScenarioUser, ...]


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote. ``timezone_fallbacks`` lists the ids of users whose
    ``timezone`` is not a zoneinfo key; their agents got UTC.

    Principals, by username: ``principals_created`` are new accounts made
    principal members, ``principals_matched`` members of the tenant that became
    an agent's principal, ``principals_kept`` counts agents that had one
    already. ``without_principal`` pairs each user id whose agent got none with
    the reason.
    """

    agents_created: int
    agents_updated: int
    intents_created: int
    intents_updated: int
    timezone_fallbacks: tuple[str, ...]
    principals_created: tuple[str, ...] = ()
    principals_matched: tuple[str, ...] = ()
    principals_kept: int = 0
    without_principal: tuple[tuple[str, str], ...] = ()


def scenario_parse(raw: object) -> Scenario:
    """Check decoded JSON against the scenario format and return it typed.

    Raises :class:`ScenarioError` at the first rule broken, naming the place:
    an unexpected shape or key, a missing or mistyped field, a blank id, name or
    intent, a value too long for its column, fewer than two users, a user without
    intents, a duplicate user id or intent id, or a user id whose slug is empty,
    too long, or the same as an earlier user's. An unknown ``timezone`` is not an
    error: :func:`scenario_import` falls back to UTC for it.
    """
    top = _object(raw, "top level", _TOP_KEYS)
    users_raw = _list(top, "users", "top level")
    if len(users_raw) < 2:
        raise ScenarioError(f"users must hold at least two users, got {len(users_raw)}")
    users: list[ScenarioUser] = []
    place_of_id: dict[str, str] = {}
    place_of_slug: dict[str, str] = {}
    for index, user_raw in enumerate(users_raw):
        place = f"users[{index}]"
        user = _user(user_raw, place)
        if user.id in place_of_id:
            raise ScenarioError(f'{place}.id "{user.id}" duplicates {place_of_id[user.id]}.id')
        if user.slug in place_of_slug:
            raise ScenarioError(
                f'{place}.id "{user.id}" gives slug "{user.slug}", as {place_of_slug[user.slug]}.id does'
            )
        place_of_id[user.id] = place
        place_of_slug[user.slug] = place
        users.append(user)
    return Scenario(users=tuple(users))


def scenario_import(*, tenant: Tenant, data: object) -> ImportResult:
    """Import decoded scenario JSON into ``tenant``: one Agent per user, one Intent per intent.

    Agents are matched on ``(tenant, slug)`` and intents on ``(tenant, agent,
    external_id)``, so importing the same file again updates the same rows.
    Fields the file defines are overwritten (an operator's edit to them is lost);
    other fields, other agents, and intents the file no longer lists are left
    alone. An agent without a principal gets one (see the module docstring and
    :func:`principal_username`); one it has is kept. Writes happen in one
    transaction: on any error nothing is written.

    Raises :class:`ScenarioError` (see :func:`scenario_parse`) before writing anything.
    """
    scenario = scenario_parse(data)
    agents_created = agents_updated = intents_created = intents_updated = kept = 0
    fallbacks: list[str] = []
    accounts_created: list[str] = []
    members_matched: list[str] = []
    missing: list[tuple[str, str]] = []
    with transaction.atomic():
        for user in scenario.users:
            timezone = _known_timezone(user.timezone)
            if user.timezone and timezone is None:
                fallbacks.append(user.id)
            agent, created = Agent.objects.update_or_create(
                tenant=tenant,
                slug=user.slug,
                defaults={
                    "name": user.name,
                    "party_id": f"{tenant.slug}:user:{user.id}",
                    "description": user.intro,
                    "system_prompt": _system_prompt(user),
                    "timezone": timezone or _FALLBACK_TIMEZONE,
                },
            )
            agents_created += created
            agents_updated += not created
            for item in user.intents:
                _, created = Intent.objects.update_or_create(
                    tenant=tenant, agent=agent, external_id=item.id, defaults={"statement": item.intent}
                )
                intents_created += created
                intents_updated += not created
            if agent.principal_id is not None:
                kept += 1
                continue
            found = _principal(tenant, user)
            if isinstance(found, str):
                missing.append((user.id, found))
                continue
            account, new = found
            (accounts_created if new else members_matched).append(account.get_username())
            agent.principal = account
            agent.save(update_fields=["principal", "updated_at"])
    return ImportResult(
        agents_created=agents_created,
        agents_updated=agents_updated,
        intents_created=intents_created,
        intents_updated=intents_updated,
        timezone_fallbacks=tuple(fallbacks),
        principals_created=tuple(accounts_created),
        principals_matched=tuple(members_matched),
        principals_kept=kept,
        without_principal=tuple(missing),
    )


def principal_username(tenant: Tenant, user: ScenarioUser) -> str:
    """The username of ``user``'s account as the importer makes it: ``"<tenant slug>.<user slug>"``.

    At most 63 + 1 + 63 characters, which a username holds; "." is in neither slug, so no two
    (tenant, user) pairs share a name.
    """
    return f"{tenant.slug}.{user.slug}"


def _principal(tenant: Tenant, user: ScenarioUser) -> tuple[User, bool] | str:
    """The account that answers for ``user``'s agent and whether it is new, or why there is none.

    The tenant's member of :func:`principal_username` (any case, as usernames are taken), or a new
    placeholder account of that name (:func:`parley.services.placeholder_create`). Never an account
    outside the tenant: the name may be someone else's, and making them a member would hand them
    this tenant.
    """
    username = principal_username(tenant, user)
    account = User.objects.filter(username__iexact=username).first()
    if account is None:
        return placeholder_create(tenant=tenant, username=username), True
    role = Membership.objects.filter(tenant=tenant, user=account).values_list("role", flat=True).first()
    name = account.get_username()
    if role is None:
        return f"the username {name} is taken by an account that is not a member of {tenant.slug}"
    if not account.is_active:
        return f"{name}'s account is deactivated"
    if role not in ANSWER:
        return f"{name} is a {role} of {tenant.slug}, and a {role} cannot answer for an agent"
    return account, False


def _system_prompt(user: ScenarioUser) -> str:
    """The private instructions, then the profile facts, in blank-line-separated parts."""
    parts = [
        user.instructions,
        f"Intro: {user.intro}" if user.intro else "",
        f"Location: {user.location}" if user.location else "",
    ]
    return "\n\n".join(p for p in parts if p)


def _known_timezone(name: str) -> str | None:
    """``name`` when it is a zoneinfo key that fits the column, else None.

    Checked with ``ZoneInfo`` because that is how the agent loop reads the field.
    """
    if not name or len(name) > _TIMEZONE_MAX:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        # ValueError: keys that are not normalised relative paths ("../x", "/etc/localtime").
        return None
    return name


def _user(raw: object, place: str) -> ScenarioUser:
    user = _object(raw, place, _USER_KEYS)
    user_id = _text(user, "id", place, max_length=_USER_ID_MAX)
    slug = slugify(user_id)
    if not slug:
        raise ScenarioError(f'{place}.id "{user_id}" gives an empty slug')
    if len(slug) > _SLUG_MAX:
        raise ScenarioError(f'{place}.id "{user_id}" gives a slug longer than {_SLUG_MAX} characters')
    intents_raw = _list(user, "intents", place)
    if not intents_raw:
        raise ScenarioError(f"{place}.intents must hold at least one intent")
    intents: list[ScenarioIntent] = []
    place_of_id: dict[str, str] = {}
    for index, intent_raw in enumerate(intents_raw):
        intent_place = f"{place}.intents[{index}]"
        intent = _object(intent_raw, intent_place, _INTENT_KEYS)
        intent_id = _text(intent, "id", intent_place, max_length=_EXTERNAL_ID_MAX)
        if intent_id in place_of_id:
            raise ScenarioError(f'{intent_place}.id "{intent_id}" duplicates {place_of_id[intent_id]}.id')
        place_of_id[intent_id] = intent_place
        intents.append(ScenarioIntent(id=intent_id, intent=_text(intent, "intent", intent_place)))
    return ScenarioUser(
        id=user_id,
        slug=slug,
        name=_text(user, "name", place, max_length=_NAME_MAX),
        instructions=_optional_text(user, "instructions", place),
        intro=_optional_text(user, "intro", place),
        location=_optional_text(user, "location", place),
        timezone=_optional_text(user, "timezone", place),
        intents=tuple(intents),
    )


def _object(raw: object, place: str, keys: frozenset[str]) -> Mapping[str, object]:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{place} must be an object, got {json_type(raw)}")
    unknown = sorted(str(k) for k in raw if k not in keys)
    if unknown:
        raise ScenarioError(f"{place} has unknown key{'s' if len(unknown) > 1 else ''} {_quoted(unknown)}")
    return raw


def _list(parent: Mapping[str, object], key: str, parent_place: str) -> list[object]:
    place = key if parent_place == "top level" else f"{parent_place}.{key}"
    if key not in parent:
        raise ScenarioError(f"{place} is required")
    value = parent[key]
    if not isinstance(value, list):
        raise ScenarioError(f"{place} must be an array, got {json_type(value)}")
    return value


def _text(parent: Mapping[str, object], key: str, parent_place: str, *, max_length: int | None = None) -> str:
    place = f"{parent_place}.{key}"
    if key not in parent:
        raise ScenarioError(f"{place} is required")
    value = parent[key]
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{place} must be a non-empty string")
    if max_length is not None and len(value) > max_length:
        raise ScenarioError(f"{place} must be at most {max_length} characters, got {len(value)}")
    return value


def _optional_text(parent: Mapping[str, object], key: str, parent_place: str) -> str:
    value = parent.get(key, "")
    if not isinstance(value, str):
        raise ScenarioError(f"{parent_place}.{key} must be a string, got {json_type(value)}")
    return value


def _quoted(keys: list[str]) -> str:
    return ", ".join(f'"{k}"' for k in keys)
