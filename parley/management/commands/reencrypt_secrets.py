"""``manage.py reencrypt_secrets``: re-encrypt every stored secret with the first key of
FIELD_ENCRYPTION_KEYS, for key rotation (:func:`parley.encryption.reencrypt_all`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from parley.encryption import reencrypt_all


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret with the first key of FIELD_ENCRYPTION_KEYS, so that the "
        "later keys can be dropped; one line per column: values re-encrypted, values already under "
        "the first key. Running it again changes nothing. Fails, naming the columns, when some value "
        "opens with no key of the list."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        done = reencrypt_all()
        for column in done:
            line = (
                f"{column.label}: {column.reencrypted} re-encrypted, "
                f"{column.current} already under the first key"
            )
            if column.unreadable:
                line += f", {column.unreadable} opened by no key"
            self.stdout.write(line)
        unreadable = [column.label for column in done if column.unreadable]
        if unreadable:
            raise CommandError(
                f"Some values open with no key of FIELD_ENCRYPTION_KEYS, in {', '.join(unreadable)}: "
                "put back the key they were encrypted with and run this again."
            )
        total = sum(column.reencrypted for column in done)
        self.stdout.write(f"{total} values re-encrypted; every secret is now under the first key.")
