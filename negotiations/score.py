"""A negotiation scored for its own side: what the deal left it, and what getting there took.

Pure: no Django, no I/O. :func:`negotiations.selectors.negotiation_score` gathers the inputs (the
one place a negotiation is scored); the rules are the properties of :class:`Score`.

**Surplus** is what a negotiator calls the deal's value to its side over walking away: the
distance between its limit (reservation value) and the agreed value, in the term's own units
(EUR per day, say), positive when the deal is inside the limit. A buyer (ceiling) keeps
``limit - agreed``, a seller (floor) ``agreed - limit`` (Raiffa, *The Art and Science of
Negotiation*, 1982: the zone of agreement lies between the reservation values, and each side's
surplus is its distance from its own).

**Share** puts it against what the side set out to get: the surplus as a fraction of the way from
its limit to its aspiration (where it opened), 0 at the limit, 1 at the aspiration, above 1 for a
deal better than it asked. Only meaningful when the aspiration lies inside the limit (below a
ceiling, above a floor); otherwise, and without an aspiration, there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from negotiations.limits import Limit


@dataclass(frozen=True)
class Score:
    """One negotiation's score for its own side.

    ``term`` is the numeric term bargained over and ``currency`` its currency ("" for none);
    ``limit`` our limit on it (None when none is known), ``aspiration`` where we set out (None when
    unknown) and ``agreed`` the value the deal settled on (None without a deal on a value).
    ``turns`` counts the moves recorded, both sides'; ``input_tokens``, ``output_tokens`` and
    ``cost`` are what deciding our moves cost (``cost`` in the agent's model's currency).
    """

    term: str
    currency: str
    limit: Limit | None
    aspiration: float | None
    agreed: float | None
    turns: int
    input_tokens: int
    output_tokens: int
    cost: Decimal

    @property
    def surplus(self) -> float | None:
        """The agreed value's distance inside our limit, in the term's units (negative: outside
        it); None without a limit or an agreed value."""
        if self.limit is None or self.agreed is None:
            return None
        if self.limit.kind == "ceiling":
            return self.limit.value - self.agreed
        return self.agreed - self.limit.value

    @property
    def share(self) -> float | None:
        """The surplus as a fraction of the way from our limit to our aspiration; None without a
        surplus, or an aspiration inside the limit (see the module docstring)."""
        surplus = self.surplus
        if surplus is None or self.limit is None or self.aspiration is None:
            return None
        room = self.limit.value - self.aspiration
        if self.limit.kind == "floor":
            room = -room
        return surplus / room if room > 0 else None

    @property
    def tokens(self) -> int:
        """Tokens in and out, together."""
        return self.input_tokens + self.output_tokens
