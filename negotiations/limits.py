"""The party's limit on a numeric term, read from its own words — or why it cannot be.

The ``offline`` negotiator needs a reservation value (docs/design.md#words): the most its party pays (a
ceiling) or the least it takes (a floor). Where no term guard gives one, it asks the party and
reads the answer, which reaches the negotiation as standing guidance. A misread limit commits the
party to a binding deal outside what it said, so a line is read only when it states one limit
unambiguously; otherwise :func:`read_limit` says what was unclear, and the negotiator asks again
saying so (:func:`negotiations.offline.limit_question`). One rule, used by the negotiator and by
the messages that tell the party, when it answers, what was understood.

**Numbers.** Digits with thousands separators (``,`` ``.`` ``'`` and its typographic U+2019, a
normal, thin or no-break space before a group of three) and an optional decimal part of one or
two digits after ``.`` or ``,``: "1,100", "1.100", "1 100", "1'100", "1.100,50", "1,100.50". A
``k`` suffix (or
"thousand", "million", …) multiplies. Anything else made of digits and separators ("1e3",
"1100.505", "11,00,000") is not read. A number that is a date, a time or another quantity
("2026-12-01", "10:30", "Day 2", "2nd", "2 days", "10%") is never an amount.

**One amount.** A line naming several numbers, any of them a date or a quantity, is not read:
"up to 1100 for 2 days" may mean 550 a day. A range ("between 900 and 1100", "900-1100", "from
900 to 1,100") counts as one: the bound that matters for the party's side, the upper for a
ceiling, the lower for a floor.

**Direction.** Ceiling words ("up to", "at most", "max", "maximum", "no more than", "or less",
"bis zu", "höchstens", …) and floor words ("at least", "min", "minimum", "no less than", "or
more", "mindestens", …); a comparative reads by its negation: "not above", "never over", "don't
go above", "no more than" are a ceiling, "not below", "never under", "no less than" a floor. A
comparative without one ("above 900 works", "under 1100") reads as said, unless the line also has
a negative word elsewhere ("more than 1,100 is too much"), which may turn it round: then it is
not read. Words of both kinds, or a negation before a ceiling or floor word, are not read. A line
with no direction takes the party's side where that is known (the direction of a limit it gave
earlier), and is not read otherwise: "1100" alone may be either. A direction against the known
side is not read either.

**Currency and period.** A currency named ("€", "$", "£", "EUR", "dollars", …) must be the
term's; a period named ("a day", "per month", "/h", "monthly", "pro Tag", …) must include the
term's unit's period ("EUR per day"), when the unit has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from negotiations.rules import CURRENCY

Kind = Literal["ceiling", "floor"]

# The aspiration when no guard names one: a buyer opens at 70% of its ceiling, a seller at its floor
# divided by 0.7 (about 143%): the same ratio either way, which lets each side read the other's limit
# (offline.aim).
OPENING_FACTOR: dict[Kind, float] = {"ceiling": 0.7, "floor": 1 / 0.7}
# What the party's side means in its own words, for questions and messages.
SIDE_WORDS: dict[Kind, str] = {"ceiling": "the most you will pay", "floor": "the least you will take"}


@dataclass(frozen=True)
class Limit:
    """The party's reservation value on ``term``: the most it pays (ceiling) or the least it takes (floor).

    ``aspiration`` is where the concession starts; None means :data:`OPENING_FACTOR` times ``value``.
    """

    term: str
    value: float
    kind: Kind
    aspiration: float | None = None

    @property
    def opening(self) -> float:
        return self.aspiration if self.aspiration is not None else self.value * OPENING_FACTOR[self.kind]


@dataclass(frozen=True)
class Reading:
    """What one answer of the party says of its limit on ``term`` (in ``currency``, ``unit``).

    ``said`` is the answer as given; ``limit`` the limit read from it, or None with ``problem``,
    why none could be: a clause about the answer, "it names several numbers (2 and 1100)".
    """

    said: str
    term: str
    currency: str = ""
    unit: str = ""
    limit: Limit | None = None
    problem: str = ""

    @property
    def shown(self) -> str:
        """The term as the party is asked about it: "amount (EUR per day)"."""
        return f"{self.term} ({self.unit})" if self.unit else self.term

    @property
    def message(self) -> str:
        """What the party is told at once: "Understood: at most 1,100 EUR per day for amount." or
        "Your answer gives no usable limit on amount (EUR per day): it names no number."."""
        if self.limit is None:
            return f"Your answer gives no usable limit on {self.shown}: {self.problem}."
        bound = "at most" if self.limit.kind == "ceiling" else "at least"
        per = self.unit or self.currency
        amount = f"{figure(self.limit.value)} {per}".strip()
        return f"Understood: {bound} {amount} for {self.term}."


def figure(value: float) -> str:
    """``value`` for people: "1,100", "1,100.50"."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.2f}"


def read_limit(
    said: str, *, term: str, currency: str = "", unit: str = "", side: Kind | None = None
) -> Reading:
    """Read the party's limit on ``term`` from ``said`` (see the module docstring for the rules).

    ``currency`` is the term's ("" for none), ``unit`` its unit ("EUR per day", "" for none),
    ``side`` the party's side where it is known (None: the answer must say). Never raises: an
    answer that gives no usable limit is a :class:`Reading` with ``limit`` None and the ``problem``.
    """
    reading = Reading(said=said, term=term, currency=currency, unit=unit)
    text = said.translate(_SAME_LENGTH)
    numbers = _numbers(text)
    if all(n.kind == "other" for n in numbers):
        return _refused(reading, _no_amount(numbers))
    items = _ranged(text, numbers)
    if len(items) > 1:
        written = [" to ".join(n.written for n in item) for item in items]
        return _refused(reading, f"it names several numbers ({_listed(written)})")
    [item] = items
    if item[0].kind == "unreadable":
        return _refused(reading, f"it names {item[0].written}, which I cannot read as an amount")
    if problem := _other_currency(text, term, currency) or _other_period(text, term, unit):
        return _refused(reading, problem)
    low, high = item[0].value, item[-1].value
    plain = figure(low) if low == high else f"{figure(low)} to {figure(high)}"
    kind, problem = _direction(_masked(text, item), side, plain)
    if kind is None:
        return _refused(reading, problem)
    return Reading(
        said=said,
        term=term,
        currency=currency,
        unit=unit,
        limit=Limit(term=term, value=high if kind == "ceiling" else low, kind=kind),
    )


def limit_from_guidance(
    guidance: list[str], *, term: str, currency: str = "", unit: str = ""
) -> Reading | None:
    """The party's limit on ``term`` in its standing ``guidance`` (oldest first), read by :func:`read_limit`.

    The newest line that names an amount decides; lines without one (words, or only a date or a
    quantity) say nothing of the limit and are passed over, and an older line that gave a limit
    tells the party's side. When that gives no limit, the reading of the newest line is returned
    (the answer the party is asked about again). None for no guidance at all.
    """
    lines = [line for line in guidance if line.strip()]
    if not lines:
        return None
    about = [line for line in lines if names_an_amount(line)]
    side: Kind | None = None
    for line in reversed(about[:-1]):
        earlier = read_limit(line, term=term, currency=currency, unit=unit).limit
        if earlier is not None:
            side = earlier.kind
            break
    if about:
        reading = read_limit(about[-1], term=term, currency=currency, unit=unit, side=side)
        if reading.limit is not None or about[-1] is lines[-1]:
            return reading
    return read_limit(lines[-1], term=term, currency=currency, unit=unit, side=side)


def names_an_amount(said: str) -> bool:
    """Whether ``said`` names a number that may be an amount (not only dates and quantities)."""
    return any(n.kind != "other" for n in _numbers(said.translate(_SAME_LENGTH)))


# --- Numbers ------------------------------------------------------------------------------

# Apostrophes and spaces as one of each, without changing the text's length (spans stay the said's).
_SAME_LENGTH = str.maketrans({"\u2019": "'", "\u00a0": " ", "\u2009": " ", "\u202f": " "})
_DATE_OR_TIME = re.compile(
    r"(?<![\d.,])(?:\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[./]\d{1,2}[./]\d{2,4}|\d{1,2}:\d{2})(?![\d])"
)
# Digits joined by separators: any of , . ' between digits, a space only before a group of three.
_DIGITS = re.compile(r"(?<![\d.,'])\d+(?:(?:[.,']|\s(?=\d{3}(?!\d)))\d+)*")
_GROUPED = re.compile(r"\d{1,3}(?:([.,' ])\d{3})(?:\1\d{3})*")
_DECIMAL = re.compile(r"(?P<whole>.*\d)(?P<mark>[.,])(?P<fraction>\d{1,2})")
_MULTIPLIERS = {
    "k": 1e3,
    "thousand": 1e3,
    "tausend": 1e3,
    "tsd": 1e3,
    "m": 1e6,
    "mn": 1e6,
    "mio": 1e6,
    "million": 1e6,
    "millions": 1e6,
    "millionen": 1e6,
    "bn": 1e9,
    "billion": 1e9,
    "billions": 1e9,
    "mrd": 1e9,
    "milliarde": 1e9,
    "milliarden": 1e9,
}
_MULTIPLIER = re.compile(
    r"\s?(" + "|".join(sorted(_MULTIPLIERS, key=len, reverse=True)) + r")\.?(?!\w)", re.I
)
_SCIENTIFIC = re.compile(r"e[+-]?\d+", re.I)
# A quantity that is not money: a unit right after the number, or a counter word right before it.
_UNIT_AFTER = re.compile(
    r"(?:%|(?:st|nd|rd|th|x|am|pm|h)(?!\w)|\s?(?:%|percent|pct|hours?|hrs?|days?|weeks?|months?|years?"
    r"|minutes?|mins|seconds?|people|persons?|times|tage?|wochen?|monate?|jahre?|stunden?|jours?|mois"
    r"|semaines?|heures?|ans)(?!\w))",
    re.I,
)
_COUNTER_BEFORE = re.compile(
    # "Day 2", not "per day 1100".
    r"(?:(?<!\w)(?<!per )(?<!a )(?<!each )(?<!pro )"
    r"(?:day|week|month|year|nr|number|page|room|tag|woche|monat|jahr|jour|semaine)\.?\s*"
    r"|(?<!\w)no\.\s*|#\s*)$",
    re.I,
)


@dataclass(frozen=True)
class _Number:
    """A number in the answer: ``written`` as given, at ``start``:``end``; ``kind`` ``amount`` (its
    ``value``), ``unreadable`` (digits that are no number we read) or ``other`` (a date, a time or a
    quantity)."""

    written: str
    start: int
    end: int
    kind: Literal["amount", "unreadable", "other"]
    value: float = 0.0


def _numbers(text: str) -> list[_Number]:
    """Every number in ``text`` (see :class:`_Number`), in order."""
    found: list[_Number] = []
    taken: list[tuple[int, int]] = []
    for match in _DATE_OR_TIME.finditer(text):
        found.append(_Number(match.group(), match.start(), match.end(), "other"))
        taken.append(match.span())
    for match in _DIGITS.finditer(text):
        # Digits inside a date or a number already read ("1e3"'s 3) are part of it.
        if any(start <= match.start() < end for start, end in taken):
            continue
        number = _number(text, match)
        found.append(number)
        taken.append((number.start, number.end))
    return sorted(found, key=lambda n: n.start)


def _number(text: str, match: re.Match[str]) -> _Number:
    start, end = match.span()
    after = text[end:]
    if counter := _COUNTER_BEFORE.search(text[:start]):
        return _Number(text[counter.start() : end], counter.start(), end, "other")
    if scientific := _SCIENTIFIC.match(after):
        return _Number(text[start : end + scientific.end()], start, end + scientific.end(), "unreadable")
    if unit := _UNIT_AFTER.match(after):
        return _Number(text[start : end + unit.end()], start, end + unit.end(), "other")
    value = _value(match.group())
    if multiplier := _MULTIPLIER.match(after):
        # "1.5k", "2 million": only a plain number or a decimal, never a grouped one ("1.100k").
        grouped = _GROUPED.fullmatch(match.group())
        end += multiplier.end()
        if value is None or grouped:
            return _Number(text[start:end], start, end, "unreadable")
        value *= _MULTIPLIERS[multiplier.group(1).lower()]
    if value is None:
        return _Number(text[start:end], start, end, "unreadable")
    return _Number(text[start:end], start, end, "amount", value)


def _value(digits: str) -> float | None:
    """The number ``digits`` writes (see the module docstring), None for one it does not."""
    fraction = ""
    whole = digits
    decimal = _DECIMAL.fullmatch(digits)
    if decimal is not None:
        whole, fraction = decimal["whole"], decimal["fraction"]
        if decimal["mark"] in whole:  # "1.100.50": the mark cannot also group the thousands
            return None
    if not whole.isdigit():
        if not _GROUPED.fullmatch(whole):
            return None
        whole = re.sub(r"\D", "", whole)
    return float(f"{whole}.{fraction}" if fraction else whole)


def _no_amount(numbers: list[_Number]) -> str:
    if not numbers:
        return "it names no number"
    return f"it names no amount, only {_listed([n.written for n in numbers])}"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


# --- Ranges -------------------------------------------------------------------------------

_RANGE_MARK = re.compile("\\s*(?:-|\u2013|\u2014|to|bis|\u00e0)\\s*", re.I)
_RANGE_AND = re.compile(r"\s*(?:and|und|et)\s*", re.I)
_RANGE_OPEN = re.compile(r"(?<!\w)(?:between|zwischen|entre)\s*$", re.I)
_CURRENCY_AROUND = re.compile(r"[€$£]|(?<!\w)(?:eur|euros?|usd|dollars?|gbp|pounds?|chf)(?!\w)", re.I)


def _ranged(text: str, numbers: list[_Number]) -> list[tuple[_Number, ...]]:
    """``numbers`` with each range of two amounts as one item (low, high); every other number alone."""
    items: list[tuple[_Number, ...]] = []
    index = 0
    while index < len(numbers):
        first = numbers[index]
        second = numbers[index + 1] if index + 1 < len(numbers) else None
        if second is not None and _is_range(text, first, second):
            items.append((first, second))
            index += 2
        else:
            items.append((first,))
            index += 1
    return items


def _is_range(text: str, first: _Number, second: _Number) -> bool:
    if first.kind != "amount" or second.kind != "amount" or first.value >= second.value:
        return False
    between = _CURRENCY_AROUND.sub("", text[first.end : second.start])
    before = _CURRENCY_AROUND.sub("", text[: first.start])
    if _RANGE_AND.fullmatch(between):
        return bool(_RANGE_OPEN.search(before))
    return bool(_RANGE_MARK.fullmatch(between))


def _masked(text: str, item: tuple[_Number, ...]) -> str:
    """``text`` with the amount (and, for a range, what joins it) written as zeros, so words inside
    it ("to", "bis") are not read as a direction, and a sign after it ("1100+") still is."""
    start, end = item[0].start, item[-1].end
    return text[:start] + "0" * (end - start) + text[end:]


# --- Currency and period -------------------------------------------------------------------

_SIGNS = {"€": "EUR", "$": "USD", "£": "GBP"}
_CURRENCY_WORDS = {
    "euro": "EUR",
    "euros": "EUR",
    "dollar": "USD",
    "dollars": "USD",
    "pound": "GBP",
    "pounds": "GBP",
    "franc": "CHF",
    "francs": "CHF",
    "franken": "CHF",
    "yen": "JPY",
}
_CODE = re.compile(CURRENCY.pattern, re.I)
_WORD = re.compile(r"(?<!\w)(" + "|".join(_CURRENCY_WORDS) + r")(?!\w)", re.I)
_PERIODS = {
    "hour": "hour",
    "h": "hour",
    "hr": "hour",
    "stunde": "hour",
    "heure": "hour",
    "hourly": "hour",
    "stündlich": "hour",
    "day": "day",
    "d": "day",
    "tag": "day",
    "jour": "day",
    "daily": "day",
    "täglich": "day",
    "week": "week",
    "woche": "week",
    "semaine": "week",
    "weekly": "week",
    "wöchentlich": "week",
    "month": "month",
    "monat": "month",
    "mois": "month",
    "monthly": "month",
    "monatlich": "month",
    "year": "year",
    "jahr": "year",
    "an": "year",
    "yearly": "year",
    "annually": "year",
    "jährlich": "year",
}
_PERIOD = re.compile(
    r"(?:(?<!\w)(?:a|an|per|each|every|pro|par)\s+|/\s*)"
    r"(hour|hr|h|day|d|week|month|year|stunde|tag|woche|monat|jahr|jour|heure|semaine|mois|an)(?!\w)"
    r"|(?<!\w)(hourly|daily|weekly|monthly|yearly|annually|stündlich|täglich|wöchentlich|monatlich|jährlich)(?!\w)",
    re.I,
)


def _currencies(text: str) -> set[str]:
    named = {code for sign, code in _SIGNS.items() if sign in text}
    named |= {m.group(1).upper() for m in _CODE.finditer(text)}
    named |= {_CURRENCY_WORDS[m.group(1).lower()] for m in _WORD.finditer(text)}
    return named


def _other_currency(text: str, term: str, currency: str) -> str:
    """Why ``text`` is in another currency than ``term``'s ``currency``; "" when it is not."""
    other = sorted(_currencies(text) - {currency.upper()}) if currency else []
    if not other:
        return ""
    return f"it is in {_listed(other)}, and {term} is in {currency.upper()}"


def _periods(text: str) -> set[str]:
    return {_PERIODS[(m.group(1) or m.group(2)).lower()] for m in _PERIOD.finditer(text)}


def _other_period(text: str, term: str, unit: str) -> str:
    """Why ``text`` names another period than ``term``'s ``unit``; "" when it names its own or none."""
    ours = _periods(unit)
    named = _periods(text)
    if not ours or not named or ours & named:
        return ""
    return f"it is per {_listed(sorted(named))}, and {term} is per {_listed(sorted(ours))}"


# --- Direction ----------------------------------------------------------------------------

_NEGATION = (
    r"(?<![\w'])(?:not|never|no|nothing|none|don't|dont|do not|doesn't|won't|wont|will not|can't|cant|cannot"
    r"|mustn't|must not|shouldn't|should not|nicht|nie|niemals|kein\w*|pas|jamais|ne)(?![\w'])"
)
# A negation a few words before a phrase, in the same clause: "don't go above", "not a cent over".
_NEGATED = re.compile(_NEGATION + r"(?:\s+[\w']+){0,4}\s*$", re.I)
# Words that may turn a plain comparative round: "more than 1,100 is too much".
_NEGATIVE = re.compile(_NEGATION + r"|n't(?!\w)|(?<!\w)(?:too|unacceptable|zu viel|trop)(?!\w)", re.I)
_WORDS: tuple[tuple[Kind, str], ...] = (
    (
        "ceiling",
        r"up to|at most|at the most|max|maximum|maximal|ceiling|cap|capped at|tops|or less|or lower"
        r"|or below|or under|and below|and under|bis zu|bis|höchstens|jusqu'à|jusqu'a|au plus|au maximum",
    ),
    (
        "floor",
        r"at least|at the least|min|minimum|minimal|floor|or more|or higher|or above|or over|and above"
        r"|and up|and over|starting at|starting from|mindestens|wenigstens|au moins|au minimum",
    ),
)
_SYMBOLS: tuple[tuple[Kind, str], ...] = (("ceiling", r"<=|≤|<"), ("floor", r">=|≥|>|(?<=\d)\+"))
# Comparatives: read as said without a negation before them, turned round with one.
_COMPARATIVES: tuple[tuple[Kind, str], ...] = (
    (
        "floor",
        r"above|over|more than|higher than|greater than|exceeds?|exceeding|beyond|in excess of"
        r"|über|mehr als|plus de|au-dessus de",
    ),
    (
        "ceiling",
        r"below|under|less than|lower than|fewer than|beneath|unter|weniger als|moins de"
        r"|en dessous de|au-dessous de",
    ),
)
_OTHER: dict[Kind, Kind] = {"ceiling": "floor", "floor": "ceiling"}


def _phrases(text: str) -> list[tuple[Kind, str, bool]]:
    """The direction phrases of ``text``: (kind, as written, clear). A comparative's kind is
    turned round by a negation before it; a ceiling or floor word with a negation before it, or a
    plain comparative in a line with a negative word, is not clear."""
    found: list[tuple[Kind, str, bool]] = []
    spans: list[tuple[int, int]] = []

    def free(match: re.Match[str]) -> bool:
        return not any(s < match.end() and match.start() < e for s, e in spans)

    for kind, words in _WORDS:
        for match in re.finditer(rf"(?<![\w'])(?:{words})\.?(?![\w'])", text, re.I):
            if free(match):
                spans.append(match.span())
                found.append((kind, match.group(), not _NEGATED.search(text[: match.start()])))
    for kind, symbols in _SYMBOLS:
        for match in re.finditer(symbols, text):
            if free(match):
                spans.append(match.span())
                found.append((kind, match.group(), True))
    for kind, words in _COMPARATIVES:
        for match in re.finditer(rf"(?<![\w'])(?:{words})(?![\w'])", text, re.I):
            if not free(match):
                continue
            spans.append(match.span())
            if _NEGATED.search(text[: match.start()]):
                found.append((_OTHER[kind], match.group(), True))
            else:
                found.append((kind, match.group(), not _NEGATIVE.search(text)))
    return found


def _direction(text: str, side: Kind | None, amount: str) -> tuple[Kind | None, str]:
    """The kind of limit ``text`` states on ``amount`` ("1,100", "900 to 1,100"), given the
    party's ``side`` where known: (kind, "") or (None, why not)."""
    phrases = _phrases(text)
    either = f"it does not say whether {amount} is {SIDE_WORDS['ceiling']} or {SIDE_WORDS['floor']}"
    unclear = [written for _, written, clear in phrases if not clear]
    if unclear:
        return None, f"{either} (I cannot tell how {_quoted(unclear)} is meant)"
    kinds = {kind for kind, _, _ in phrases}
    if len(kinds) > 1:
        return None, f"{either}: it says both {_quoted([w for _, w, _ in phrases])}"
    if not kinds:
        return (side, "") if side is not None else (None, either)
    [kind] = kinds
    if side is not None and kind != side:
        return None, (
            f"it gives {amount} as {SIDE_WORDS[kind]}, and you gave your limit as {SIDE_WORDS[side]} before"
        )
    return kind, ""


def _quoted(phrases: list[str]) -> str:
    return _listed([f'"{p}"' for p in dict.fromkeys(phrases)])


def _refused(reading: Reading, problem: str) -> Reading:
    return Reading(
        said=reading.said, term=reading.term, currency=reading.currency, unit=reading.unit, problem=problem
    )
