"""The chart's geometry (negotiations.chart) and the score's rules (negotiations.score), pure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from negotiations import chart
from negotiations.chart import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, Offer
from negotiations.limits import Limit
from negotiations.score import Score

# A buyer's exchange: we open at 770 and come up, they open at 1,300 and come down; we agree at 1,000.
EXCHANGE = [
    Offer(1, "ours", 770),
    Offer(2, "theirs", 1300),
    Offer(3, "ours", 900),
    Offer(4, "theirs", 1000),
]
PLOT_BOTTOM = HEIGHT - BOTTOM  # 256
PLOT_RIGHT = WIDTH - RIGHT  # 624


class TestDraw:
    def test_points_sit_in_their_turns_slots_and_at_their_values(self) -> None:
        drawn = chart.draw(EXCHANGE, limit=1100, aspiration=770, settlement=(5, 1000))
        assert drawn is not None

        # Turns 1..5: five slots of 112 across 560 units; the values 770..1300 on steps of 200
        # (a quarter of 530, made round) from 600 to 1,400: 0.3 units a value up 240.
        assert [(p.seq, p.x, p.y, p.value) for p in drawn.ours.points] == [
            (1, 120.0, 205.0, 770),
            (3, 344.0, 166.0, 900),
        ]
        assert [(p.seq, p.x, p.y) for p in drawn.theirs.points] == [(2, 232.0, 46.0), (4, 456.0, 136.0)]
        assert drawn.ours.path == "M 120.0 205.0 L 344.0 166.0"
        assert drawn.theirs.path == "M 232.0 46.0 L 456.0 136.0"
        assert (drawn.left, drawn.right, drawn.top, drawn.bottom) == (LEFT, PLOT_RIGHT, TOP, PLOT_BOTTOM)

    def test_the_axes_are_labelled_in_round_steps_and_by_turn(self) -> None:
        drawn = chart.draw(EXCHANGE, limit=1100, aspiration=770, settlement=(5, 1000))
        assert drawn is not None

        assert [(t.at, t.label) for t in drawn.y_ticks] == [
            (256.0, "600"),
            (196.0, "800"),
            (136.0, "1,000"),
            (76.0, "1,200"),
            (16.0, "1,400"),
        ]
        assert [t.label for t in drawn.x_ticks] == ["1", "2", "3", "4", "5"]

    def test_our_limit_aspiration_and_the_settlement_are_marked(self) -> None:
        drawn = chart.draw(EXCHANGE, limit=1100, aspiration=770, settlement=(5, 1000))
        assert drawn is not None

        assert drawn.limit is not None
        assert (drawn.limit.value, drawn.limit.y, drawn.limit.label) == (
            1100,
            106.0,
            "1,100",
        )
        assert drawn.aspiration is not None
        assert drawn.aspiration.y == 205.0
        assert drawn.settlement is not None
        assert (drawn.settlement.seq, drawn.settlement.x, drawn.settlement.y) == (5, 568.0, 136.0)

    def test_without_a_limit_aspiration_or_settlement_none_is_marked(self) -> None:
        drawn = chart.draw(EXCHANGE)
        assert drawn is not None

        assert drawn.limit is None
        assert drawn.aspiration is None
        assert drawn.settlement is None
        # The scale is the offers' alone: 770..1300, and four turns.
        assert (drawn.y_ticks[0].label, drawn.y_ticks[-1].label) == ("600", "1,400")
        assert len(drawn.x_ticks) == 4

    def test_every_value_marked_stays_inside_the_plot(self) -> None:
        # A limit far above every offer stretches the scale rather than leaving the plot.
        drawn = chart.draw(EXCHANGE, limit=5000, aspiration=400)
        assert drawn is not None

        marks = [*drawn.ours.points, *drawn.theirs.points]
        levels = [drawn.limit, drawn.aspiration]
        assert all(TOP <= p.y <= PLOT_BOTTOM and LEFT <= p.x <= PLOT_RIGHT for p in marks)
        assert all(level is not None and TOP <= level.y <= PLOT_BOTTOM for level in levels)

    def test_each_side_has_its_own_series_and_one_side_may_have_none(self) -> None:
        drawn = chart.draw([Offer(1, "theirs", 800)])
        assert drawn is not None

        assert drawn.ours.points == ()
        assert drawn.ours.path == ""
        assert [p.value for p in drawn.theirs.points] == [800]
        # One value: a step either side of it, so the point is not on the plot's edge.
        assert [t.label for t in drawn.y_ticks] == ["600", "800", "1,000"]

    def test_nothing_to_draw_is_no_chart(self) -> None:
        assert chart.draw([]) is None
        assert chart.draw([], limit=1100) is None

    def test_a_long_exchange_labels_every_nth_turn(self) -> None:
        offers = [Offer(seq, "ours" if seq % 2 else "theirs", 900 + seq) for seq in range(1, 31)]
        drawn = chart.draw(offers)
        assert drawn is not None

        assert [t.label for t in drawn.x_ticks] == ["1", "4", "7", "10", "13", "16", "19", "22", "25", "28"]

    @pytest.mark.parametrize(("raw", "step"), [(180, 200), (0.3, 0.5), (1, 1), (12.5, 20), (501, 1000)])
    def test_steps_are_one_two_or_five_times_a_power_of_ten(self, raw: float, step: float) -> None:
        assert chart.nice_step(raw) == pytest.approx(step)

    def test_the_text_alternative_says_what_is_drawn(self) -> None:
        drawn = chart.draw(EXCHANGE, limit=1100, aspiration=770, settlement=(5, 1000))
        assert drawn is not None

        assert drawn.description(us="Tomas's agent", them="Idris Haddad", unit="EUR") == (
            "Tomas's agent made 2 offers, from 770 to 900 EUR. "
            "Idris Haddad made 2 offers, from 1,300 to 1,000 EUR. "
            "Our limit: 1,100 EUR. Our aspiration: 770 EUR. Settled at 1,000 EUR on turn 5."
        )
        bare = chart.draw([Offer(1, "theirs", 800)])
        assert bare is not None
        assert bare.description(us="We", them="They") == "We named no amount. They made 1 offer: 800."


def score(limit: Limit | None, agreed: float | None, aspiration: float | None = None) -> Score:
    return Score(
        term="amount",
        currency="EUR",
        limit=limit,
        aspiration=aspiration,
        agreed=agreed,
        turns=6,
        input_tokens=120,
        output_tokens=30,
        cost=Decimal("0.0042"),
    )


class TestScore:
    def test_a_buyer_keeps_what_it_did_not_pay_below_its_ceiling(self) -> None:
        scored = score(Limit("amount", 1100, "ceiling"), 1000, aspiration=770)

        assert scored.surplus == 100
        assert scored.share == pytest.approx(100 / 330)

    def test_a_seller_keeps_what_it_got_above_its_floor(self) -> None:
        scored = score(Limit("amount", 950, "floor"), 1000, aspiration=1330)

        assert scored.surplus == 50
        assert scored.share == pytest.approx(50 / 380)

    def test_a_deal_at_the_aspiration_is_all_of_it_and_past_it_more(self) -> None:
        ceiling = Limit("amount", 1100, "ceiling")

        assert score(ceiling, 770, aspiration=770).share == 1
        assert score(ceiling, 1100, aspiration=770).share == 0
        assert score(ceiling, 660, aspiration=770).share == pytest.approx(440 / 330)

    def test_a_deal_outside_the_limit_is_a_negative_surplus(self) -> None:
        assert score(Limit("amount", 950, "floor"), 900, aspiration=1330).surplus == -50

    def test_no_limit_known_no_surplus(self) -> None:
        scored = score(None, 1000)

        assert scored.surplus is None
        assert scored.share is None

    def test_not_agreed_no_surplus(self) -> None:
        scored = score(Limit("amount", 1100, "ceiling"), None, aspiration=770)

        assert scored.surplus is None
        assert scored.share is None

    @pytest.mark.parametrize("aspiration", [None, 1100, 1200])
    def test_no_share_without_an_aspiration_inside_the_limit(self, aspiration: float | None) -> None:
        scored = score(Limit("amount", 1100, "ceiling"), 1000, aspiration=aspiration)

        assert scored.surplus == 100
        assert scored.share is None

    def test_turns_and_cost_are_carried_and_tokens_added(self) -> None:
        scored = score(None, None)

        assert (scored.turns, scored.tokens, scored.cost) == (6, 150, Decimal("0.0042"))


def test_an_absurd_offer_is_drawn_at_the_edge_and_labelled_as_it_is() -> None:
    """A counterparty's 1.7e308 and -1.7e308 are finite JSON numbers; a scale holding them would
    overflow (draw raised OverflowError on them). They are drawn at ±REACH, inside the plot."""
    offers = [Offer(1, "ours", 700), Offer(2, "theirs", 1.7e308), Offer(3, "theirs", -1.7e308)]
    drawn = chart.draw(offers, limit=1000)
    assert drawn is not None
    ys = [p.y for p in drawn.ours.points + drawn.theirs.points]
    assert all(TOP <= y <= HEIGHT - BOTTOM for y in ys)
    assert [p.value for p in drawn.theirs.points] == [1.7e308, -1.7e308]
    assert drawn.theirs.points[0].y == min(ys)
    assert drawn.theirs.points[1].y == max(ys)
