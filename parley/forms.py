"""Dashboard forms of tenancy: they parse what an owner typed; :mod:`parley.services` judges it."""

from __future__ import annotations

from django import forms
from django.contrib.auth.models import User

from parley.models import ApiKey, Membership
from parley.selectors import accounts_by_login


class MemberAddForm(forms.Form):
    """An existing account, by username or e-mail, and the role to give it; ``cleaned_data["account"]``
    is the :class:`User`."""

    account = forms.CharField(
        label="Username or e-mail",
        max_length=254,
        strip=True,
        error_messages={"required": "Give the username or e-mail of the account to add."},
    )
    role = forms.ChoiceField(choices=Membership.Role.choices)

    def clean_account(self) -> User:
        login = self.cleaned_data["account"]
        accounts = accounts_by_login(login)
        if not accounts:
            raise forms.ValidationError(
                "No account has this username or e-mail: create a new account below instead."
            )
        if len(accounts) > 1:
            raise forms.ValidationError("Several accounts match this: give the exact username instead.")
        return accounts[0]


class MemberCreateForm(forms.Form):
    """A new account (username, e-mail, password) and its role; the service validates the password."""

    username = forms.CharField(max_length=150, strip=True, help_text="Letters, digits and @ . + - _ only.")
    email = forms.EmailField(label="E-mail", max_length=254)
    password = forms.CharField(
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="Tell it to them yourself; they can change it later.",
    )
    role = forms.ChoiceField(choices=Membership.Role.choices)


class MemberRoleForm(forms.Form):
    """A member's new role."""

    role = forms.ChoiceField(
        choices=Membership.Role.choices,
        error_messages={"required": "Choose a role.", "invalid_choice": "Choose a role from the list."},
    )


class ApiKeyForm(forms.Form):
    """A new API key: what uses it, and what it may do."""

    name = forms.CharField(max_length=200, strip=True, help_text="What will use it, e.g. “billing backend”.")
    scopes = forms.MultipleChoiceField(
        choices=ApiKey.Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one scope."},
    )
