"""Benchmark: how often two negotiators with a zone of agreement find a deal, and how they split it.

The grid (issue 18): bilateral price negotiations, seller floor S in {800, 900,
950, 1000}, buyer ceiling B in {850, 950, 1000, 1100, 1300}, every ordered pair
of strategies, either side opening, turn caps (each side's ``max_turns``) 6, 10
and 20. A pair has a zone of agreement when B >= S.

Parley's side plays the ``offline`` strategies in process through
:func:`negotiations.negotiator.decide`, the path every platform turn takes
(guards checked, moves stamped), on unsaved agents: the opener is the outbound
side (role ``user``), the responder answers the Task (role ``agent``) and its
reply stamps the Task's state, as the gateway does; the opener stops when its
own moves reach its cap, as the pump does. The verdict is
:func:`negotiations.verdict.verify_agreement` on the final Task.

NegMAS's time-based negotiators (BoulwareTBNegotiator, LinearTBNegotiator,
ConcederTBNegotiator, NaiveTitForTatNegotiator) play the same grid in its
SAOMechanism beside ours: the price is one integer issue, each side's utility
is linear in its surplus and its reserved value is its limit's, and the
mechanism's ``n_steps`` is the cap. NegMAS is installed for the benchmark only
(``pip install -e ".[bench]"``, which ``make bench`` does).

For each cap and strategy pair it prints: agreement rate where there is a zone,
agreements outside a limit (false agreements), each side's mean share of the
surplus B - S, the mean distance of the price from the even split (B + S) / 2
as a share of the surplus (absolute, over agreements with B > S), and the mean
number of moves to agreement.

    .venv/bin/python bench/deals.py [--caps 6 10 20] [--smoke]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = (800, 900, 950, 1000)
CEILINGS = (850, 950, 1000, 1100, 1300)
CAPS = (6, 10, 20)
OPENERS = ("seller", "buyer")


@dataclass(frozen=True)
class Game:
    """One cell of the grid: who plays what, the limits, who opens, the cap."""

    seller: str
    buyer: str
    floor: int
    ceiling: int
    opener: str
    cap: int


@dataclass(frozen=True)
class Result:
    """How one game ended: the agreed price (None: no deal) and the moves made by both sides."""

    game: Game
    price: float | None
    moves: int


Player = Callable[[Game], Result]


def grid(strategies: Iterable[str], caps: Iterable[int]) -> list[Game]:
    """Every game of the grid for ``strategies`` (ordered seller x buyer pairs) at ``caps``."""
    names = list(strategies)
    return [
        Game(seller, buyer, floor, ceiling, opener, cap)
        for cap in caps
        for seller, buyer in itertools.product(names, names)
        for floor, ceiling in itertools.product(FLOORS, CEILINGS)
        for opener in OPENERS
    ]


def parley_player() -> tuple[list[str], Player]:
    """Parley's ``offline`` strategies and a function that plays one game through ``decide``."""
    from agents.models import OFFLINE, Agent
    from negotiations import negotiator, offline
    from negotiations.verdict import verify_agreement
    from negotiations.wire import Entry, TaskRecord

    terms = "amount (number, EUR), currency"

    def agent(name: str, strategy: str, op: str, limit: int, cap: int) -> Agent:
        guard = {"term": "amount", "op": op, "value": limit, "currency": "EUR"}
        return Agent(
            slug=name,
            name=name,
            model=OFFLINE,
            strategy=strategy,
            terms=terms,
            term_guards=[guard],
            max_turns=cap,
        )

    def play(game: Game) -> Result:
        seller = agent("seller", game.seller, ">=", game.floor, game.cap)
        buyer = agent("buyer", game.buyer, "<=", game.ceiling, game.cap)
        opener, responder = (seller, buyer) if game.opener == "seller" else (buyer, seller)
        history: list[Entry] = []
        state = "submitted"
        opened = 0
        while state in ("submitted", "working", "input-required"):
            if opened >= game.cap:
                break  # the pump's out-of-turns
            for mover, role in ((opener, "user"), (responder, "agent")):
                decision = negotiator.decide(
                    agent=mover,
                    record=TaskRecord(state="working", history=tuple(history)),
                    our_role=role,  # type: ignore[arg-type]
                    guidance=[],
                    max_moves=game.cap,
                )
                history.append(Entry(role=role, move=decision.move))  # type: ignore[arg-type]
                if role == "user":
                    opened += 1
                else:
                    state = negotiator.task_state_for(responder, decision.move.action)
        verdict = verify_agreement(TaskRecord(state=state, history=tuple(history)))
        price = float(verdict.terms["amount"]) if verdict.status == "agreed" and verdict.terms else None
        return Result(game, price, len(history))

    return sorted(offline.STRATEGIES), play


def negmas_player() -> tuple[list[str], Player]:
    """NegMAS's time-based negotiators and a function that plays one game in its SAOMechanism."""
    from negmas import (
        BoulwareTBNegotiator,
        ConcederTBNegotiator,
        LinearTBNegotiator,
        NaiveTitForTatNegotiator,
        SAOMechanism,
        make_issue,
    )
    from negmas.preferences import LinearAdditiveUtilityFunction
    from negmas.preferences.value_fun import AffineFun

    kinds = {
        "BoulwareTB": BoulwareTBNegotiator,
        "ConcederTB": ConcederTBNegotiator,
        "LinearTB": LinearTBNegotiator,
        "NaiveTitForTat": NaiveTitForTatNegotiator,
    }
    # The prices the grid's openings span (Parley opens a floor at 1.4x and a ceiling at 0.7x).
    low, high = int(0.7 * min(CEILINGS)), int(1.4 * max(FLOORS))

    def play(game: Game) -> Result:
        issues = [make_issue((low, high), "price")]
        span = high - low
        # Utility 1 at the best price, the limit's utility as the reserved value.
        seller_ufun = LinearAdditiveUtilityFunction(
            [AffineFun(1 / span, -low / span)], issues=issues, reserved_value=(game.floor - low) / span
        )
        buyer_ufun = LinearAdditiveUtilityFunction(
            [AffineFun(-1 / span, high / span)], issues=issues, reserved_value=(high - game.ceiling) / span
        )
        mechanism = SAOMechanism(issues=issues, n_steps=game.cap)
        seller = kinds[game.seller](name="seller")
        buyer = kinds[game.buyer](name="buyer")
        first, second = (seller, buyer) if game.opener == "seller" else (buyer, seller)
        mechanism.add(first, ufun=seller_ufun if first is seller else buyer_ufun)
        mechanism.add(second, ufun=seller_ufun if second is seller else buyer_ufun)
        state = mechanism.run()
        price = float(state.agreement[0]) if state.agreement is not None else None
        return Result(game, price, len(mechanism.full_trace))

    return sorted(kinds), play


def report(title: str, results: list[Result]) -> None:
    """Print the figures per cap and strategy pair, and for each cap overall."""
    print(f"\n{title}")
    print(
        f"{'cap':>3}  {'seller':<14} {'buyer':<14} {'zone':>4} {'agreed':>7} {'false':>5} "
        f"{'seller%':>7} {'buyer%':>7} {'|split|%':>8} {'moves':>5}"
    )
    for cap in sorted({r.game.cap for r in results}):
        at_cap = [r for r in results if r.game.cap == cap]
        pairs = sorted({(r.game.seller, r.game.buyer) for r in at_cap})
        for seller, buyer in pairs:
            played = [r for r in at_cap if (r.game.seller, r.game.buyer) == (seller, buyer)]
            _line(str(cap), seller, buyer, played)
        _line(str(cap), "all", "all", at_cap)


@dataclass(frozen=True)
class Figures:
    """The benchmark's figures over some results: games with a zone of agreement, agreements among
    them, agreements outside a limit (any game), the seller's mean share of the surplus and the mean
    absolute distance of the price from the even split (both over agreements with B > S, as shares
    of B - S; nan without one), and the mean moves to agreement."""

    zone: int
    agreed: int
    false: int
    seller_share: float
    distance: float
    moves: float

    @property
    def rate(self) -> float:
        return self.agreed / self.zone if self.zone else float("nan")


def figures(results: list[Result]) -> Figures:
    """The :class:`Figures` of ``results``."""
    zone = [r for r in results if r.game.ceiling >= r.game.floor]
    agreed = [r for r in zone if r.price is not None]
    false = [r for r in results if r.price is not None and not r.game.floor <= r.price <= r.game.ceiling]
    shares = [
        (r.price - r.game.floor) / (r.game.ceiling - r.game.floor)
        for r in agreed
        if r.price is not None and r.game.ceiling > r.game.floor
    ]
    nan = float("nan")
    return Figures(
        zone=len(zone),
        agreed=len(agreed),
        false=len(false),
        seller_share=statistics.fmean(shares) if shares else nan,
        distance=statistics.fmean(abs(share - 0.5) for share in shares) if shares else nan,
        moves=statistics.fmean(r.moves for r in agreed) if agreed else nan,
    )


def _line(cap: str, seller: str, buyer: str, results: list[Result]) -> None:
    f = figures(results)
    print(
        f"{cap:>3}  {seller:<14} {buyer:<14} {f.zone:>4} {f.rate:>7.1%} {f.false:>5} "
        f"{f.seller_share:>7.1%} {1 - f.seller_share:>7.1%} {f.distance:>8.1%} {f.moves:>5.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", type=int, nargs="+", default=list(CAPS))
    parser.add_argument("--smoke", action="store_true", help="one cap, Parley only: that the benchmark runs")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "parley.settings.base")
    os.environ.setdefault("DATABASE_URL", "sqlite:///:memory:")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    caps = [6] if args.smoke else args.caps
    names, play = parley_player()
    report("Parley offline strategies (negotiations.negotiator.decide)", [play(g) for g in grid(names, caps)])
    if args.smoke:
        return
    names, play = negmas_player()
    report("NegMAS time-based negotiators (SAOMechanism)", [play(g) for g in grid(names, caps)])


if __name__ == "__main__":
    main()
