"""Where this Parley's e-mail goes, for whoever just had one sent (a newcomer on the embedded default
reads it there, not in a mailbox)."""

from __future__ import annotations

from django.conf import settings

FILE_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
CONSOLE_BACKEND = "django.core.mail.backends.console.EmailBackend"


def local_mail_note() -> str:
    """A sentence saying where e-mail goes when this Parley keeps it locally (files in a folder, or its
    console), or "" when it sends e-mail."""
    if settings.EMAIL_BACKEND == FILE_BACKEND:
        return (
            "This Parley does not send e-mail: it writes each message to a file in "
            f"{settings.EMAIL_FILE_PATH}. Open the newest file there."
        )
    if settings.EMAIL_BACKEND == CONSOLE_BACKEND:
        return "This Parley does not send e-mail: it prints each message on its console, where it runs."
    return ""
