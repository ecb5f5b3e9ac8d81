"""``manage.py create_organisation <slug> --name … --owner-email …``: open an organisation (a tenant)
for an operator who scripts it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_email
from django.db import transaction

from parley import selectors, services
from parley.management.commands._tenancy import invitation_lines, refusal
from parley.models import Membership


class Command(BaseCommand):
    help = (
        "Create an organisation. Its owner is the account that has confirmed --owner-email, or, when "
        "none has, whoever accepts the owner's invitation this prints (and e-mails): by signing up, or "
        "by logging in to an account with the address from the link, which confirms it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="its address in URLs: lower-case letters, digits and hyphens")
        parser.add_argument("--name", required=True, help="its name, as members see it")
        parser.add_argument("--owner-email", required=True, help="the e-mail address of its first owner")

    def handle(self, *args: Any, **options: Any) -> None:
        email = options["owner_email"].strip()
        try:
            validate_email(email)
        except ValidationError as exc:
            raise CommandError(f"--owner-email {email!r} is not an e-mail address.") from exc
        accounts = selectors.accounts_by_address(email)
        if len(accounts) > 1:
            names = ", ".join(a.get_username() for a in accounts)
            raise CommandError(f"Several accounts have the address {email} ({names}): none was chosen.")
        owner = accounts[0] if accounts else None
        try:
            with transaction.atomic():
                tenant = services.tenant_create(slug=options["slug"], name=options["name"], owner=owner)
                issued = None
                if owner is None:
                    issued = services.invitation_create(
                        tenant=tenant,
                        email=email,
                        role=Membership.Role.OWNER,
                        user=None,
                        origin=settings.PUBLIC_BASE_URL,
                    )
        except ValidationError as exc:
            raise refusal(exc) from exc
        self.stdout.write(f"Created the organisation {tenant.slug} ({tenant.name}).")
        if owner is not None:
            self.stdout.write(f"Its owner is {owner.get_username()} ({email}).")
        else:
            assert issued is not None
            self.stdout.write(
                f"No account has confirmed the address {email}: its owner is whoever accepts this "
                "invitation, signing up from the link, or logging in from it to an account with the "
                "address (which confirms it)."
            )
            for line in invitation_lines(issued):
                self.stdout.write(line)
