"""Secrets at rest: model fields stored encrypted under the keys of ``settings.FIELD_ENCRYPTION_KEYS``.

Each value is a Fernet token (the ``cryptography`` package's MultiFernet over the keys; Fernet
spec: AES-128-CBC with a random IV, authenticated with HMAC-SHA256, 32-byte url-safe base64 keys).
A new value is encrypted with the first key; a stored one is read with whichever key of the list
opens it, so keys rotate: put a new key first, keep the old ones after it, run
``manage.py reencrypt_secrets`` (:func:`reencrypt_all`), then drop the old ones.

A value no key opens raises :class:`SecretUnreadable`; it is never passed on as if it were the
secret. The column holds the token (text); a :class:`EncryptedCharField`'s ``max_length`` bounds
the secret, as the forms and serializers check it. Stored values can be compared with None
alone: any other lookup raises :class:`~django.core.exceptions.FieldError` (an equal secret
never encrypts to the same token).

Why not django-fernet-encrypted-fields or django-encrypted-model-fields: both hand back the
stored token as the value when no key opens it (a webhook would be signed with the ciphertext),
the first derives its keys from ``SECRET_KEY`` (rotating Django's key would lose every secret),
saves "" as NULL and encrypts a JSON value leaf by leaf as strings; the second reads its keys
once at import and was last released in 2022.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps as global_apps
from django.conf import settings
from django.core.exceptions import FieldError
from django.db import migrations, models, transaction
from django.db.models.functions import Cast
from django.db.models.lookups import Exact

# Rows read and rewritten per transaction by reencrypt_all and the migrations' encrypt step.
BATCH = 500


class SecretUnreadable(Exception):
    """A stored value that no key of FIELD_ENCRYPTION_KEYS opens (or that is no token at all)."""


@functools.lru_cache(maxsize=8)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def fernet() -> MultiFernet:
    """The MultiFernet of ``settings.FIELD_ENCRYPTION_KEYS`` as they are now (first key encrypts)."""
    return _fernet(tuple(settings.FIELD_ENCRYPTION_KEYS))


def encrypt(plaintext: str) -> str:
    """``plaintext`` as a Fernet token (ASCII) under the first key."""
    return fernet().encrypt(plaintext.encode()).decode("ascii")


def decrypt(token: str, *, where: str = "a value") -> str:
    """The plaintext of ``token``; raises :class:`SecretUnreadable` naming ``where`` if no key opens it."""
    try:
        return fernet().decrypt(token.encode()).decode()
    except (InvalidToken, UnicodeError) as exc:
        raise SecretUnreadable(
            f"{where} cannot be decrypted with any key of FIELD_ENCRYPTION_KEYS "
            "(was it encrypted with a key since removed from the list?)"
        ) from exc


class _NoneOnly(Exact):
    """``field=None`` (IS NULL, as Django turns it); any other value raises :class:`FieldError`."""

    def get_prep_lookup(self) -> Any:
        if self.rhs is not None:
            raise FieldError(
                f"{self.lhs.output_field} is stored encrypted: it can be compared with None alone."
            )
        return super().get_prep_lookup()


class EncryptedMixin:
    """Stores the field's value as a Fernet token in a text column; reads it back decrypted."""

    def get_internal_type(self) -> str:
        return "TextField"

    def dumps(self, value: Any) -> str:
        """The value as the text that is encrypted."""
        return str(value)

    def loads(self, text: str) -> Any:
        """The value from the decrypted text."""
        return text

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        return self.loads(decrypt(value, where=str(self)))

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)  # type: ignore[attr-defined]
        if value is None or hasattr(value, "as_sql"):
            return value
        return encrypt(self.dumps(value))

    def get_lookup(self, lookup_name: str) -> Any:
        if lookup_name == "exact":
            return _NoneOnly
        if lookup_name == "isnull":
            return super().get_lookup(lookup_name)  # type: ignore[misc]
        return None

    def get_transform(self, lookup_name: str) -> Any:
        return None


class EncryptedCharField(EncryptedMixin, models.CharField):
    """A CharField stored encrypted; ``max_length`` bounds the plaintext (the column is text)."""


class EncryptedTextField(EncryptedMixin, models.TextField):
    """A TextField stored encrypted."""


class EncryptedJSONField(EncryptedMixin, models.Field):
    """A JSON value (dicts, lists, strings, numbers, booleans) stored encrypted as its compact JSON
    text. None is stored as NULL (``null=True`` fields) and reads back as None."""

    def dumps(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    def loads(self, text: str) -> Any:
        return json.loads(text)

    def value_to_string(self, obj: models.Model) -> Any:
        # Serializers (dumpdata) write the JSON value itself, as for a JSONField, not its repr.
        return self.value_from_object(obj)


def encrypted_fields() -> list[tuple[type[models.Model], EncryptedMixin]]:
    """Every concrete model's encrypted fields, as (model, field), in app and model order."""
    return [
        (model, field)
        for model in global_apps.get_models()
        if not model._meta.proxy
        for field in model._meta.concrete_fields
        if isinstance(field, EncryptedMixin)
    ]


@dataclass
class Reencrypted:
    """What :func:`reencrypt_all` did to one column: ``label`` is ``app.Model.field``."""

    label: str
    reencrypted: int
    current: int
    unreadable: int


def _rewrite(model: type[models.Model], field_name: str, change: Callable[[str], str | None]) -> int:
    """Rewrite the column ``field_name`` of every row of ``model`` (read raw, as stored) where
    ``change(stored)`` returns new text; None leaves the row. Batches of :data:`BATCH` rows, each
    locked and written in one transaction. Returns the rows rewritten."""
    manager = model._base_manager
    pks = list(manager.exclude(**{f"{field_name}__isnull": True}).order_by("pk").values_list("pk", flat=True))
    rewritten = 0
    for start in range(0, len(pks), BATCH):
        with transaction.atomic(using=manager.db):
            rows = (
                manager.select_for_update()
                .filter(pk__in=pks[start : start + BATCH])
                .annotate(stored=Cast(field_name, models.TextField()))
                .values_list("pk", "stored")
            )
            for pk, stored in rows:
                new = None if stored is None else change(stored)
                if new is None:
                    continue
                manager.filter(pk=pk).update(
                    **{field_name: models.Value(new, output_field=models.TextField())}
                )
                rewritten += 1
    return rewritten


class _Rotation:
    """``rotation(stored)``: the token re-encrypted with the first key, or None for one the first
    key already opens (counted in ``current``) or no key opens (counted in ``unreadable``)."""

    def __init__(self) -> None:
        self.multi = fernet()
        self.first = Fernet(settings.FIELD_ENCRYPTION_KEYS[0])
        self.current = self.unreadable = 0

    def __call__(self, stored: str) -> str | None:
        token = stored.encode()
        try:
            self.first.decrypt(token)
        except InvalidToken:
            pass
        else:
            self.current += 1
            return None
        try:
            return self.multi.rotate(token).decode("ascii")
        except InvalidToken:
            self.unreadable += 1
            return None


def reencrypt_all() -> list[Reencrypted]:
    """Re-encrypt every stored encrypted value with the first key of FIELD_ENCRYPTION_KEYS, column by
    column (:func:`encrypted_fields`); idempotent. A value the first key already opens is left as it
    is (``current``); one no key opens is left and counted ``unreadable``."""
    done = []
    for model, field in encrypted_fields():
        assert isinstance(field, models.Field)
        rotation = _Rotation()
        rewritten = _rewrite(model, field.attname, rotation)
        done.append(
            Reencrypted(
                label=f"{model._meta.label}.{field.name}",
                reencrypted=rewritten,
                current=rotation.current,
                unreadable=rotation.unreadable,
            )
        )
    return done


def encrypt_existing(*columns: tuple[str, str, str]) -> migrations.RunPython:
    """A migration step that encrypts the plaintext stored in each ``(app_label, model, field)``
    column (already a text column of an encrypted field), and back when reversed (the plaintext
    the column held before: text, or JSON text)."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        for app_label, model_name, field_name in columns:
            _rewrite(apps.get_model(app_label, model_name), field_name, encrypt)

    def backwards(apps: Any, schema_editor: Any) -> None:
        for app_label, model_name, field_name in columns:
            opened = functools.partial(decrypt, where=f"{app_label}.{model_name}.{field_name}")
            _rewrite(apps.get_model(app_label, model_name), field_name, opened)

    return migrations.RunPython(forwards, backwards)
