"""``manage.py import_scenario PATH --tenant SLUG``: an Index Network scenario file as agents and intents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from agents.scenarios import ImportResult, ScenarioError, scenario_import
from parley.models import Tenant
from parley.selectors import tenant_by_slug


class Command(BaseCommand):
    help = (
        "Import a scenario file (users and their intents) into a tenant: one agent per user, "
        "one intent per intent, and a principal for each agent (a new principal member per user, "
        "with no password until invited). Importing the same file again updates the same rows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="the scenario JSON file")
        parser.add_argument("--tenant", required=True, help="slug of the tenant to import into")
        parser.add_argument(
            "--create-tenant", action="store_true", help="create the tenant when it does not exist"
        )
        parser.add_argument(
            "--tenant-name", help="name of the tenant --create-tenant creates (default: its slug)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        slug: str = options["tenant"]
        create: bool = options["create_tenant"]
        name: str | None = options["tenant_name"]
        if name is not None and not create:
            raise CommandError("--tenant-name only applies with --create-tenant.")
        data = _read_json(path)
        # The tenant is created in the same transaction as the import, so a file
        # that fails validation leaves no empty tenant behind.
        with transaction.atomic():
            tenant = tenant_by_slug(slug)
            created_tenant = tenant is None
            if tenant is None:
                if not create:
                    raise CommandError(f'No tenant "{slug}"; pass --create-tenant to create it.')
                tenant = _tenant_create(slug=slug, name=name or slug)
            try:
                result = scenario_import(tenant=tenant, data=data)
            except ScenarioError as exc:
                raise CommandError(f"{path}: {exc}") from exc
        where = f"new tenant {tenant.slug}" if created_tenant else f"tenant {tenant.slug}"
        self.stdout.write(
            f"Imported {path} into {where}: "
            f"agents created {result.agents_created}, updated {result.agents_updated}; "
            f"intents created {result.intents_created}, updated {result.intents_updated}."
        )
        for line in _principal_lines(result):
            self.stdout.write(line)
        if result.timezone_fallbacks:
            self.stderr.write(
                f"Unknown time zone for {', '.join(result.timezone_fallbacks)}; their agents use UTC."
            )
        for user_id, reason in result.without_principal:
            self.stderr.write(
                f"No principal for {user_id}: {reason}. Until it has one, its agent declines where it "
                "would ask; set one on the agent's page."
            )


def _principal_lines(result: ImportResult) -> list[str]:
    """What the import did about principals, one line per kind of change; none when nothing changed."""
    lines = []
    if result.principals_created:
        lines.append(
            f"Principals created: {', '.join(result.principals_created)} (principal members with no "
            "password and a placeholder e-mail until they are invited)."
        )
    if result.principals_matched:
        lines.append(f"Principals from existing members: {', '.join(result.principals_matched)}.")
    if result.principals_kept:
        count = result.principals_kept
        lines.append(f"Principals kept: {count} agent{'s' if count != 1 else ''} already had one.")
    return lines


def _read_json(path: Path) -> object:
    """The decoded file. Raises CommandError for a missing or unreadable file or invalid JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise CommandError(f"No such file: {path}") from exc
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path} is not UTF-8 text (byte {exc.start}).") from exc
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror}.") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from exc


def _tenant_create(*, slug: str, name: str) -> Tenant:
    """A new tenant, checked against the model's rules (slug format, lengths) first."""
    tenant = Tenant(slug=slug, name=name)
    try:
        tenant.full_clean()
    except ValidationError as exc:
        problems = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
        raise CommandError(f"Cannot create tenant {slug!r}: {problems}") from exc
    tenant.save()
    return tenant
