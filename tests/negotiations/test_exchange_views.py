"""The exchange on the dashboard: the negotiation page's chart, its text alternative and the score,
and the board's score columns, sorted by the server; who sees them, and who gets a 404."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agents.models import Agent, Intent
from negotiations.models import Negotiation, Turn
from parley.models import Membership, Tenant
from tests.negotiations.pages import (
    AGREED_AT_1000,
    CEILING,
    DECLINED,
    FLOOR,
    board_rows,
    board_url,
    detail_url,
    inbound_deal,
    outbound,
)
from tests.parley.tenancy import member

pytestmark = pytest.mark.django_db

COUNTERPARTY, TURNS, SURPLUS, SHARE, COST = 0, 5, 8, 9, 10


@pytest.fixture
def agreed(agent: Agent, intent: Intent) -> Negotiation:
    """Tomas's agent buys under a €1,100 ceiling: four offers (901..904), agreed at 1,000."""
    agent.term_guards = CEILING
    agent.save()
    n = outbound(
        agent,
        "Idris Haddad",
        intent=intent,
        status=Negotiation.Status.SETTLED,
        turns=4,
        settlement=AGREED_AT_1000,
    )
    n.input_tokens, n.output_tokens, n.cost = 900, 100, Decimal("0.25")
    n.save()
    return n


def page(client: Client, n: Negotiation) -> str:
    response = client.get(detail_url(n))
    assert response.status_code == 200
    return response.content.decode()


def marks(html: str) -> list[str]:
    return re.findall(r'data-mark="(\w+)"', html)


def score_of(html: str, name: str) -> str:
    match = re.search(rf'<dd data-score="{name}">(.*?)</dd>', html, re.S)
    assert match is not None, name
    return " ".join(re.sub(r"<[^>]+>", "", match.group(1)).split())


class TestChartOnThePage:
    def test_a_settled_negotiation_draws_both_sides_our_limit_and_the_settlement(
        self, logged_in: Client, agreed: Negotiation
    ) -> None:
        html = page(logged_in, agreed)

        assert marks(html) == ["limit", "aspiration", "theirs", "ours", "settlement"]
        assert (
            '<svg class="chart-svg" viewBox="0 0 640 300" role="img" aria-labelledby="chart-title chart-desc"'
            in html
        )
        assert (
            '<title id="chart-title">Offers over the turns: Tomas&#x27;s agent and Idris Haddad</title>'
            in html
        )
        assert (
            '<desc id="chart-desc">Tomas&#x27;s agent made 2 offers, from 901 to 903 EUR. '
            "Idris Haddad made 2 offers, from 902 to 904 EUR. Our limit: 1,100 EUR. "
            "Our aspiration: 770 EUR. Settled at 1,000 EUR on turn 4.</desc>"
        ) in html
        # Drawn by the server: no script draws it.
        chart = html[html.index('<figure class="chart"') : html.index("</figure>")]
        assert "<script" not in chart

    def test_the_offers_are_a_table_a_screen_reader_reads(
        self, logged_in: Client, agreed: Negotiation
    ) -> None:
        html = page(logged_in, agreed)
        table = html[html.index('<table class="offers">') :]
        table = table[: table.index("</table>")]

        assert '<caption id="offers-caption">Offers on amount (EUR), by turn</caption>' in table
        assert board_rows(table) == [
            ["1", "Tomas's agent (ours)", "901"],
            ["2", "Idris Haddad (theirs)", "902"],
            ["3", "Tomas's agent (ours)", "903"],
            ["4", "Idris Haddad (theirs)", "904"],
        ]
        assert 'role="region" aria-labelledby="offers-caption" tabindex="0"' in html

    def test_the_score_says_what_the_deal_left_us_and_what_it_took(
        self, logged_in: Client, agreed: Negotiation
    ) -> None:
        html = page(logged_in, agreed)

        assert score_of(html, "agreed") == "1,000 EUR for amount"
        assert score_of(html, "limit") == "1,100 EUR, the most we pay"
        assert score_of(html, "aspiration") == "770 EUR"
        assert score_of(html, "surplus") == (
            "100 EUR inside our limit · 30% of the way from our limit to our aspiration"
        )
        assert score_of(html, "turns") == "4"
        assert score_of(html, "cost") == "1000 tokens · 0.250000"

    def test_without_a_limit_known_none_is_drawn_nor_scored(self, logged_in: Client, agent: Agent) -> None:
        n = outbound(agent, "Idris Haddad", turns=4, settlement=AGREED_AT_1000)

        html = page(logged_in, n)

        assert marks(html) == ["theirs", "ours", "settlement"]
        assert 'class="key key-limit"' not in html
        assert "our limit 1" not in html
        assert score_of(html, "limit") == "not known"
        assert score_of(html, "surplus") == "none: no limit known"

    def test_not_agreed_marks_no_settlement_and_scores_no_surplus(
        self, logged_in: Client, agent: Agent
    ) -> None:
        agent.term_guards = CEILING
        agent.save()
        n = outbound(agent, "Idris Haddad", turns=3, settlement=DECLINED)

        html = page(logged_in, n)

        assert marks(html) == ["limit", "aspiration", "theirs", "ours"]
        assert score_of(html, "agreed") == "no deal on amount"
        assert score_of(html, "surplus") == "none: no deal on a value"

    def test_a_prose_exchange_is_charted_from_the_amounts_its_messages_name(
        self, logged_in: Client, agent: Agent
    ) -> None:
        agent.terms = ""
        agent.save()
        n = outbound(agent, "Idris Haddad", turns=0)
        for seq, side, message in (
            (1, "ours", "Would €800 a day work?"),
            (2, "theirs", "Make it 1,050 euros."),
        ):
            Turn.objects.create(
                tenant=n.tenant, negotiation=n, seq=seq, side=side, action="propose", message=message
            )

        html = page(logged_in, n)

        assert marks(html) == ["theirs", "ours"]
        assert "Tomas&#x27;s agent made 1 offer: 800. Idris Haddad made 1 offer: 1,050." in html

    def test_no_amount_named_no_chart(self, logged_in: Client, agent: Agent) -> None:
        html = page(logged_in, outbound(agent, "Idris Haddad", turns=0))

        assert "<svg" not in html
        assert "No move has named an amount on amount yet." in html


class TestWhoSeesIt:
    def test_every_role_that_sees_the_page_is_our_side_and_sees_our_limit(
        self, client: Client, tenant: Tenant, agreed: Negotiation
    ) -> None:
        # Viewers watch every party's negotiations, and the page already shows the standing guidance
        # that states the limit: the chart adds no one new to who knows it.
        for role in (Membership.Role.VIEWER, Membership.Role.OPERATOR, Membership.Role.OWNER):
            client.force_login(member(tenant, f"m-{role}", role))
            assert "limit" in marks(page(client, agreed)), role

    def test_another_partys_principal_gets_a_404(
        self, client: Client, tenant: Tenant, agreed: Negotiation
    ) -> None:
        client.force_login(member(tenant, "noor", Membership.Role.PRINCIPAL))

        assert client.get(detail_url(agreed)).status_code == 404

    def test_another_tenants_negotiation_is_a_404(
        self, logged_in: Client, tenant: Tenant, seller: Agent
    ) -> None:
        theirs = inbound_deal(seller)

        response = logged_in.get(detail_url(theirs, tenant))

        assert response.status_code == 404
        assert b"chart" not in response.content

    def test_what_the_counterparty_received_never_names_our_limit(
        self, logged_in: Client, agent: Agent
    ) -> None:
        agent.term_guards = [{**FLOOR[0], "value": 963}]
        agent.save()
        deal = inbound_deal(agent)

        assert "our limit 963" in page(logged_in, deal)
        sent = list(Turn.objects.for_tenant(agent.tenant).filter(negotiation=deal, side=Turn.Side.OURS))
        assert sent
        assert all("963" not in t.message and 963 not in (t.terms or {}).values() for t in sent)


@pytest.fixture
def board(client: Client, operator: AbstractUser, agent: Agent, intent: Intent) -> Client:
    """Oldest first: A agreed at 1,000 (surplus 100, 4 turns, cost 0.5), B agreed at 1,090 (surplus
    10, 2 turns, cost 2), C declined (6 turns, cost 1); under a €1,100 ceiling."""
    agent.term_guards = CEILING
    agent.save()
    rows = [
        ("A", 4, AGREED_AT_1000, "0.5"),
        ("B", 2, {**AGREED_AT_1000, "terms": {"amount": 1090, "currency": "EUR"}}, "2"),
        ("C", 6, DECLINED, "1"),
    ]
    for name, turns, settlement, cost in rows:
        n = outbound(agent, name, intent=intent, turns=turns, settlement=settlement)
        n.cost = Decimal(cost)
        n.save()
    client.force_login(operator)
    return client


def board_page(client: Client, **query: str) -> str:
    response = client.get(board_url("acme"), query)
    assert response.status_code == 200
    return response.content.decode()


def names(html: str) -> list[str]:
    return [row[COUNTERPARTY].split()[0] for row in board_rows(html)]


class TestBoard:
    def test_each_row_shows_its_surplus_share_and_cost(self, board: Client) -> None:
        rows = board_rows(board_page(board))

        assert [[r[i] for i in (TURNS, SURPLUS, SHARE, COST)] for r in rows] == [
            ["6", "—", "—", "1.000000"],
            ["2", "10 EUR", "3%", "2.000000"],
            ["4", "100 EUR", "30%", "0.500000"],
        ]

    @pytest.mark.parametrize(
        ("sort", "order"),
        [
            ("", ["C", "B", "A"]),
            ("-surplus", ["A", "B", "C"]),
            ("surplus", ["B", "A", "C"]),
            ("-share", ["A", "B", "C"]),
            ("turns", ["B", "A", "C"]),
            ("-cost", ["B", "C", "A"]),
        ],
    )
    def test_the_server_sorts_by_a_column(self, board: Client, sort: str, order: list[str]) -> None:
        assert names(board_page(board, sort=sort)) == order

    def test_the_headings_link_to_their_order_and_say_which_is_on(self, board: Client, agent: Agent) -> None:
        html = board_page(board, sort="-surplus", agent=str(agent.pk))

        assert (
            f'<th scope="col" aria-sort="descending"><a href="?agent={agent.pk}&amp;sort=surplus">Surplus'
        ) in html
        assert f'<th scope="col" aria-sort="none"><a href="?agent={agent.pk}&amp;sort=-turns">Turns' in html
        assert "3 negotiations matching the filters, most surplus first</caption>" in html
        # An order alone filters nothing.
        assert "3 negotiations, most surplus first</caption>" in board_page(board, sort="-surplus")

    def test_an_unknown_order_is_an_error_at_its_field_and_lists_nothing(self, board: Client) -> None:
        html = board_page(board, sort="counterparty")

        assert "Choose an order from the list." in html
        assert board_rows(html) == []

    def test_the_pages_and_the_filters_keep_the_order(
        self, board: Client, agent: Agent, intent: Intent
    ) -> None:
        for i in range(50):
            outbound(agent, f"Peer {i}", intent=intent, turns=1)

        first = board_page(board, sort="-surplus", status="open")
        second = board_page(board, sort="-surplus", status="open", page="2")
        everything = board_page(board, sort="-surplus")

        assert '<a href="?status=open&amp;sort=-surplus&amp;page=2" rel="next">Older</a>' in first
        assert (len(board_rows(first)), len(board_rows(second))) == (50, 3)
        assert names(everything)[:2] == ["A", "B"]
