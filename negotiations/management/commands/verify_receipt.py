"""``manage.py verify_receipt RECEIPT --jwks FILE [--jwks FILE]``: check a settlement receipt offline.

A third party's check (docs/settlement-signatures.md#receipts) with nothing but
the receipt and the parties' public key sets, as files: no network, no
database. Each signature is checked with the key of its ``kid`` found in any
of the key sets given (a ``kid`` is the key's RFC 7638 thumbprint, so it names
that key alone). Prints whether each side's signature holds; exits non-zero
when the receipt does not hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from negotiations import receipts


def read_json(path: str, what: str) -> Any:
    """The JSON in the file at ``path``; CommandError naming ``what`` when it cannot be read."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CommandError(f"The {what} {path} cannot be read as JSON: {exc}") from exc


class Command(BaseCommand):
    help = "Check a settlement receipt offline against the parties' JSON Web Key Sets, given as files."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("receipt", help="the receipt, a JSON file")
        parser.add_argument(
            "--jwks",
            action="append",
            default=[],
            required=True,
            help="a party's JSON Web Key Set, a JSON file (give one per party)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        document = read_json(options["receipt"], "receipt")
        keys: list[Any] = []
        for path in options["jwks"]:
            key_set = read_json(path, "key set")
            found = key_set.get("keys") if isinstance(key_set, dict) else None
            if not isinstance(found, list):
                raise CommandError(f'The key set {path} has no keys: a JWKS is {{"keys": [...]}}.')
            keys.extend(found)
        try:
            check = receipts.verify_receipt(document, lambda url: keys)
        except receipts.ReceiptError as exc:
            raise CommandError(str(exc)) from exc
        for role, why in check.signatures.items():
            self.stdout.write(f"{role}: {'holds' if why is None else why}")
        if not check.valid:
            raise CommandError(check.reason)
        self.stdout.write(self.style.SUCCESS(check.reason))
