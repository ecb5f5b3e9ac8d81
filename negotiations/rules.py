"""What a move must be for one agent: its vocabulary and the terms it declares (docs/move-rules.md).

The vocabulary is the agent's ``allowed_actions``. The declared terms are read
from its terms description (``Agent.terms``) when that is written in the
description format, a comma-separated list of fields::

    amount (number, EUR per day), currency

Each field is a name (a letter or ``_``, then letters, digits or ``_``),
optionally followed by details in parentheses: the first type word among them
(:data:`TYPE_WORDS`: number, integer, string or text, boolean, date) is its
type, the other details are its unit ("EUR per day"), and a currency code in
them (:data:`CURRENCY`) its currency. A field without a type word has none, and
any JSON scalar passes. A description not in this format is prose: it declares
no field (:func:`declared_terms` gives None), and only the move's shape is
checked. "" turns terms off, and declares none either.

One rule, used both ways: :func:`check_move` refuses a move whose action is not
in the vocabulary, or whose declared term has a value of another type — inbound,
our agent's move rules (:func:`negotiations.negotiator.move_rules`) against the
counterparty's move before anything is stored; outbound, the rules a
counterparty publishes on its card against its reply. Terms the rules do not
declare pass unchecked: the seed's own terms rule has each side write "the other
side's field names" and "always a currency next to an amount"
(docs/wire-format.md#terms), so moves carry fields their receiver never declared.

:func:`move_schema` states the same rules as a JSON Schema of the move's data
part, and :func:`extension_params` / :func:`rules_from_params` carry them in our
AgentCard extension :data:`NEGOTIATION_EXTENSION`.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from typing import Any, Literal

from negotiations.wire import (
    MAX_MESSAGE,
    MAX_OFFER_ID,
    MAX_TERM_KEY,
    MAX_TERMS,
    Move,
    MoveError,
    number_text,
)
from parley.jsontypes import json_type

# Our AgentCard extension carrying an agent's move rules. A fixed URI, as the party extension's:
# it names the extension's meaning, the same on every Parley deployment.
NEGOTIATION_EXTENSION = "https://parley.dev/ext/negotiation/v1"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

TermType = Literal["number", "integer", "string", "boolean", "date", ""]
# The type words of the description format, and the type each names.
TYPE_WORDS: dict[str, TermType] = {
    "number": "number",
    "integer": "integer",
    "string": "string",
    "text": "string",
    "boolean": "boolean",
    "date": "date",
}
# The types a published term may name (extension_params writes them; rules_from_params reads them).
_TYPES: dict[str, TermType] = {t: t for t in TYPE_WORDS.values()}
CURRENCY = re.compile(r"\b(EUR|USD|GBP|CHF|JPY|CAD|AUD)\b")
# How like a type word a lone detail must be to be taken for a misspelt type (difflib's ratio:
# "numbr" is 0.91 like "number", "weekday" 0.55 like "date").
_CLOSE_TO_TYPE = 0.8
# A field written as a name and its details, well formed or not: "amount (number, EUR", "a (b (c))"
# (but not "Price (EUR) and delivery date", prose that goes on after its parenthesis).
_DETAILED = re.compile(r"[A-Za-z_]\w*\s*\((?:[^)]*|.*\))", re.DOTALL)
# One field, its surrounding space stripped: a name, then its details in parentheses if any.
_FIELD = re.compile(r"([A-Za-z_]\w*)(?:\s*\(([^()]*)\))?")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# What a term the rules do not type may hold: any JSON scalar (parse_move's own rule).
SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
_SCHEMAS: dict[TermType, dict[str, Any]] = {
    "number": {"type": "number"},
    "integer": {"type": "integer"},
    "string": {"type": "string"},
    "boolean": {"type": "boolean"},
    "date": {"type": "string", "format": "date"},
    "": SCALAR,
}
_EXPECTED: dict[TermType, str] = {
    "number": "a number",
    "integer": "an integer",
    "string": "a string",
    "boolean": "true or false",
    "date": "a date (YYYY-MM-DD)",
    "": "a JSON scalar",
}
# Characters of a refused string value quoted back in the refusal.
_QUOTED = 40


@dataclass(frozen=True)
class TermSpec:
    """One declared term: ``name``, its ``type`` ("" for none), its ``unit`` ("EUR per day", "" for
    none) and the ``currency`` code its unit names ("" for none)."""

    name: str
    type: TermType = ""
    unit: str = ""
    currency: str = ""

    def allows(self, value: object) -> bool:
        """Whether ``value`` (decoded JSON) is of this term's type. A number is never a boolean; an
        integer may come as an integral float (protobuf carries every number as a double); a date is
        a valid YYYY-MM-DD string."""
        if self.type == "":
            return value is None or isinstance(value, str | int | float)
        if self.type == "boolean":
            return isinstance(value, bool)
        if self.type == "string":
            return isinstance(value, str)
        if self.type == "date":
            return isinstance(value, str) and iso_date(value) is not None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return self.type == "number" or isinstance(value, int) or value.is_integer()

    @property
    def expected(self) -> str:
        """What the term must be, for a refusal: "a number (EUR per day)", "a date (YYYY-MM-DD)"."""
        return _EXPECTED[self.type] + (f" ({self.unit})" if self.unit else "")

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the term's value, its unit as the description."""
        schema = dict(_SCHEMAS[self.type])
        if self.unit:
            schema["description"] = self.unit
        return schema


@dataclass(frozen=True)
class ActionSpec:
    """One action of a vocabulary: ``name``, ``description``, and whether it ends the task
    (``terminal``) in which task ``state`` ("completed", "rejected", …; "" when open)."""

    name: str
    description: str = ""
    terminal: bool = False
    state: str = ""


@dataclass(frozen=True)
class MoveRules:
    """The vocabulary a move's action is one of, and the terms whose values are type-checked."""

    actions: tuple[ActionSpec, ...]
    terms: tuple[TermSpec, ...] = ()

    @property
    def action_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actions)


@lru_cache(maxsize=256)
def declared_terms(description: str) -> tuple[TermSpec, ...] | None:
    """The terms ``description`` declares in the description format (see the module), in order;
    () for "" (terms off), None for prose. A name given twice is declared by its first field.
    Remembered for the latest descriptions read (the answer is immutable): a list scores each of
    its rows by its agent's.

    "amount (number, EUR per day), currency" gives ``TermSpec("amount", "number", "EUR per day",
    "EUR")`` and ``TermSpec("currency")``; "the rate in euros" gives None.
    """
    text = description.strip().removesuffix(".")
    if not text:
        return ()
    specs: dict[str, TermSpec] = {}
    for field in _fields(text):
        match = _FIELD.fullmatch(field.strip())
        if match is None:
            return None
        name, details = match.group(1), [d.strip() for d in (match.group(2) or "").split(",")]
        types = [TYPE_WORDS[d.lower()] for d in details if d.lower() in TYPE_WORDS]
        unit = ", ".join(d for d in details if d and d.lower() not in TYPE_WORDS)
        currency = CURRENCY.search(unit)
        specs.setdefault(
            name, TermSpec(name, types[0] if types else "", unit, currency.group() if currency else "")
        )
    return tuple(specs.values())


def description_problem(description: str) -> str | None:
    """What is wrong with ``description`` as the operator wrote it, or None; the reading itself
    (:func:`declared_terms`) stays lenient, for descriptions saved before and cards read.

    Refused, naming the term: a name declared twice ("amount (number), amount (string)" would
    declare the first); a word standing where the type goes that is no type word — the first
    of two or more details unless in capitals, a code ("amount (numbr, EUR per day)",
    "amount (wibble, EUR)"), or a lone detail one letter or two from a type word ("amount
    (numbr)"): it would be read as the unit, leaving the term untyped; two type words; and a
    description that uses the format — a name and its details in parentheses, even unclosed
    ("amount (number"), or only names and empty fields ("amount, , currency") — with a part
    that breaks it ("amount (number, EUR), ((" would be prose and declare nothing). Prose that
    never uses the format ("the day rate in euros", "Price (EUR) and delivery date") is fine.
    """
    text = description.strip().removesuffix(".")
    if not text:
        return None
    fields = [field.strip() for field in _fields(text)]
    matches = [_FIELD.fullmatch(field) for field in fields]
    with_details = any(_DETAILED.fullmatch(field) for field in fields)
    names_only = all(m is not None or not field for m, field in zip(matches, fields, strict=True))
    if not with_details and not names_only:
        return None  # prose
    seen: set[str] = set()
    for field, match in zip(fields, matches, strict=True):
        if match is None:
            shown = repr(field) if field else "an empty term"
            return (
                f"{shown} does not read as a term: write each term as a name, or a name and its details "
                'in parentheses — "amount (number, EUR per day), currency" — separated by commas.'
            )
        name = match.group(1)
        if name in seen:
            return f"The term {name} is declared twice; declare each term once."
        seen.add(name)
        if problem := _type_problem(name, [d.strip() for d in (match.group(2) or "").split(",")]):
            return problem
    return None


def _type_problem(name: str, details: list[str]) -> str | None:
    """What is wrong with the type of the term ``name`` given its ``details``, or None."""
    types = [d for d in details if d.lower() in TYPE_WORDS]
    if len(types) > 1:
        return f"The term {name} names {len(types)} types ({', '.join(types)}); give it one."
    first = details[0]
    if types or not first.isalpha() or first.isupper():
        return None
    close = difflib.get_close_matches(first.lower(), TYPE_WORDS, n=1, cutoff=_CLOSE_TO_TYPE)
    if len(details) < 2 and not close:
        return None  # a one-word unit: "day (weekday)"
    guess = f" Did you mean {close[0]}?" if close else ""
    return (
        f"The term {name}: {first!r} stands where its type goes and is no type; the types are "
        f"{', '.join(TYPE_WORDS)}.{guess}"
    )


def _fields(text: str) -> list[str]:
    """``text`` split at its commas outside parentheses."""
    fields, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            fields.append(text[start:index])
            start = index + 1
    return [*fields, text[start:]]


def rules_for(allowed_actions: list[dict[str, Any]], terms: str) -> MoveRules:
    """The move rules of an agent with these ``allowed_actions`` (ActionSpec dicts ``{name,
    description, terminal, state}``) and this terms description; prose declares no terms."""
    return MoveRules(
        actions=tuple(
            ActionSpec(
                name=str(a["name"]),
                description=str(a.get("description") or ""),
                terminal=bool(a.get("terminal")),
                state=str(a.get("state") or "rejected") if a.get("terminal") else "",
            )
            for a in allowed_actions
        ),
        terms=declared_terms(terms) or (),
    )


def check_move(move: Move, rules: MoveRules) -> None:
    """Refuse ``move`` unless its action is in ``rules``' vocabulary and each term ``rules`` declare
    has a value of its type (:func:`check_terms`); terms it does not declare pass.

    Raises:
        MoveError: "move.action 'haggle' is not one of propose, counter, accept, reject";
            as :func:`check_terms`.
    """
    if move.action not in rules.action_names:
        raise MoveError(f"move.action {move.action!r} is not one of {', '.join(rules.action_names)}")
    check_terms(move.terms, rules.terms)


def check_terms(terms: Mapping[str, Any] | None, declared: tuple[TermSpec, ...]) -> None:
    """Refuse ``terms`` when a term in ``declared`` has a value of another type, or any term a
    number that is not finite (NaN, ±Infinity: no JSON number, as :func:`parse_move` has it), the
    first in ``terms``' own order.

    Raises:
        MoveError: "move.terms.amount must be a number (EUR per day), got 'lots'" (a string is
            quoted, cut at 40 characters; any other value is named by its JSON type);
            "move.terms.amount must be a finite number, got Infinity".
    """
    specs = {spec.name: spec for spec in declared}
    for name, value in (terms or {}).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise MoveError(f"move.terms.{name} must be a finite number, got {number_text(value)}")
        spec = specs.get(name)
        if spec is not None and not spec.allows(value):
            raise MoveError(f"move.terms.{name} must be {spec.expected}, got {_shown(value)}")


def terms_schema(declared: tuple[TermSpec, ...]) -> dict[str, Any]:
    """The JSON Schema of a move's ``terms`` object: the ``declared`` terms typed, any other a JSON
    scalar, at most ``MAX_TERMS`` keys of at most ``MAX_TERM_KEY`` characters (``parse_move``'s)."""
    return {
        "type": "object",
        "properties": {spec.name: spec.schema() for spec in declared},
        "additionalProperties": SCALAR,
        "maxProperties": MAX_TERMS,
        "propertyNames": {"maxLength": MAX_TERM_KEY},
    }


def move_schema(rules: MoveRules) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a move's data part that ``rules`` admit.

    ``{"action": one of the vocabulary, "message": string, "terms"?: object or null,
    "offerId"?: string, "acceptsOfferId"?: string}`` with :func:`parse_move`'s bounds; a
    ``date`` term is ``format: date``, which a validator asserts only when told to.
    """
    identifier = {"type": "string", "maxLength": MAX_OFFER_ID}
    terms = terms_schema(rules.terms)
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Negotiation move",
        "type": "object",
        "properties": {
            "action": {"enum": list(rules.action_names)},
            "message": {
                "type": "string",
                "maxLength": MAX_MESSAGE,
                "description": "What the other party reads.",
            },
            "terms": {**terms, "type": ["object", "null"]},
            "offerId": {**identifier, "description": "The id of the offer this move makes, if any."},
            "acceptsOfferId": {**identifier, "description": "The offerId of the offer this move accepts."},
        },
        "required": ["action", "message"],
    }


def extension_params(rules: MoveRules) -> dict[str, Any]:
    """The params of :data:`NEGOTIATION_EXTENSION` on an agent's card (docs/move-rules.md)::

        {"actions": [{"name", "description", "terminal", "state"?}],
         "terms": [{"name", "type"?, "unit"?, "currency"?}],
         "moveSchema": <move_schema(rules)>}

    ``state`` only on a terminal action; ``type``, ``unit`` and ``currency`` only when set.
    """
    actions: list[dict[str, Any]] = []
    for action in rules.actions:
        item: dict[str, Any] = {
            "name": action.name,
            "description": action.description,
            "terminal": action.terminal,
        }
        if action.terminal:
            item["state"] = action.state
        actions.append(item)
    terms = [
        {
            "name": t.name,
            **{k: v for k, v in {"type": t.type, "unit": t.unit, "currency": t.currency}.items() if v},
        }
        for t in rules.terms
    ]
    return {"actions": actions, "terms": terms, "moveSchema": move_schema(rules)}


def rules_from_params(params: object) -> MoveRules | None:
    """The move rules a card's :data:`NEGOTIATION_EXTENSION` params publish, read leniently; None
    when they name no vocabulary (``actions`` is not a non-empty list of objects with a string
    ``name``). A term entry without a string name is skipped, and one of a type this module does not
    know is read without a type."""
    if not isinstance(params, Mapping):
        return None
    raw_actions, raw_terms = params.get("actions"), params.get("terms")
    if not isinstance(raw_actions, list) or not raw_actions:
        return None
    actions = []
    for item in raw_actions:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            return None
        actions.append(
            ActionSpec(
                name=item["name"],
                description=str(item.get("description") or ""),
                terminal=item.get("terminal") is True,
                state=str(item.get("state") or ""),
            )
        )
    terms = []
    for item in raw_terms if isinstance(raw_terms, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        kind = item.get("type")
        terms.append(
            TermSpec(
                name=item["name"],
                type=_TYPES.get(kind, "") if isinstance(kind, str) else "",
                unit=str(item.get("unit") or ""),
                currency=str(item.get("currency") or ""),
            )
        )
    return MoveRules(actions=tuple(actions), terms=tuple(terms))


def iso_date(text: str) -> date | None:
    """The date ``text`` writes as YYYY-MM-DD, or None when it is anything else."""
    if not _ISO_DATE.fullmatch(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def _shown(value: object) -> str:
    """A refused value as a refusal names it: a string quoted (cut), anything else its JSON type."""
    if isinstance(value, str):
        return repr(value if len(value) <= _QUOTED else f"{value[:_QUOTED]}…")
    return json_type(value)
