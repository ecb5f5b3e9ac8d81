"""A negotiation scored for its own side and its exchange charted, from its rows
(negotiations.selectors: negotiation_score, agreed_value, negotiation_offers, negotiation_chart,
board_sorted)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from agents.models import Agent, Intent
from negotiations import selectors
from negotiations.models import Negotiation, Settlement, Turn
from tests.negotiations.pages import AGREED_AT_1000, CEILING, DECLINED, FLOOR, inbound_deal, outbound

pytestmark = pytest.mark.django_db


def guarded(agent: Agent, guards: list[dict[str, Any]]) -> Agent:
    agent.term_guards = guards
    agent.save()
    return agent


def prose_turn(n: Negotiation, seq: int, side: str, action: str, message: str) -> Turn:
    return Turn.objects.create(
        tenant=n.tenant, negotiation=n, seq=seq, side=side, action=action, message=message, terms=None
    )


class TestScore:
    def test_a_buyer_under_its_ceiling_keeps_the_difference(self, agent: Agent, intent: Intent) -> None:
        guarded(agent, CEILING)
        n = outbound(agent, "Idris Haddad", intent=intent, turns=4, settlement=AGREED_AT_1000)
        n.input_tokens, n.output_tokens, n.cost = 0, 0, Decimal(0)
        n.save()

        score = selectors.negotiation_score(n)

        assert (score.term, score.currency) == ("amount", "EUR")
        assert score.limit is not None
        assert (score.limit.value, score.limit.kind) == (1100, "ceiling")
        # The offline strategy opens at 70% of a ceiling without an aspiration of its own.
        assert score.aspiration == pytest.approx(770)
        assert score.agreed == 1000
        assert score.surplus == 100
        assert score.share == pytest.approx(100 / 330)
        assert score.turns == 4

    def test_a_seller_above_its_floor_keeps_the_difference(self, agent: Agent) -> None:
        guarded(agent, [{**FLOOR[0], "aspiration": 1200}])
        deal = inbound_deal(agent)
        settlement = Settlement.objects.for_tenant(agent.tenant).get(negotiation=deal)
        agreed = settlement.terms["amount"]

        score = selectors.negotiation_score(deal)

        assert score.limit is not None
        assert (score.limit.value, score.limit.kind) == (950, "floor")
        assert score.aspiration == 1200
        assert score.agreed == agreed > 950
        assert score.surplus == agreed - 950
        assert score.share == pytest.approx((agreed - 950) / 250)
        assert score.turns == 4
        # Recording the turns counted them, and recording the settlement stored its score.
        assert (deal.turns_recorded, deal.surplus, deal.share) == (4, score.surplus, score.share)
        assert deal.turns_recorded == Turn.objects.for_tenant(agent.tenant).filter(negotiation=deal).count()

    def test_the_limit_is_read_from_the_standing_guidance_as_the_negotiator_reads_it(
        self, agent: Agent, intent: Intent
    ) -> None:
        n = outbound(agent, "Idris Haddad", intent=intent, settlement=AGREED_AT_1000)
        n.guidance = ["Up to €1,100 a day."]
        n.save()

        score = selectors.negotiation_score(n)

        assert score.limit is not None
        assert (score.limit.value, score.limit.kind) == (1100, "ceiling")
        assert score.surplus == 100

    def test_no_limit_known_scores_no_surplus(self, agent: Agent, intent: Intent) -> None:
        n = outbound(agent, "Idris Haddad", intent=intent, settlement=AGREED_AT_1000)

        score = selectors.negotiation_score(n)

        assert score.limit is None
        assert score.aspiration is None
        assert score.agreed == 1000
        assert score.surplus is None
        assert score.share is None

    def test_a_malformed_guard_scores_no_limit_rather_than_failing(
        self, agent: Agent, intent: Intent
    ) -> None:
        guarded(agent, [{"term": "amount", "op": "<", "value": 1100}])
        n = outbound(agent, "Idris Haddad", intent=intent, settlement=AGREED_AT_1000)

        score = selectors.negotiation_score(n)

        assert score.limit is None
        assert score.agreed == 1000

    @pytest.mark.parametrize("settlement", [None, DECLINED])
    def test_without_a_deal_there_is_no_agreed_value_nor_surplus(
        self, agent: Agent, intent: Intent, settlement: dict[str, Any] | None
    ) -> None:
        guarded(agent, CEILING)
        n = outbound(agent, "Idris Haddad", intent=intent, turns=3, settlement=settlement)

        score = selectors.negotiation_score(n)

        assert score.limit is not None
        assert score.agreed is None
        assert score.surplus is None
        assert score.turns == 3

    def test_a_prose_deal_is_on_the_amount_its_closing_moves_name(self, agent: Agent, intent: Intent) -> None:
        agent.terms = ""
        guarded(agent, CEILING)
        n = outbound(agent, "Idris Haddad", intent=intent, turns=0)
        prose_turn(n, 1, Turn.Side.OURS, "propose", "Would €800 a day work?")
        prose_turn(n, 2, Turn.Side.THEIRS, "counter", "I need 1,050 euros a day.")
        prose_turn(n, 3, Turn.Side.OURS, "accept", "Agreed.")
        Settlement.objects.create(
            tenant=agent.tenant,
            negotiation=n,
            outcome=Settlement.Outcome.UNCONFIRMED,
            basis=Settlement.Basis.STATE,
            reason="Task completed without terms.",
        )

        score = selectors.negotiation_score(n)

        # "Agreed." names no amount: the deal is on the offer it took, 1,050.
        assert score.agreed == 1050
        assert score.surplus == 50
        assert [
            (o.seq, o.side, o.value) for o in selectors.negotiation_offers(list(n.turns.all()), term="amount")
        ] == [
            (1, "ours", 800),
            (2, "theirs", 1050),
        ]

    def test_on_a_chat_model_only_an_aspiration_its_guard_names_is_known(
        self, agent: Agent, intent: Intent
    ) -> None:
        agent.model = "house-model"
        guarded(agent, CEILING)
        n = outbound(agent, "Idris Haddad", intent=intent, settlement=AGREED_AT_1000)

        assert selectors.negotiation_score(n).aspiration is None
        guarded(agent, [{**CEILING[0], "aspiration": 800}])
        n = Negotiation.objects.for_tenant(agent.tenant).select_related("agent").get(pk=n.pk)
        score = selectors.negotiation_score(n)
        assert score.aspiration == 800
        assert score.share == pytest.approx(100 / 300)

    def test_the_cost_is_what_deciding_our_moves_cost(self, agent: Agent, intent: Intent) -> None:
        n = outbound(agent, "Idris Haddad", intent=intent)
        n.input_tokens, n.output_tokens, n.cost = 1200, 300, Decimal("0.0123")
        n.save()

        score = selectors.negotiation_score(n)

        assert (score.input_tokens, score.output_tokens, score.tokens, score.cost) == (
            1200,
            300,
            1500,
            Decimal("0.0123"),
        )


class TestChart:
    def test_our_offers_theirs_our_limit_and_the_settlement_are_drawn(
        self, agent: Agent, intent: Intent
    ) -> None:
        guarded(agent, CEILING)
        n = outbound(agent, "Idris Haddad", intent=intent, turns=4, settlement=AGREED_AT_1000)
        turns = list(selectors.negotiation_turns(n))

        drawn = selectors.negotiation_chart(n, turns=turns, score=selectors.negotiation_score(n, turns=turns))

        assert drawn is not None
        assert [p.value for p in drawn.ours.points] == [901, 903]
        assert [p.value for p in drawn.theirs.points] == [902, 904]
        assert drawn.limit is not None
        assert drawn.limit.value == 1100
        assert drawn.aspiration is not None
        assert drawn.aspiration.value == pytest.approx(770)
        # The settlement is at the move that closed it, on the agreed value.
        assert drawn.settlement is not None
        assert (drawn.settlement.seq, drawn.settlement.value) == (4, 1000)

    def test_without_a_limit_or_a_deal_neither_is_drawn(self, agent: Agent, intent: Intent) -> None:
        n = outbound(agent, "Idris Haddad", intent=intent, turns=3, settlement=DECLINED)
        turns = list(selectors.negotiation_turns(n))

        drawn = selectors.negotiation_chart(n, turns=turns, score=selectors.negotiation_score(n, turns=turns))

        assert drawn is not None
        assert (drawn.limit, drawn.aspiration, drawn.settlement) == (None, None, None)
        assert len(drawn.ours.points) + len(drawn.theirs.points) == 3

    def test_no_turns_no_chart(self, agent: Agent, intent: Intent) -> None:
        n = outbound(agent, "Idris Haddad", intent=intent, turns=0)

        assert (
            selectors.negotiation_chart(n, turns=[], score=selectors.negotiation_score(n, turns=[])) is None
        )


class TestBoardOrder:
    @pytest.fixture
    def three(self, agent: Agent, intent: Intent) -> dict[str, Negotiation]:
        """Oldest first: agreed at 1,000 (surplus 100, 4 turns, cost 0.5), agreed at 1,090 (surplus
        10, 2 turns, cost 2), declined (no surplus, 6 turns, cost 1)."""
        guarded(agent, CEILING)
        made = {
            "hundred": outbound(agent, "A", intent=intent, turns=4, settlement=AGREED_AT_1000),
            "ten": outbound(
                agent,
                "B",
                intent=intent,
                turns=2,
                settlement={**AGREED_AT_1000, "terms": {"amount": 1090, "currency": "EUR"}},
            ),
            "none": outbound(agent, "C", intent=intent, turns=6, settlement=DECLINED),
        }
        for name, cost in (("hundred", "0.5"), ("ten", "2"), ("none", "1")):
            made[name].cost = Decimal(cost)
            made[name].save()
        return made

    def order(self, agent: Agent, sort: str) -> list[str]:
        return [
            n.counterparty_name for n in selectors.board_sorted(selectors.board(tenant=agent.tenant), sort)
        ]

    def test_by_surplus_either_way_with_the_unscored_last(self, agent: Agent, three: Any) -> None:
        assert self.order(agent, "-surplus") == ["A", "B", "C"]
        assert self.order(agent, "surplus") == ["B", "A", "C"]
        assert self.order(agent, "-share") == ["A", "B", "C"]

    def test_by_turns_and_by_cost_in_the_database(self, agent: Agent, three: Any) -> None:
        assert self.order(agent, "turns") == ["B", "A", "C"]
        assert self.order(agent, "-turns") == ["C", "A", "B"]
        assert self.order(agent, "cost") == ["A", "C", "B"]
        assert self.order(agent, "-cost") == ["B", "C", "A"]

    def test_newest_first_by_default_and_an_unknown_order_is_refused(self, agent: Agent, three: Any) -> None:
        assert self.order(agent, "") == ["C", "B", "A"]
        with pytest.raises(ValueError, match="not one of the board's orders"):
            self.order(agent, "counterparty")
