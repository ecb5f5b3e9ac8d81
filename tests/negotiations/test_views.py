"""The negotiations board and one negotiation's page: what they show and that they stay in the tenant."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import Agent
from negotiations.models import Negotiation, Settlement, Turn
from parley.models import Tenant


def negotiation(agent: Agent, name: str, *, outcome: str | None = None) -> Negotiation:
    """An outbound negotiation of ``agent`` with one turn each way, settled with ``outcome`` if given."""
    n = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url=f"https://example.org/a2a/{name.lower()}",
        counterparty_name=name,
        task_id=f"task-{name.lower()}",
        status=Negotiation.Status.SETTLED if outcome else Negotiation.Status.OPEN,
        turn_count=2,
    )
    Turn.objects.create(
        tenant=agent.tenant,
        negotiation=n,
        seq=1,
        side=Turn.Side.OURS,
        action="propose",
        message="Would 900 a day work?",
        terms={"amount": 900, "currency": "EUR"},
        offer_id="offer-1",
    )
    Turn.objects.create(
        tenant=agent.tenant,
        negotiation=n,
        seq=2,
        side=Turn.Side.THEIRS,
        action="counter",
        message="I can do 1,031.",
        terms={"amount": 1031, "currency": "EUR"},
        offer_id="offer-2",
    )
    if outcome:
        Settlement.objects.create(
            tenant=agent.tenant,
            negotiation=n,
            outcome=outcome,
            basis=Settlement.Basis.REFERENCE,
            terms={"amount": 1031, "currency": "EUR"},
            reason='Closing move accepts offer "offer-2".',
            ended_by=Turn.Side.OURS,
        )
    return n


@pytest.fixture
def foreign(seller: Agent) -> Negotiation:
    return negotiation(seller, "Globex Buyer", outcome=Settlement.Outcome.DECLINED)


def detail_url(n: Negotiation, tenant: Tenant | None = None) -> str:
    return reverse("negotiations:detail", kwargs={"tenant": (tenant or n.tenant).slug, "pk": n.pk})


class TestList:
    def test_lists_the_tenants_negotiations_with_their_settlements_only(
        self, logged_in: Client, agent: Agent, foreign: Negotiation
    ) -> None:
        settled = negotiation(agent, "Idris Haddad", outcome=Settlement.Outcome.AGREED)
        negotiation(agent, "Noor Lindqvist")

        response = logged_in.get(reverse("negotiations:list", kwargs={"tenant": "acme"}))

        html = response.content.decode()
        assert response.status_code == 200
        assert "<h1>Negotiations</h1>" in html
        assert f'href="{detail_url(settled)}">Idris Haddad</a>' in html
        assert '<span class="badge outcome-agreed">agreed</span>' in html
        assert "Noor Lindqvist" in html
        assert "Globex Buyer" not in html

    def test_fragment_is_the_live_region_alone(self, logged_in: Client, agent: Agent) -> None:
        negotiation(agent, "Idris Haddad")

        html = logged_in.get(reverse("negotiations:list", kwargs={"tenant": "acme"}), {"fragment": "1"})

        assert "<html" not in html.content.decode()
        assert 'data-live="negotiations"' in html.content.decode()

    def test_pages_of_fifty_keep_the_page_in_the_live_source(self, logged_in: Client, agent: Agent) -> None:
        Negotiation.objects.bulk_create(
            Negotiation(tenant=agent.tenant, agent=agent, direction="outbound", counterparty_name=f"cp-{i}")
            for i in range(51)
        )
        url = reverse("negotiations:list", kwargs={"tenant": "acme"})

        first = logged_in.get(url).content.decode()
        second = logged_in.get(url, {"page": 2}).content.decode()

        assert "Page 1 of 2" in first
        assert 'rel="next"' in first
        assert "Page 2 of 2" in second
        assert f'data-live-src="{url}?page=2&amp;fragment=1"' in second

    def test_another_tenants_board_is_404(self, logged_in: Client, foreign: Negotiation) -> None:
        response = logged_in.get(reverse("negotiations:list", kwargs={"tenant": "globex"}))

        assert response.status_code == 404
        assert "Globex Buyer" not in response.content.decode()


class TestDetail:
    def test_shows_turns_and_settlement(self, logged_in: Client, agent: Agent) -> None:
        n = negotiation(agent, "Idris Haddad", outcome=Settlement.Outcome.AGREED)

        response = logged_in.get(detail_url(n))

        html = response.content.decode()
        assert response.status_code == 200
        assert "Tomas&#x27;s agent ↔ Idris Haddad</h1>" in html
        assert html.index("Would 900 a day work?") < html.index("I can do 1,031.")
        assert "amount <strong>1031</strong> · currency <strong>EUR</strong>" in html
        assert '<span class="badge outcome-agreed">agreed</span> on basis' in html
        assert 'data-announce="Settled, 2 turns, agreed"' in html

    def test_fragment_is_the_live_region_alone(self, logged_in: Client, agent: Agent) -> None:
        html = logged_in.get(
            detail_url(negotiation(agent, "Idris Haddad")), {"fragment": "1"}
        ).content.decode()

        assert "<html" not in html
        assert 'data-live="negotiation"' in html
        assert "No turns yet." not in html

    def test_another_tenants_negotiation_is_404(
        self, logged_in: Client, tenant: Tenant, foreign: Negotiation
    ) -> None:
        for url in (
            detail_url(foreign, tenant),
            detail_url(foreign),
            detail_url(foreign, tenant) + "?fragment=1",
        ):
            response = logged_in.get(url)
            assert response.status_code == 404
            assert "Globex Buyer" not in response.content.decode()
