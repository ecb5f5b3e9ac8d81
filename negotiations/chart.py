"""The exchange drawn: each side's offers over the turns on one chart, as the geometry of an SVG.

Pure: no Django, no I/O. :func:`draw` places the offers (:class:`Offer`, the value each move named
on the numeric term, :func:`negotiations.offline.move_value`) on a plot of :data:`WIDTH` by
:data:`HEIGHT` user units: the turn's ``seq`` across, the value up. Our own limit and aspiration,
when given, are horizontal lines, and the settlement is a point of its own. Only our side's limit
is ever drawn: the counterparty's is not ours to know, and the chart is for our own tenant's pages
(``templates/negotiations/_chart.html``), never for anything the counterparty receives.

**Scale.** Across, one slot per turn from the first turn drawn to the last, each point in the middle
of its slot. Up, from a multiple of a round step (1, 2 or 5 times a power of ten, about four steps
across the values drawn) below the lowest value to one above the highest; every value drawn,
limit, aspiration and settlement included, lies inside it. Coordinates are rounded to 0.1. A value
beyond ±:data:`REACH` (a counterparty may offer 1.7e308, a finite JSON number) is drawn at that
edge, still labelled with what it is: a scale holding it would overflow a double.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from negotiations.limits import figure

Side = Literal["ours", "theirs"]

# The SVG's user units (its viewBox), and the margins that hold the axes' labels.
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44
# Most turns labelled on the horizontal axis; with more, every n-th.
MOST_TURN_LABELS = 12
# About how many steps the vertical axis has.
STEPS = 4
# The largest magnitude drawn where it is; beyond, at this edge (module docstring).
REACH = 1e15


@dataclass(frozen=True)
class Offer:
    """The value ``value`` a move of ``side`` named on the numeric term at turn ``seq``."""

    seq: int
    side: Side
    value: float


@dataclass(frozen=True)
class Point:
    """An offer (or the settlement) placed: ``x``, ``y`` in user units, of turn ``seq`` at ``value``."""

    x: float
    y: float
    seq: int
    value: float

    @property
    def label(self) -> str:
        return figure(self.value)


@dataclass(frozen=True)
class Series:
    """One side's offers placed, in turn order."""

    side: Side
    points: tuple[Point, ...]

    @property
    def path(self) -> str:
        """The SVG path through the points: "M 96.0 40.0 L 160.0 80.0"; "" for none."""
        return " ".join(f"{'M' if i == 0 else 'L'} {p.x} {p.y}" for i, p in enumerate(self.points))


@dataclass(frozen=True)
class Level:
    """A horizontal line across the plot at ``value`` (our limit or our aspiration), at height ``y``."""

    value: float
    y: float

    @property
    def label(self) -> str:
        return figure(self.value)


@dataclass(frozen=True)
class Tick:
    """An axis label: ``at`` user units along its axis, reading ``label``."""

    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    """The chart's geometry. The plot spans ``left``..``right`` across and ``top``..``bottom`` up
    (SVG's y grows downwards); ``width`` and ``height`` are the viewBox's. ``limit`` and
    ``aspiration`` are None when not drawn, ``settlement`` when there is no agreed value."""

    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    ours: Series
    theirs: Series
    limit: Level | None
    aspiration: Level | None
    settlement: Point | None
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]

    def description(self, *, us: str, them: str, unit: str = "") -> str:
        """The chart in words, its text alternative: what each side offered, from first to last,
        our limit and aspiration where drawn, and the settlement. ``us`` and ``them`` name the
        sides ("Tomas's agent", "Idris Haddad"), ``unit`` the values' ("EUR per day", "" for none).
        """
        per = f" {unit}" if unit else ""
        said = [_offered(us, self.ours, per), _offered(them, self.theirs, per)]
        if self.limit is not None:
            said.append(f"Our limit: {self.limit.label}{per}.")
        if self.aspiration is not None:
            said.append(f"Our aspiration: {self.aspiration.label}{per}.")
        if self.settlement is not None:
            said.append(f"Settled at {self.settlement.label}{per} on turn {self.settlement.seq}.")
        return " ".join(said)


def draw(
    offers: list[Offer],
    *,
    limit: float | None = None,
    aspiration: float | None = None,
    settlement: tuple[int, float] | None = None,
) -> Chart | None:
    """The chart of ``offers`` (any order), with our ``limit`` and ``aspiration`` drawn where given and
    the ``settlement`` as (turn seq, agreed value); None when there is nothing to draw (no offer and no
    settlement). See the module docstring for the scale."""
    if not offers and settlement is None:
        return None
    seqs = [o.seq for o in offers] + ([settlement[0]] if settlement else [])
    values = [o.value for o in offers] + [v for v in (limit, aspiration) if v is not None]
    values += [settlement[1]] if settlement else []
    values = [_reached(v) for v in values]
    first, last = min(seqs), max(seqs)
    low, high, step = _span(min(values), max(values))
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    slot = (right - LEFT) / (last - first + 1)

    def x(seq: int) -> float:
        return round(LEFT + (seq - first + 0.5) * slot, 1)

    def y(value: float) -> float:
        return round(bottom - (_reached(value) - low) / (high - low) * (bottom - TOP), 1)

    def series(side: Side) -> Series:
        mine = sorted((o for o in offers if o.side == side), key=lambda o: o.seq)
        return Series(side, tuple(Point(x(o.seq), y(o.value), o.seq, o.value) for o in mine))

    every = math.ceil((last - first + 1) / MOST_TURN_LABELS)
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=right,
        top=TOP,
        bottom=bottom,
        ours=series("ours"),
        theirs=series("theirs"),
        limit=Level(limit, y(limit)) if limit is not None else None,
        aspiration=Level(aspiration, y(aspiration)) if aspiration is not None else None,
        settlement=Point(x(settlement[0]), y(settlement[1]), *settlement) if settlement else None,
        x_ticks=tuple(Tick(x(seq), str(seq)) for seq in range(first, last + 1, every)),
        y_ticks=tuple(Tick(y(v), figure(v)) for v in _steps(low, high, step)),
    )


def _reached(value: float) -> float:
    """``value`` within ±:data:`REACH`, where it is drawn."""
    return max(-REACH, min(REACH, value))


def nice_step(raw: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least ``raw`` (> 0): 180 gives 200."""
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _span(lowest: float, highest: float) -> tuple[float, float, float]:
    """(low, high, step) of the vertical axis holding ``lowest``..``highest`` (module docstring)."""
    spread = highest - lowest
    step = nice_step(spread / STEPS if spread else (abs(highest) / STEPS or 1))
    low = math.floor(lowest / step) * step
    high = math.ceil(highest / step) * step
    if high - low < step * 2:  # one value, or values on one step: room above and below
        low, high = low - step, high + step
    return low, high, step


def _steps(low: float, high: float, step: float) -> list[float]:
    # Rounded, so that 0.1 steps read "0.30", not "0.30000000000000004".
    return [round(low + i * step, 6) for i in range(round((high - low) / step) + 1)]


def _offered(who: str, series: Series, per: str) -> str:
    values = [p.value for p in series.points]
    if not values:
        return f"{who} named no amount."
    moves = f"{len(values)} offer{'s' if len(values) != 1 else ''}"
    if len(values) == 1:
        return f"{who} made {moves}: {figure(values[0])}{per}."
    return f"{who} made {moves}, from {figure(values[0])} to {figure(values[-1])}{per}."
