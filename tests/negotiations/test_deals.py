"""The ``offline`` strategies find the deals there are (issue 18's goal), played through the platform's
own decide path by the benchmark's driver (bench/deals.py), so the benchmark cannot rot unseen.

Pure: agents are unsaved, nothing touches the database.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agents.models import OFFLINE, Agent
from bench.deals import CAPS, FLOORS, Game, figures, grid, parley_player
from negotiations import negotiator, offline
from negotiations.wire import Entry, Move, TaskRecord

STRATEGIES, PLAY = parley_player()


@pytest.fixture(scope="module", params=CAPS)
def played(request: pytest.FixtureRequest) -> list[Any]:
    """Every game of the grid at one cap."""
    return [PLAY(game) for game in grid(STRATEGIES, [request.param])]


def test_the_grid_covers_every_ordered_pair_both_openers_and_every_limit(played: list[Any]) -> None:
    pairs = {(r.game.seller, r.game.buyer) for r in played}
    assert pairs == set(itertools.product(STRATEGIES, STRATEGIES))
    assert {r.game.opener for r in played} == {"seller", "buyer"}
    assert {r.game.floor for r in played} == set(FLOORS)


@pytest.mark.parametrize(("seller", "buyer"), list(itertools.product(sorted(offline.STRATEGIES), repeat=2)))
def test_every_pair_agrees_where_there_is_a_zone_never_outside_a_limit_near_the_even_split(
    played: list[Any], seller: str, buyer: str
) -> None:
    results = [r for r in played if (r.game.seller, r.game.buyer) == (seller, buyer)]
    for opener in ("seller", "buyer"):
        f = figures([r for r in results if r.game.opener == opener])
        assert f.rate >= 0.99, f
        assert f.false == 0, f
        assert f.distance <= 0.10, f


def test_without_a_zone_nobody_agrees(played: list[Any]) -> None:
    apart = [r for r in played if r.game.ceiling < r.game.floor]
    assert apart
    assert all(r.price is None for r in apart)


def test_the_demo_case_settles_between_the_limits() -> None:
    """Tomas's ceiling 1,000 against Idris's floor 950, Boulware both, ten turns: it used to decline."""
    result = PLAY(Game("boulware", "boulware", 950, 1000, "buyer", 10))

    assert result.price is not None
    assert 950 <= result.price <= 1000


@pytest.mark.parametrize("strategy", sorted(offline.STRATEGIES))
@pytest.mark.parametrize("cap", [1, 2, 6])
def test_against_a_counterparty_that_never_concedes_we_end_cleanly_inside_our_limit(
    strategy: str, cap: int
) -> None:
    """They ask 1,200 every time against our ceiling of 1,100: every offer of ours keeps to the
    limit, we never accept, and our last move rejects, which ends the Task."""
    agent = Agent(
        slug="buyer",
        name="Buyer",
        model=OFFLINE,
        strategy=strategy,
        terms="amount (number, EUR), currency",
        term_guards=[{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}],
    )
    history: list[Entry] = []
    for index in range(cap):
        asking = Move("counter", "1,200.", {"amount": 1200, "currency": "EUR"}, f"t{index}")
        history.append(Entry("agent", asking))
        record = TaskRecord("input-required", tuple(history))
        move = negotiator.decide(agent=agent, record=record, our_role="user", guidance=[], max_moves=cap).move
        history.append(Entry("user", move))
        if move.action in negotiator.terminal_actions(agent):
            break
    ours = [e.move for e in history if e.role == "user" and e.move is not None]
    assert ours[-1].action == "reject"
    assert len(ours) == cap
    assert all(m.terms is None or m.terms["amount"] <= 1100 for m in ours)
