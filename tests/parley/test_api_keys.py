"""Tenant API keys: issued once, stored as a keyed hash, authenticated in constant time, revocable;
and the owners' page that manages them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from parley import services
from parley.models import ApiKey, Membership, Tenant
from tests.parley.tenancy import member, tenancy_rows


def issue(
    tenant: Tenant, user: AbstractUser, name: str = "billing", scopes: Any = ("read",)
) -> tuple[ApiKey, str]:
    return services.api_key_create(tenant=tenant, name=name, scopes=scopes, user=user)  # type: ignore[arg-type]


class TestCreate:
    def test_the_key_is_prefix_dot_secret_and_only_a_hash_is_stored(
        self, tenant: Tenant, owner: AbstractUser
    ) -> None:
        key, shown = issue(tenant, owner, name="  billing backend ", scopes=["admin", "read"])

        prefix, _, secret = shown.partition(".")
        assert prefix == key.prefix
        assert len(prefix) == 12
        assert set(prefix) <= set("0123456789abcdef")
        assert len(secret) >= 43
        row = ApiKey.across_tenants.filter(pk=key.pk).values().get()
        assert row["tenant_id"] == tenant.pk
        assert row["name"] == "billing backend"
        assert row["scopes"] == ["read", "admin"]
        assert row["created_by_id"] == owner.pk
        assert row["secret_hash"].startswith("hmac-sha256$")
        assert (row["revoked_at"], row["last_used_at"]) == (None, None)
        for value in row.values():
            assert secret not in str(value)
            assert shown not in str(value)

    def test_two_keys_differ(self, tenant: Tenant, owner: AbstractUser) -> None:
        (first, shown_first), (second, shown_second) = issue(tenant, owner), issue(tenant, owner)

        assert first.prefix != second.prefix
        assert shown_first.partition(".")[2] != shown_second.partition(".")[2]
        assert first.secret_hash != second.secret_hash

    @pytest.mark.parametrize(
        ("name", "scopes", "errors"),
        [
            ("ci", [], {"scopes": ["Choose at least one scope."]}),
            ("ci", ["read", "root"], {"scopes": ["Unknown scope: root. Scopes are read, write and admin."]}),
            ("ci", ["read", "read"], {"scopes": ["A scope is listed twice."]}),
            ("   ", ["read"], {"name": ["This field cannot be blank."]}),
            ("x" * 201, ["read"], {"name": ["Ensure this value has at most 200 characters (it has 201)."]}),
        ],
    )
    def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
        self, tenant: Tenant, owner: AbstractUser, name: str, scopes: list[str], errors: dict[str, list[str]]
    ) -> None:
        with pytest.raises(ValidationError) as refused:
            issue(tenant, owner, name=name, scopes=scopes)

        assert refused.value.message_dict == errors
        assert not ApiKey.across_tenants.exists()

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_only_an_owner_may_issue_one(self, tenant: Tenant, role: str) -> None:
        someone = member(tenant, "sam", role)

        with pytest.raises(services.NotAllowed, match=r"^Only an owner of this tenant"):
            issue(tenant, someone)
        assert not ApiKey.across_tenants.exists()

    def test_an_owner_of_another_tenant_may_not_issue_one_here(
        self, tenant: Tenant, other_tenant: Tenant
    ) -> None:
        theirs = member(other_tenant, "gus", Membership.Role.OWNER)

        with pytest.raises(services.NotAllowed):
            issue(tenant, theirs)
        assert not ApiKey.across_tenants.exists()


class TestAuthenticate:
    def test_the_key_as_shown_authenticates_with_its_tenant(
        self, tenant: Tenant, other_tenant: Tenant, owner: AbstractUser
    ) -> None:
        member(other_tenant, "gus", Membership.Role.OWNER)
        key, shown = issue(tenant, owner)

        found = services.api_key_authenticate(shown)

        assert found is not None
        assert (found.pk, found.tenant.slug) == (key.pk, "acme")
        stored = ApiKey.across_tenants.get(pk=key.pk)
        assert stored.last_used_at is not None
        assert found.last_used_at == stored.last_used_at

    def test_a_wrong_secret_or_an_unknown_prefix_is_none(self, tenant: Tenant, owner: AbstractUser) -> None:
        key, shown = issue(tenant, owner)
        _, other_shown = issue(tenant, owner)
        secret = shown.partition(".")[2]

        assert services.api_key_authenticate(f"{key.prefix}.{secret[:-1]}") is None
        assert services.api_key_authenticate(f"{key.prefix}.{other_shown.partition('.')[2]}") is None
        assert services.api_key_authenticate(f"{'0' * 12}.{secret}") is None
        assert ApiKey.across_tenants.filter(last_used_at__isnull=False).count() == 0

    def test_a_revoked_key_is_none(self, tenant: Tenant, owner: AbstractUser) -> None:
        key, shown = issue(tenant, owner)
        services.api_key_revoke(key=key, user=owner)

        assert services.api_key_authenticate(shown) is None

    @pytest.mark.parametrize(
        "raw",
        [
            "",
            ".",
            "nodot",
            "{prefix}",
            "{prefix}.",
            ".{secret}",
            "{upper}.{secret}",
            "{prefix}\n.{secret}",
            " {prefix}.{secret}",
            "{prefix}.{secret}" + "x" * 200,
            None,
            b"{prefix}.{secret}",
            42,
        ],
    )
    def test_malformed_input_is_none(self, tenant: Tenant, owner: AbstractUser, raw: Any) -> None:
        key, shown = issue(tenant, owner, name="ci")
        secret = shown.partition(".")[2]
        fill = {"prefix": key.prefix, "secret": secret, "upper": key.prefix.upper()}
        if isinstance(raw, str):
            raw = raw.format(**fill)
        elif isinstance(raw, bytes):
            raw = raw.decode().format(**fill).encode()

        assert services.api_key_authenticate(raw) is None
        assert ApiKey.across_tenants.get(pk=key.pk).last_used_at is None

    def test_last_used_is_written_at_most_once_a_minute(self, tenant: Tenant, owner: AbstractUser) -> None:
        key, shown = issue(tenant, owner)
        services.api_key_authenticate(shown)
        first = ApiKey.across_tenants.get(pk=key.pk).last_used_at
        assert first is not None

        again = services.api_key_authenticate(shown)

        assert again is not None
        assert again.last_used_at == first
        assert ApiKey.across_tenants.get(pk=key.pk).last_used_at == first

        a_while_ago = timezone.now() - timedelta(minutes=2)
        ApiKey.across_tenants.filter(pk=key.pk).update(last_used_at=a_while_ago)
        later = services.api_key_authenticate(shown)

        assert later is not None
        assert later.last_used_at is not None
        assert later.last_used_at > a_while_ago
        assert ApiKey.across_tenants.get(pk=key.pk).last_used_at == later.last_used_at


class TestRevoke:
    def test_revoking_records_when_and_who_and_again_keeps_the_first(
        self, tenant: Tenant, owner: AbstractUser
    ) -> None:
        other_owner = member(tenant, "otto", Membership.Role.OWNER)
        key, _ = issue(tenant, owner)

        services.api_key_revoke(key=key, user=owner)
        first = ApiKey.across_tenants.get(pk=key.pk)
        assert first.revoked_at is not None
        assert first.revoked_by_id == owner.pk

        services.api_key_revoke(key=key, user=other_owner)

        again = ApiKey.across_tenants.get(pk=key.pk)
        assert (again.revoked_at, again.revoked_by_id) == (first.revoked_at, owner.pk)

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_only_an_owner_may_revoke(self, tenant: Tenant, owner: AbstractUser, role: str) -> None:
        key, shown = issue(tenant, owner)
        someone = member(tenant, "sam", role)

        with pytest.raises(services.NotAllowed):
            services.api_key_revoke(key=key, user=someone)
        assert ApiKey.across_tenants.get(pk=key.pk).revoked_at is None
        assert services.api_key_authenticate(shown) is not None


# The page.


def keys_url(tenant: Tenant | str = "acme") -> str:
    return reverse("tenant:api-keys", kwargs={"tenant": getattr(tenant, "slug", tenant)})


def revoke_url(key: ApiKey, tenant: str = "acme") -> str:
    return reverse("tenant:api-key-revoke", kwargs={"tenant": tenant, "pk": key.pk})


class TestPage:
    def test_an_owner_sees_the_keys_revoked_ones_too(
        self, client: Client, tenant: Tenant, owner: AbstractUser
    ) -> None:
        live, _ = issue(tenant, owner, name="billing", scopes=["read", "write"])
        gone, _ = issue(tenant, owner, name="old ci", scopes=["admin"])
        services.api_key_revoke(key=gone, user=owner)
        client.force_login(owner)

        page = client.get(keys_url()).content.decode()

        assert "<h1>API keys</h1>" in page
        assert f'<tr id="api-key-{live.pk}">' in page
        assert f"<code>{live.prefix}</code>" in page
        assert "<td>read, write</td>" in page
        row = page.split(f'<tr id="api-key-{gone.pk}">')[1].split("</tr>")[0]
        assert '<span class="badge status-revoked">revoked</span>' in row
        assert "by ona" in row
        assert "Revoke" not in row
        assert revoke_url(live) in page

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_other_roles_get_403(self, client: Client, tenant: Tenant, role: str) -> None:
        client.force_login(member(tenant, "sam", role))

        assert client.get(keys_url()).status_code == 403
        assert client.post(keys_url(), {"name": "x", "scopes": ["read"]}).status_code == 403
        assert not ApiKey.across_tenants.exists()

    def test_a_non_member_gets_404(self, client: Client, owner: AbstractUser, other_tenant: Tenant) -> None:
        client.force_login(owner)

        assert client.get(keys_url(other_tenant)).status_code == 404
        assert client.post(keys_url(other_tenant), {"name": "x", "scopes": ["read"]}).status_code == 404
        assert not ApiKey.across_tenants.exists()

    def test_creating_shows_the_key_once_in_the_response_only(
        self, client: Client, tenant: Tenant, owner: AbstractUser
    ) -> None:
        client.force_login(owner)

        response = client.post(keys_url(), {"name": "billing", "scopes": ["write", "read"]})

        assert response.status_code == 200
        key = ApiKey.across_tenants.get()
        assert (key.name, key.scopes) == ("billing", ["read", "write"])
        page = response.content.decode()
        shown = page.split('id="new-key-value" type="text" readonly value="')[1].split('"')[0]
        assert shown.startswith(f"{key.prefix}.")
        assert page.count(shown) == 1
        assert "no-store" in response["Cache-Control"]
        assert services.api_key_authenticate(shown) is not None
        secret = shown.partition(".")[2]
        # Nowhere to be found again: not on the page, not in the session or the messages cookie.
        assert secret not in client.get(keys_url()).content.decode()
        assert secret not in str(client.session.items())
        assert all(secret not in morsel.value for morsel in client.cookies.values())

    def test_an_htmx_post_gets_the_region_with_the_key(
        self, client: Client, tenant: Tenant, owner: AbstractUser
    ) -> None:
        client.force_login(owner)

        response = client.post(keys_url(), {"name": "ci", "scopes": ["read"]}, headers={"HX-Request": "true"})

        page = response.content.decode()
        assert page.startswith('<div id="api-keys">')
        assert "<html" not in page
        assert f'value="{ApiKey.across_tenants.get().prefix}.' in page
        assert "no-store" in response["Cache-Control"]

    def test_a_key_without_scopes_is_refused_at_the_field(
        self, client: Client, tenant: Tenant, owner: AbstractUser
    ) -> None:
        client.force_login(owner)

        response = client.post(keys_url(), {"name": "ci"})

        assert response.status_code == 200
        assert response.context["form"].errors == {"scopes": ["Choose at least one scope."]}
        page = response.content.decode()
        assert "No key was created" in page
        assert 'id="new-key-value"' not in page
        assert not ApiKey.across_tenants.exists()

    def test_revoking_asks_first_then_revokes_and_the_key_stays_listed(
        self, client: Client, tenant: Tenant, owner: AbstractUser
    ) -> None:
        key, shown = issue(tenant, owner, name="billing")
        client.force_login(owner)

        confirm = client.get(revoke_url(key)).content.decode()
        assert "<h1>Revoke the key billing?</h1>" in confirm
        assert "is refused from the moment you revoke it" in confirm
        assert ApiKey.across_tenants.get(pk=key.pk).revoked_at is None

        response = client.post(revoke_url(key), follow=True)

        assert response.redirect_chain == [(keys_url(), 302)]
        page = response.content.decode()
        assert f"The key billing ({key.prefix}) is revoked; it no longer works." in page
        assert f'<tr id="api-key-{key.pk}">' in page
        assert ApiKey.across_tenants.get(pk=key.pk).revoked_by_id == owner.pk
        assert services.api_key_authenticate(shown) is None

    def test_revoking_a_revoked_key_says_so_and_changes_nothing(
        self, client: Client, tenant: Tenant, owner: AbstractUser
    ) -> None:
        key, _ = issue(tenant, owner, name="billing")
        services.api_key_revoke(key=key, user=owner)
        client.force_login(owner)
        before = tenancy_rows()

        confirm = client.get(revoke_url(key)).content.decode()
        response = client.post(revoke_url(key), follow=True)

        assert "was revoked on" in confirm
        assert 'class="danger"' not in confirm
        assert f"The key billing ({key.prefix}) was already revoked." in response.content.decode()
        assert tenancy_rows() == before

    def test_another_tenants_key_is_404_and_stays_live(
        self, client: Client, tenant: Tenant, other_tenant: Tenant, owner: AbstractUser
    ) -> None:
        gus = member(other_tenant, "gus", Membership.Role.OWNER)
        theirs, shown = issue(other_tenant, gus)
        client.force_login(owner)
        before = tenancy_rows()

        assert client.get(revoke_url(theirs)).status_code == 404
        assert client.post(revoke_url(theirs)).status_code == 404
        assert tenancy_rows() == before
        assert services.api_key_authenticate(shown) is not None

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_other_roles_cannot_revoke(
        self, client: Client, tenant: Tenant, owner: AbstractUser, role: str
    ) -> None:
        key, _ = issue(tenant, owner)
        client.force_login(member(tenant, "sam", role))
        before = tenancy_rows()

        assert client.get(revoke_url(key)).status_code == 403
        assert client.post(revoke_url(key)).status_code == 403
        assert tenancy_rows() == before
