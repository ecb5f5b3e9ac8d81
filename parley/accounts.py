"""How django-allauth's accounts (sign-up, e-mail verification, password reset, login) fit Parley:
who may sign up, and an invitation that a visitor signs up or logs in from.

An invitation link is for its address: it is e-mailed there (and shown once to
the owner who invited that address), so opening it shows the address is the
visitor's, as allauth's own confirmation link does. The invitation page
(:class:`parley.organisation_views.InvitationView`) remembers the open
invitation in the visitor's session and stashes its address as verified. Then:

* sign-up takes that address only (the form's e-mail is fixed to it), needs no
  confirmation e-mail, and the new account joins the tenant at once; an account
  signed up with any other address (the invitation expired meanwhile, say) never
  gets the stashed address recorded as confirmed;
* an account that has the address unconfirmed and logs in from that session gets
  it confirmed (:class:`InvitedAddressStage`), instead of being sent to confirm it
  by another e-mail to the same inbox, and joins from the link.
"""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.forms import LoginForm as AllauthLoginForm
from allauth.account.forms import ResetPasswordForm as AllauthResetPasswordForm
from allauth.account.forms import SignupForm as AllauthSignupForm
from allauth.account.stages import LoginStage
from allauth.account.utils import user_email
from allauth.account.views import SignupView as AllauthSignupView
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, User
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse

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


def remembered_invitation(request: HttpRequest) -> Invitation | None:
    """The invitation this visitor opened (:func:`invitation_remember`) while it is still open (pending),
    with its tenant; else None."""
    pk = request.session.get(INVITATION_SESSION_KEY)
    if pk is None:
        return None
    # The visitor does not belong to the invitation's tenant yet: the invitation is what finds it.
    invitation: Invitation | None = Invitation.across_tenants.select_related("tenant").filter(pk=pk).first()
    if invitation is None or invitation.status != Invitation.Status.PENDING:
        return None
    return invitation


class AccountAdapter(DefaultAccountAdapter):
    """Sign-up is open when ``SIGNUP_OPEN`` is (``ACCOUNT_SIGNUP_ENABLED``), to a visitor who opened
    an open invitation, and to the first account of a deployment; an account signed up with the
    address of the invitation its visitor opened joins that tenant. A login from that visitor's
    session passes :class:`InvitedAddressStage` before allauth's own stages."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        if super().is_open_for_signup(request):
            return True
        if remembered_invitation(request) is not None:
            return True
        return not get_user_model().objects.exists()

    def get_login_stages(self) -> list[str]:
        return [f"{__name__}.{InvitedAddressStage.__name__}", *super().get_login_stages()]

    def save_user(
        self, request: HttpRequest, user: AbstractBaseUser, form: BaseForm, commit: bool = True
    ) -> AbstractBaseUser:
        saved = super().save_user(request, user, form, commit)
        # allauth records a stashed address as confirmed for whoever signs up next; only an account
        # signed up with that very address has shown it is theirs.
        stashed = self.unstash_verified_email(request)
        if stashed and stashed.lower() == (user_email(saved) or "").lower():
            self.stash_verified_email(request, stashed)
        invitation = remembered_invitation(request)
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


class InvitedAddressStage(LoginStage):
    """A login stage, before allauth's e-mail verification: an account logging in from the session
    that opened an open invitation gets the invitation's address confirmed, when it has that address
    unconfirmed (:func:`parley.services.invited_address_confirm`; the module docstring says why)."""

    key = "parley_invited_address"

    def handle(self) -> tuple[HttpResponse | None, bool]:
        invitation = remembered_invitation(self.request)
        user = self.login.user
        if invitation is not None and isinstance(user, User) and not self.login.signup:
            services.invited_address_confirm(invitation=invitation, user=user)
        return None, True


class SignupForm(AllauthSignupForm):
    """allauth's sign-up form in the dashboard's words. Given the ``invitation`` its visitor opened,
    the e-mail is that invitation's, fixed: the link is for its address."""

    def __init__(self, *args: Any, invitation: Invitation | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _labelled_only(self)
        email = self.fields["email"]
        email.label = "E-mail"
        if invitation is not None:
            email.initial = invitation.email
            email.disabled = True
            email.help_text = (
                f"The invitation to {invitation.tenant.name} is for this address. To join with another, "
                "ask whoever invited you to invite that one."
            )


class SignupView(AllauthSignupView):
    """allauth's sign-up page, which hands its form the open invitation the visitor opened, if any."""

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_form_kwargs()
        kwargs["invitation"] = remembered_invitation(self.request)
        return kwargs


class ResetPasswordForm(AllauthResetPasswordForm):
    """allauth's form asking for the address to send a password reset link to, in the dashboard's words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _labelled_only(self)
        self.fields["email"].label = "E-mail"
