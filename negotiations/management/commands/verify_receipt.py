"""``manage.py verify_receipt RECEIPT --jwks URL=FILE [--jwks URL=FILE]``: check a settlement receipt offline.

A third party's check (docs/settlement-signatures.md#receipts) with nothing but
the receipt and the parties' public key sets, as files: no network, no
database. Each file is given for the key set URL it was saved from (the
``jwks`` a party of the settlement names), and a side's signature is checked
only with the keys of its own party's file, so one party's keys never vouch for
the other's. Prints whether each side's signature holds; exits non-zero when
the receipt does not hold.
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
            metavar="URL=FILE",
            help="a party's key set URL as the receipt names it, and the file its JSON Web Key Set was "
            "saved to (give one per party)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        document = read_json(options["receipt"], "receipt")
        key_sets: dict[str, list[Any]] = {}
        for given in options["jwks"]:
            url, sep, path = given.rpartition("=")
            if not sep or not url or not path:
                raise CommandError(
                    f"--jwks {given!r} is not URL=FILE: name the key set URL the file was saved from."
                )
            key_set = read_json(path, "key set")
            found = key_set.get("keys") if isinstance(key_set, dict) else None
            if not isinstance(found, list):
                raise CommandError(f'The key set {path} has no keys: a JWKS is {{"keys": [...]}}.')
            key_sets[url] = found

        def keys_for(url: str) -> list[Any]:
            if url not in key_sets:
                raise receipts.ReceiptError(f"No key set file was given for {url} (--jwks {url}=FILE).")
            return key_sets[url]

        try:
            check = receipts.verify_receipt(document, keys_for)
        except receipts.ReceiptError as exc:
            raise CommandError(str(exc)) from exc
        for role, why in check.signatures.items():
            self.stdout.write(f"{role}: {'holds' if why is None else why}")
        if not check.valid:
            raise CommandError(check.reason)
        self.stdout.write(self.style.SUCCESS(check.reason))
