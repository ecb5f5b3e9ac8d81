"""How django-allauth's accounts (sign-up, e-mail verification, password reset, login) fit Parley:
who may sign up, and an invitation that a visitor signs up from.

The invitation page (:class:`parley.organisation_views.InvitationView`) remembers
the invitation in the visitor's session and stashes its address as verified
(the link reached them at it). Signing up with that address then needs no
confirmation e-mail, and the new account joins the tenant at once.
"""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.forms import LoginForm as AllauthLoginForm
from allauth.account.forms import ResetPasswordForm as AllauthResetPasswordForm
from allauth.account.forms import SignupForm as AllauthSignupForm
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, User
from django.forms import BaseForm
from django.http import HttpRequest

from parley import services
from parley.models import Invitation, Membership

# The session key of the invitation a visitor opened (its pk), for sign-up to accept it.
INVITATION_SESSION_KEY = "parley_invitation"


def invitation_remember(request: HttpRequest, invitation: Invitation) -> None:
    """Remember ``invitation`` for this visitor's sign-up, its address as verified (allauth's stash)."""
    request.session[INVITATION_SESSION_KEY] = invitation.pk
    AccountAdapter(request).stash_verified_email(request, invitation.email)


def welcome(request: HttpRequest, membership: Membership) -> None:
    """Tell the user, as a message on their next page, that they joined ``membership``'s tenant."""
    role = membership.get_role_display().lower()
    messages.success(request, f"Welcome to {membership.tenant.name}: you joined as {role}.")


def _remembered(request: HttpRequest) -> Invitation | None:
    pk = request.session.get(INVITATION_SESSION_KEY)
    if pk is None:
        return None
    invitation: Invitation | None = Invitation.objects.select_related("tenant").filter(pk=pk).first()
    return invitation


class AccountAdapter(DefaultAccountAdapter):
    """Sign-up is open when ``SIGNUP_OPEN`` is (``ACCOUNT_SIGNUP_ENABLED``), to a visitor who opened
    an open invitation, and to the first account of a deployment; an account signed up with the
    address of the invitation its visitor opened joins that tenant."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        if super().is_open_for_signup(request):
            return True
        invitation = _remembered(request)
        if invitation is not None and invitation.status == Invitation.Status.PENDING:
            return True
        return not get_user_model().objects.exists()

    def save_user(
        self, request: HttpRequest, user: AbstractBaseUser, form: BaseForm, commit: bool = True
    ) -> AbstractBaseUser:
        saved = super().save_user(request, user, form, commit)
        invitation = _remembered(request)
        if not commit or invitation is None or not isinstance(saved, User):
            return saved
        if invitation.email.lower() != saved.email.lower():
            return saved  # signed up with another address: the link stays to be used by its own
        try:
            membership = services.invitation_accept(invitation=invitation, user=saved)
        except services.InvitationUnusable as exc:
            messages.warning(request, " ".join(exc.messages))
        else:
            del request.session[INVITATION_SESSION_KEY]
            welcome(request, membership)
        return saved


def _labelled_only(form: BaseForm) -> None:
    """Drop allauth's placeholders, which repeat the labels (and vanish as one types)."""
    for field in form.fields.values():
        field.widget.attrs.pop("placeholder", None)


class LoginForm(AllauthLoginForm):
    """allauth's login form, its login field labelled for what it takes and focused on arrival; the
    password reset link follows the form (not between the fields, where it would take a Tab)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _labelled_only(self)
        self.fields["password"].help_text = ""
        field = self.fields["login"]
        field.label = "Username or e-mail"
        field.widget.attrs.update(autofocus=True, autocomplete="username")


class SignupForm(AllauthSignupForm):
    """allauth's sign-up form in the dashboard's words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _labelled_only(self)
        self.fields["email"].label = "E-mail"


class ResetPasswordForm(AllauthResetPasswordForm):
    """allauth's form asking for the address to send a password reset link to, in the dashboard's words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _labelled_only(self)
        self.fields["email"].label = "E-mail"
