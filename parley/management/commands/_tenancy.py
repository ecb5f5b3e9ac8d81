"""What the tenancy commands share: a refusal as a CommandError, an invitation as printed."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from parley.services import IssuedInvitation


def refusal(exc: ValidationError) -> CommandError:
    """``exc`` as a command's error, each message after what it is about (``--slug: …``)."""
    if hasattr(exc, "error_dict"):
        lines = [f"{field}: {' '.join(m)}" for field, m in exc.message_dict.items()]
        return CommandError("; ".join(lines))
    return CommandError(" ".join(exc.messages))


def invitation_lines(issued: IssuedInvitation) -> list[str]:
    """What a command prints for an invitation: what it is and whether it was e-mailed, then the link
    alone on the last line (``| tail -1`` gives it to a script)."""
    invitation = issued.invitation
    mail = "e-mailed" if issued.mailed else f"the e-mail was not sent ({issued.mail_error or 'no mail'})"
    place = f" in place of {invitation.for_member.user.get_username()}" if invitation.for_member else ""
    return [
        f"Invited {invitation.email} to {invitation.tenant.slug} ({invitation.tenant.name}) as "
        f"{invitation.role}{place}, until {invitation.expires_at:%Y-%m-%d %H:%M} UTC; {mail}. The link:",
        issued.link,
    ]
