"""The negotiations board: what each row shows, the filters, tenancy, the live fragment, its queries."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agents.models import Agent, Intent
from negotiations.models import Negotiation, Settlement
from parley.models import Tenant
from tests.negotiations.pages import FLOOR, board_rows, board_url, detail_url, inbound_deal, outbound

pytestmark = pytest.mark.django_db

COUNTERPARTY, AGENT, INTENT, DIRECTION, STATUS, TURNS, LAST_MOVE, SETTLEMENT = range(8)
DECLINED = {
    "outcome": Settlement.Outcome.DECLINED,
    "basis": Settlement.Basis.STATE,
    "reason": "task ended as rejected",
    "ended_by": "theirs",
}


@pytest.fixture
def logged_in(client: Client, operator: AbstractUser) -> Client:
    """The board as an operator sees it: every party's negotiations (a party sees only their own:
    tests/parley/test_party_privacy.py)."""
    client.force_login(operator)
    return client


@pytest.fixture
def seller_deal(seller: Agent) -> Negotiation:
    """Another tenant's negotiation, made by the real inbound service."""
    return inbound_deal(seller, opening="Globex wants you")


@pytest.fixture
def noor(tenant: Tenant) -> Agent:
    return Agent.objects.create(tenant=tenant, slug="noor", name="Noor's agent")


@dataclass
class World:
    """Three negotiations of the tenant: ``idris`` (Tomas's, outbound, declined), ``deal`` (Tomas's,
    inbound by the real service, agreed) and ``lindqvist`` (Noor's, outbound, waiting)."""

    ids: dict[str, str]
    idris: Negotiation
    deal: Negotiation
    lindqvist: Negotiation


@pytest.fixture
def world(agent: Agent, intent: Intent, noor: Agent, seller_deal: Negotiation) -> World:
    agent.term_guards = FLOOR
    agent.save()
    noor_intent = Intent.objects.create(tenant=noor.tenant, agent=noor, statement="Hire a designer.")
    idris = outbound(
        agent, "Idris Haddad", intent=intent, status=Negotiation.Status.SETTLED, turns=3, settlement=DECLINED
    )
    deal = inbound_deal(agent)
    lindqvist = outbound(noor, "Lindqvist Studio", intent=noor_intent, status=Negotiation.Status.WAITING)
    ids = {
        "tomas": str(agent.pk),
        "noor": str(noor.pk),
        "cfo": str(intent.pk),
        "designer": str(noor_intent.pk),
        "globex-agent": str(seller_deal.agent_id),
        "globex-intent": str(
            Intent.objects.create(tenant=seller_deal.tenant, agent=seller_deal.agent, statement="Sell.").pk
        ),
        "unknown": str(uuid.uuid4()),
    }
    return World(ids, idris, deal, lindqvist)


def listed(html: str) -> list[str]:
    return [row[COUNTERPARTY] for row in board_rows(html)]


def get(client: Client, world: World, query: dict[str, str], **extra: str) -> str:
    """The board with ``query``, its values named in ``world.ids`` replaced by those ids."""
    response = client.get(board_url("acme"), {k: world.ids.get(v, v) for k, v in {**query, **extra}.items()})
    assert response.status_code == 200
    return response.content.decode()


class TestRows:
    def test_both_directions_newest_first_with_turns_last_move_and_badges(
        self, logged_in: Client, world: World
    ) -> None:
        rows = board_rows(get(logged_in, world, {}))

        assert [[r[i] for i in (COUNTERPARTY, AGENT, INTENT, DIRECTION, STATUS, TURNS)] for r in rows] == [
            [
                "Lindqvist Studio https://example.org/a2a/lindqvist",
                "Negotiations of Noor's agent",
                "Negotiations under Hire a designer.",
                "Outbound",
                "Waiting on the party",
                "2",
            ],
            [
                "Unnamed counterparty",
                "Negotiations of Tomas's agent",
                "Negotiations under Bring in a fractional CFO.",
                "Inbound",
                "Settled",
                "4",
            ],
            [
                "Idris Haddad https://example.org/a2a/idris",
                "Negotiations of Tomas's agent",
                "Negotiations under Bring in a fractional CFO.",
                "Outbound",
                "Settled",
                "3",
            ],
        ]
        assert [r[LAST_MOVE].rsplit(" ", 2)[0] for r in rows] == [
            "Theirs: counter",
            "Ours: accept",
            "Ours: counter",
        ]
        assert [r[SETTLEMENT] for r in rows] == [
            "not settled",
            "agreed basis: reference",
            "declined basis: state",
        ]

    def test_badges_carry_the_outcome_and_basis_as_text(self, logged_in: Client, world: World) -> None:
        html = get(logged_in, world, {})

        assert (
            '<span class="badge badge-agreed">agreed</span> '
            '<span class="badge badge-basis">basis: reference</span>' in html
        )
        assert (
            '<span class="badge badge-declined">declined</span> '
            '<span class="badge badge-basis">basis: state</span>' in html
        )

    def test_each_row_links_to_its_negotiation_and_to_the_board_of_its_agent_and_intent(
        self, logged_in: Client, world: World, intent: Intent
    ) -> None:
        html = get(logged_in, world, {})

        assert f'<a href="{detail_url(world.idris)}">Idris Haddad</a>' in html
        assert f'<a href="{detail_url(world.deal)}">Unnamed counterparty</a>' in html
        assert f'<a href="/t/acme/negotiations/?agent={world.ids["tomas"]}">' in html
        assert f'<a href="/t/acme/negotiations/?intent={intent.pk}">' in html

    def test_the_turn_count_follows_the_turns_recorded(self, logged_in: Client, agent: Agent) -> None:
        agent.term_guards = FLOOR
        agent.save()
        negotiation = inbound_deal(agent)
        negotiation.turn_count = 99  # our moves against the cap: the board counts the turns themselves
        negotiation.save()

        rows = board_rows(logged_in.get(board_url("acme")).content.decode())

        assert [r[TURNS] for r in rows] == ["4"]
        assert negotiation.turns.count() == 4

    def test_html_from_a_counterparty_is_text(self, logged_in: Client, agent: Agent) -> None:
        outbound(agent, "<img src=x onerror=alert(1)>Evil")

        html = logged_in.get(board_url("acme")).content.decode()

        assert "&lt;img src=x onerror=alert(1)&gt;Evil" in html
        assert "<img src=x" not in html


class TestFilters:
    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ({"agent": "tomas"}, ["Unnamed counterparty", "Idris Haddad https://example.org/a2a/idris"]),
            ({"agent": "noor"}, ["Lindqvist Studio https://example.org/a2a/lindqvist"]),
            ({"intent": "cfo"}, ["Unnamed counterparty", "Idris Haddad https://example.org/a2a/idris"]),
            ({"intent": "designer"}, ["Lindqvist Studio https://example.org/a2a/lindqvist"]),
            ({"status": "settled"}, ["Unnamed counterparty", "Idris Haddad https://example.org/a2a/idris"]),
            ({"status": "waiting"}, ["Lindqvist Studio https://example.org/a2a/lindqvist"]),
            ({"status": "failed"}, []),
            ({"direction": "inbound"}, ["Unnamed counterparty"]),
            (
                {"direction": "outbound"},
                [
                    "Lindqvist Studio https://example.org/a2a/lindqvist",
                    "Idris Haddad https://example.org/a2a/idris",
                ],
            ),
            ({"counterparty": "haddad"}, ["Idris Haddad https://example.org/a2a/idris"]),
            (
                {"counterparty": " EXAMPLE.ORG/a2a/LIND "},
                ["Lindqvist Studio https://example.org/a2a/lindqvist"],
            ),
            ({"agent": "tomas", "direction": "outbound"}, ["Idris Haddad https://example.org/a2a/idris"]),
            ({"agent": "tomas", "intent": "designer"}, []),
            (
                {"intent": "cfo", "status": "settled", "counterparty": "idris"},
                ["Idris Haddad https://example.org/a2a/idris"],
            ),
            ({"agent": "", "intent": "", "status": "", "direction": "", "counterparty": ""}, None),
        ],
    )
    def test_each_filter_narrows_and_they_combine(
        self, logged_in: Client, world: World, query: dict[str, str], expected: list[str] | None
    ) -> None:
        html = get(logged_in, world, query)

        everything = [
            "Lindqvist Studio https://example.org/a2a/lindqvist",
            "Unnamed counterparty",
            "Idris Haddad https://example.org/a2a/idris",
        ]
        if expected == []:
            assert board_rows(html) == [["No negotiation matches these filters."]]
        else:
            assert listed(html) == (everything if expected is None else expected)
        assert "Globex" not in html

    def test_the_form_keeps_the_filters_and_offers_only_the_tenants_agents_and_intents(
        self, logged_in: Client, world: World
    ) -> None:
        html = get(logged_in, world, {"agent": "noor", "counterparty": "lind"})

        assert f'<option value="{world.ids["noor"]}" selected>Noor&#x27;s agent</option>' in html
        assert f'<option value="{world.ids["tomas"]}">Tomas&#x27;s agent</option>' in html
        assert (
            f'<option value="{world.ids["cfo"]}">Tomas&#x27;s agent: Bring in a fractional CFO.</option>'
            in html
        )
        assert 'value="lind"' in html
        assert world.ids["globex-agent"] not in html
        assert world.ids["globex-intent"] not in html
        assert '<a href="/t/acme/negotiations/">Clear the filters</a>' in html

    @pytest.mark.parametrize(
        ("query", "field", "error"),
        [
            ({"agent": "globex-agent"}, "agent", "Choose one of this tenant&#x27;s agents."),
            ({"agent": "unknown"}, "agent", "Choose one of this tenant&#x27;s agents."),
            ({"agent": "not-a-uuid"}, "agent", "Choose one of this tenant&#x27;s agents."),
            ({"intent": "globex-intent"}, "intent", "Choose one of this tenant&#x27;s intents."),
            ({"intent": "unknown"}, "intent", "Choose one of this tenant&#x27;s intents."),
            ({"status": "bogus"}, "status", "Choose a status from the list."),
            ({"direction": "sideways"}, "direction", "Choose a direction from the list."),
            ({"counterparty": "x" * 201}, "counterparty", "Search for at most 200 characters."),
        ],
    )
    def test_a_bad_filter_is_an_error_at_its_field_and_lists_nothing(
        self, logged_in: Client, world: World, query: dict[str, str], field: str, error: str
    ) -> None:
        for extra in ({}, {"fragment": "1"}):
            html = get(logged_in, world, query, **extra)

            assert board_rows(html) == []
            assert "No negotiations are listed until the filters are corrected." in html
            assert "Globex" not in html
            assert "Idris Haddad" not in html
            if not extra:
                assert f'<ul class="errorlist" id="id_{field}_error"><li>{error}</li></ul>' in html
                assert 'aria-invalid="true"' in html

    def test_the_agent_page_links_to_its_board(self, logged_in: Client, agent: Agent) -> None:
        html = logged_in.get(
            reverse("agents:agent", kwargs={"tenant": "acme", "pk": agent.pk})
        ).content.decode()

        assert f'<a href="/t/acme/negotiations/?agent={agent.pk}">Negotiations of this agent</a>' in html


class TestTenancy:
    def test_another_tenants_board_is_404(self, logged_in: Client, seller_deal: Negotiation) -> None:
        for query in ({}, {"fragment": "1"}, {"agent": str(seller_deal.agent_id)}):
            response = logged_in.get(board_url("globex"), query)

            assert response.status_code == 404
            assert "Globex wants you" not in response.content.decode()

    def test_another_tenants_negotiations_are_never_listed(
        self, logged_in: Client, seller_deal: Negotiation
    ) -> None:
        html = logged_in.get(board_url("acme"), {"counterparty": ""}).content.decode()

        assert board_rows(html) == [["No negotiations yet."]]
        assert str(seller_deal.pk) not in html


class TestLive:
    def test_the_fragment_is_the_live_region_alone_and_keeps_the_filters(
        self, logged_in: Client, world: World
    ) -> None:
        page = get(logged_in, world, {"agent": "noor", "status": "waiting"})
        fragment = get(logged_in, world, {"agent": "noor", "status": "waiting"}, fragment="1")

        noor = world.ids["noor"]
        assert f'data-live-src="/t/acme/negotiations/?agent={noor}&amp;status=waiting&amp;fragment=1"' in page
        assert fragment.lstrip().startswith('<div data-live="negotiations"')
        assert "<html" not in fragment
        assert "<form" not in fragment
        assert listed(fragment) == ["Lindqvist Studio https://example.org/a2a/lindqvist"]

    def test_the_fragment_shows_what_changed_since_the_page_was_rendered(
        self, logged_in: Client, world: World
    ) -> None:
        fragment = get(logged_in, world, {"agent": "noor"}, fragment="1")
        assert 'data-announce="1 negotiation, 0 settled"' in fragment
        Settlement.objects.create(tenant=world.lindqvist.tenant, negotiation=world.lindqvist, **DECLINED)
        world.lindqvist.status = Negotiation.Status.SETTLED
        world.lindqvist.save()

        fragment = get(logged_in, world, {"agent": "noor"}, fragment="1")

        assert 'data-announce="1 negotiation, 1 settled"' in fragment
        assert board_rows(fragment)[0][SETTLEMENT] == "declined basis: state"

    def test_pages_of_fifty_keep_the_filters_and_the_page_in_their_links(
        self, logged_in: Client, agent: Agent, noor: Agent
    ) -> None:
        Negotiation.objects.bulk_create(
            Negotiation(tenant=agent.tenant, agent=agent, direction="outbound", counterparty_name=f"cp-{i}")
            for i in range(51)
        )
        outbound(noor, "Not Tomas")
        url = board_url("acme")

        first = logged_in.get(url, {"agent": str(agent.pk)}).content.decode()
        second = logged_in.get(url, {"agent": str(agent.pk), "page": 2}).content.decode()

        assert "Page 1 of 2" in first
        assert f'<a href="?agent={agent.pk}&amp;page=2" rel="next">Older</a>' in first
        assert f'data-live-src="{url}?agent={agent.pk}&amp;fragment=1"' in first
        assert "Page 2 of 2" in second
        assert f'<a href="?agent={agent.pk}&amp;page=1" rel="prev">Newer</a>' in second
        assert f'data-live-src="{url}?agent={agent.pk}&amp;page=2&amp;fragment=1"' in second
        assert len(board_rows(second)) == 1
        assert "Not Tomas" not in first + second


def test_the_boards_queries_do_not_grow_with_its_rows(
    logged_in: Client, agent: Agent, intent: Intent
) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = logged_in.get(board_url("acme"))
        assert response.status_code == 200
        return len(captured.captured_queries)

    def add(count: int) -> None:
        for i in range(count):
            settlement: dict[str, Any] = {**DECLINED, "terms": {"amount": i}}
            outbound(agent, f"Peer {i}", intent=intent, turns=3, settlement=settlement)

    add(2)
    few = queries()
    add(20)

    assert len(board_rows(logged_in.get(board_url("acme")).content.decode())) == 22
    assert queries() == few
