"""``manage.py invite <slug> <email> --role …``: invite someone to an organisation, printing the link."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from parley import selectors, services
from parley.management.commands._tenancy import invitation_lines, refusal
from parley.models import Membership


class Command(BaseCommand):
    help = (
        "Invite an e-mail address to an organisation in a role. The link is e-mailed and printed (last "
        "line); an earlier open invitation to the address stops working."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the organisation's slug")
        parser.add_argument("email", help="the address to invite")
        parser.add_argument("--role", required=True, choices=Membership.Role.values, help="the role they get")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = selectors.tenant_by_slug(options["slug"])
        if tenant is None:
            raise CommandError(
                f"No organisation has the slug {options['slug']!r}; create_organisation opens one."
            )
        try:
            issued = services.invitation_create(
                tenant=tenant,
                email=options["email"],
                role=options["role"],
                user=None,
                origin=settings.PUBLIC_BASE_URL,
            )
        except ValidationError as exc:
            raise refusal(exc) from exc
        for line in invitation_lines(issued):
            self.stdout.write(line)
