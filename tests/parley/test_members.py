"""Members and roles: the owners' rules (a tenant keeps an owner; an agent's party or intake owner
stays until the agent has someone else) and the members page."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from agents.models import Agent
from parley import services
from parley.models import Membership, Tenant
from tests.parley.tenancy import member, tenancy_rows

User = get_user_model()


def membership(user: AbstractUser, tenant: Tenant | str = "acme") -> Membership:
    slug = getattr(tenant, "slug", tenant)
    return Membership.objects.select_related("user").get(user=user, tenant__slug=slug)


class TestRoleChange:
    def test_an_owner_changes_a_role(
        self, tenant: Tenant, owner: AbstractUser, operator: AbstractUser
    ) -> None:
        changed = services.member_role_change(membership=membership(operator), role="viewer", user=owner)  # type: ignore[arg-type]

        assert changed.role == "viewer"
        assert membership(operator).role == "viewer"

    def test_the_last_owner_cannot_be_demoted(self, tenant: Tenant, owner: AbstractUser) -> None:
        before = tenancy_rows()

        with pytest.raises(ValidationError) as refused:
            services.member_role_change(membership=membership(owner), role="operator", user=owner)  # type: ignore[arg-type]

        assert refused.value.messages == [
            "Cannot demote ona: they are the tenant's last owner. Make another member an owner first."
        ]
        assert tenancy_rows() == before

    def test_of_two_owners_demoting_each_other_the_second_is_refused(
        self, tenant: Tenant, owner: AbstractUser
    ) -> None:
        otto = member(tenant, "otto", Membership.Role.OWNER)

        services.member_role_change(membership=membership(otto), role="operator", user=owner)  # type: ignore[arg-type]
        with pytest.raises(services.NotAllowed):
            services.member_role_change(membership=membership(owner), role="operator", user=otto)  # type: ignore[arg-type]

        assert membership(owner).role == "owner"

    def test_an_owner_may_step_down_while_another_remains(self, tenant: Tenant, owner: AbstractUser) -> None:
        member(tenant, "otto", Membership.Role.OWNER)

        services.member_role_change(membership=membership(owner), role="viewer", user=owner)  # type: ignore[arg-type]

        assert membership(owner).role == "viewer"

    def test_an_agents_party_cannot_become_a_viewer(
        self, tenant: Tenant, owner: AbstractUser, principal: AbstractUser, agent: Agent
    ) -> None:
        Agent.objects.create(tenant=tenant, slug="spare", name="Spare agent", principal=principal)
        before = tenancy_rows()

        with pytest.raises(ValidationError) as refused:
            services.member_role_change(membership=membership(principal), role="viewer", user=owner)  # type: ignore[arg-type]

        assert refused.value.message_dict == {
            "role": [
                "tomas answers for Spare agent, Tomas's agent; a viewer cannot. "
                "Give those agents another party first."
            ]
        }
        assert tenancy_rows() == before

    def test_another_tenants_agents_do_not_count(
        self, tenant: Tenant, other_tenant: Tenant, owner: AbstractUser, principal: AbstractUser
    ) -> None:
        Agent.objects.create(tenant=other_tenant, slug="x", name="Theirs", principal=principal)

        services.member_role_change(membership=membership(principal), role="viewer", user=owner)  # type: ignore[arg-type]

        assert membership(principal).role == "viewer"

    def test_the_same_role_changes_nothing(self, tenant: Tenant, owner: AbstractUser) -> None:
        before = tenancy_rows()

        services.member_role_change(membership=membership(owner), role="owner", user=owner)  # type: ignore[arg-type]

        assert tenancy_rows() == before

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_only_an_owner_may_change_roles(self, tenant: Tenant, owner: AbstractUser, role: str) -> None:
        someone = member(tenant, "sam", role)
        before = tenancy_rows()

        with pytest.raises(services.NotAllowed):
            services.member_role_change(membership=membership(owner), role="viewer", user=someone)  # type: ignore[arg-type]
        with pytest.raises(services.NotAllowed):
            services.member_role_change(membership=membership(someone), role="owner", user=someone)  # type: ignore[arg-type]
        assert tenancy_rows() == before


class TestRemove:
    def test_an_owner_removes_a_member_whose_account_stays(
        self, tenant: Tenant, owner: AbstractUser, viewer: AbstractUser
    ) -> None:
        services.member_remove(membership=membership(viewer), user=owner)  # type: ignore[arg-type]

        assert not Membership.objects.filter(user=viewer).exists()
        assert User.objects.filter(pk=viewer.pk).exists()

    def test_the_last_owner_cannot_be_removed(self, tenant: Tenant, owner: AbstractUser) -> None:
        before = tenancy_rows()

        with pytest.raises(ValidationError) as refused:
            services.member_remove(membership=membership(owner), user=owner)  # type: ignore[arg-type]

        assert refused.value.messages == [
            "Cannot remove ona: they are the tenant's last owner. Make another member an owner first."
        ]
        assert tenancy_rows() == before

    def test_an_agents_party_or_intake_owner_is_refused_naming_the_agents(
        self, tenant: Tenant, owner: AbstractUser, principal: AbstractUser, agent: Agent
    ) -> None:
        Agent.objects.create(tenant=tenant, slug="desk", name="Front desk", intake_owner=principal)
        before = tenancy_rows()

        with pytest.raises(ValidationError) as refused:
            services.member_remove(membership=membership(principal), user=owner)  # type: ignore[arg-type]

        assert refused.value.messages == [
            "tomas is the party of Tomas's agent and the intake owner of Front desk. "
            "Give those agents someone else first, then remove them."
        ]
        assert tenancy_rows() == before
        assert Agent.across_tenants.get(pk=agent.pk).principal_id == principal.pk

    def test_an_intake_owner_alone_is_refused_too(
        self, tenant: Tenant, owner: AbstractUser, operator: AbstractUser
    ) -> None:
        Agent.objects.create(tenant=tenant, slug="desk", name="Front desk", intake_owner=operator)

        with pytest.raises(ValidationError) as refused:
            services.member_remove(membership=membership(operator), user=owner)  # type: ignore[arg-type]

        assert refused.value.messages[0].startswith("olga is the intake owner of Front desk. ")
        assert Membership.objects.filter(user=operator).exists()

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_only_an_owner_may_remove(self, tenant: Tenant, owner: AbstractUser, role: str) -> None:
        someone = member(tenant, "sam", role)
        before = tenancy_rows()

        with pytest.raises(services.NotAllowed):
            services.member_remove(membership=membership(someone), user=someone)  # type: ignore[arg-type]
        assert tenancy_rows() == before


# The page.


def members_url(tenant: str = "acme") -> str:
    return reverse("tenant:members", kwargs={"tenant": tenant})


def url(name: str, m: Membership, tenant: str = "acme") -> str:
    return reverse(f"tenant:{name}", kwargs={"tenant": tenant, "pk": m.pk})


HTMX = {"HX-Request": "true"}


class TestPage:
    def test_an_owner_sees_every_member_and_the_forms(
        self, client: Client, owner: AbstractUser, operator: AbstractUser, principal: AbstractUser
    ) -> None:
        client.force_login(owner)

        page = client.get(members_url()).content.decode()

        assert "<h1>Members</h1>" in page
        assert page.index("ona (you)") < page.index("olga") < page.index("tomas")
        assert (
            f'<label for="role-{membership(principal).pk}" class="visually-hidden">Role of tomas</label>'
            in page
        )
        assert url("member-remove", membership(principal)) in page
        assert '<h2 id="invite-heading">Invite someone</h2>' in page
        assert '<h2 id="invitations-heading">Open invitations</h2>' in page

    def test_an_operator_sees_the_members_but_no_forms(
        self, client: Client, owner: AbstractUser, operator: AbstractUser
    ) -> None:
        client.force_login(operator)

        page = client.get(members_url()).content.decode()

        assert '<th scope="row">ona</th>' in page
        assert '<span class="badge">Owner</span>' in page
        assert "<form" not in page.split('<div id="members">')[1]
        assert "/remove/" not in page

    @pytest.mark.parametrize("role", ["principal", "viewer"])
    def test_principals_and_viewers_get_403(self, client: Client, tenant: Tenant, role: str) -> None:
        client.force_login(member(tenant, "sam", role))

        assert client.get(members_url()).status_code == 403

    def test_a_non_member_gets_404(self, client: Client, owner: AbstractUser, other_tenant: Tenant) -> None:
        client.force_login(owner)

        assert client.get(members_url("globex")).status_code == 404

    def test_nav_links_follow_the_role(
        self, client: Client, owner: AbstractUser, operator: AbstractUser, principal: AbstractUser
    ) -> None:
        members_link = f'<a href="{members_url()}"'
        keys_link = f'<a href="{reverse("tenant:api-keys", kwargs={"tenant": "acme"})}"'
        seen = {}
        for user in (owner, operator, principal):
            client.force_login(user)
            page = client.get(reverse("agents:inbox", kwargs={"tenant": "acme"})).content.decode()
            seen[user.username] = (members_link in page, keys_link in page)

        assert seen == {"ona": (True, True), "olga": (True, False), "tomas": (False, False)}

    def test_changing_a_role(self, client: Client, owner: AbstractUser, operator: AbstractUser) -> None:
        client.force_login(owner)

        response = client.post(url("member-role", membership(operator)), {"role": "viewer"}, follow=True)

        assert response.redirect_chain == [(members_url(), 302)]
        assert "olga is now viewer." in response.content.decode()
        assert membership(operator).role == "viewer"

    def test_demoting_the_last_owner_says_why_and_changes_nothing(
        self, client: Client, owner: AbstractUser
    ) -> None:
        client.force_login(owner)
        before = tenancy_rows()

        response = client.post(url("member-role", membership(owner)), {"role": "viewer"}, headers=HTMX)

        assert '<li class="error">Cannot demote ona: they are the tenant&#x27;s last owner.' in (
            response.content.decode()
        )
        assert tenancy_rows() == before

    def test_a_bad_role_is_named(self, client: Client, owner: AbstractUser, operator: AbstractUser) -> None:
        client.force_login(owner)
        before = tenancy_rows()

        response = client.post(url("member-role", membership(operator)), {"role": "admin"}, follow=True)

        assert "Choose a role from the list." in response.content.decode()
        assert tenancy_rows() == before

    def test_an_owner_who_steps_down_to_viewer_goes_home(self, client: Client, owner: AbstractUser) -> None:
        member(Tenant.objects.get(slug="acme"), "otto", Membership.Role.OWNER)
        client.force_login(owner)

        plain = client.post(url("member-role", membership(owner)), {"role": "viewer"})
        assert (plain.status_code, plain["Location"]) == (302, reverse("home"))

        Membership.objects.filter(user=owner).update(role="owner")
        htmx = client.post(url("member-role", membership(owner)), {"role": "viewer"}, headers=HTMX)
        assert htmx["HX-Redirect"] == reverse("home")
        assert membership(owner).role == "viewer"

    def test_removing_asks_first_then_removes(
        self, client: Client, owner: AbstractUser, viewer: AbstractUser
    ) -> None:
        client.force_login(owner)
        target = membership(viewer)

        confirm = client.get(url("member-remove", target)).content.decode()
        assert "<h1>Remove vera?</h1>" in confirm
        assert "loses access to Acme Robotics at once" in confirm
        assert Membership.objects.filter(pk=target.pk).exists()

        response = client.post(url("member-remove", target), follow=True)

        assert response.redirect_chain == [(members_url(), 302)]
        assert "vera is no longer a member." in response.content.decode()
        assert not Membership.objects.filter(pk=target.pk).exists()

    def test_removing_an_agents_party_names_the_agent_and_changes_nothing(
        self, client: Client, owner: AbstractUser, principal: AbstractUser, agent: Agent
    ) -> None:
        client.force_login(owner)
        before = tenancy_rows()

        response = client.post(url("member-remove", membership(principal)), follow=True)

        assert "tomas is the party of Tomas&#x27;s agent." in response.content.decode()
        assert tenancy_rows() == before

    def test_another_tenants_member_is_404_and_unchanged(
        self, client: Client, owner: AbstractUser, other_tenant: Tenant
    ) -> None:
        gus = member(other_tenant, "gus", Membership.Role.VIEWER)
        member(other_tenant, "gina", Membership.Role.OWNER)
        theirs = membership(gus, other_tenant)
        client.force_login(owner)
        before = tenancy_rows()

        assert client.post(url("member-role", theirs), {"role": "owner"}).status_code == 404
        assert client.get(url("member-remove", theirs)).status_code == 404
        assert client.post(url("member-remove", theirs)).status_code == 404
        assert tenancy_rows() == before

    @pytest.mark.parametrize("role", ["operator", "principal", "viewer"])
    def test_other_roles_cannot_change_anything(
        self, client: Client, tenant: Tenant, owner: AbstractUser, role: str
    ) -> None:
        client.force_login(member(tenant, "sam", role))
        target = membership(owner)
        before = tenancy_rows()

        posts = [
            (
                reverse("tenant:invitation-create", kwargs={"tenant": "acme"}),
                {"invite-email": "x@example.com", "invite-role": "owner"},
            ),
            (url("member-role", target), {"role": "viewer"}),
            (url("member-remove", target), {}),
        ]
        for address, data in posts:
            assert client.post(address, data).status_code == 403
        assert tenancy_rows() == before
