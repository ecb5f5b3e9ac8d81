"""``manage.py invite <slug> <email> --role …``: invite someone to an organisation, printing the link;
``--for-member <username>`` instead of ``--role``: invite the person a placeholder member stands for."""

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
        "Invite an e-mail address to an organisation in a role, or to take the place of a placeholder "
        "member (--for-member: its role, the agents it answers for and their questions). The link is "
        "e-mailed and printed (last line); an earlier open invitation to the address (or for the "
        "member) stops working."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the organisation's slug")
        parser.add_argument("email", help="the address to invite")
        whom = parser.add_mutually_exclusive_group(required=True)
        whom.add_argument("--role", choices=Membership.Role.values, help="the role they get")
        whom.add_argument(
            "--for-member",
            metavar="USERNAME",
            help="a placeholder member (e.g. lisbon.alice, made by import_scenario) whose place they take",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = selectors.tenant_by_slug(options["slug"])
        if tenant is None:
            raise CommandError(
                f"No organisation has the slug {options['slug']!r}; create_organisation opens one."
            )
        try:
            if options["for_member"] is None:
                issued = services.invitation_create(
                    tenant=tenant,
                    email=options["email"],
                    role=options["role"],
                    user=None,
                    origin=settings.PUBLIC_BASE_URL,
                )
            else:
                member = selectors.member_by_username(tenant=tenant, username=options["for_member"])
                if member is None:
                    raise CommandError(
                        f"--for-member: {tenant.slug} has no member {options['for_member']!r}."
                    )
                issued = services.placeholder_invite(
                    membership=member, email=options["email"], user=None, origin=settings.PUBLIC_BASE_URL
                )
        except ValidationError as exc:
            raise refusal(exc) from exc
        for line in invitation_lines(issued):
            self.stdout.write(line)
