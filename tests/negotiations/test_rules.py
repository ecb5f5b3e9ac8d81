"""Tests for negotiations.rules: the declared terms, the move check, its JSON Schema and card params."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from agents.models import DEFAULT_ACTIONS
from negotiations.rules import (
    SCALAR,
    ActionSpec,
    MoveRules,
    TermSpec,
    check_move,
    declared_terms,
    description_problem,
    extension_params,
    move_schema,
    rules_for,
    rules_from_params,
)
from negotiations.wire import Move, MoveError, parse_move

SELLER_TERMS = "amount (number, EUR per day), currency"
RULES = rules_for([dict(a) for a in DEFAULT_ACTIONS], SELLER_TERMS)


@pytest.mark.parametrize(
    ("description", "declared"),
    [
        (
            SELLER_TERMS,
            (TermSpec("amount", "number", "EUR per day", "EUR"), TermSpec("currency")),
        ),
        (
            "start (date), rate (Integer, GBP per hour), remote (boolean), city (text).",
            (
                TermSpec("start", "date"),
                TermSpec("rate", "integer", "GBP per hour", "GBP"),
                TermSpec("remote", "boolean"),
                TermSpec("city", "string"),
            ),
        ),
        (
            "day (weekday), fee(number,per session)",
            (TermSpec("day", unit="weekday"), TermSpec("fee", "number", "per session")),
        ),
        ("amount, amount (number)", (TermSpec("amount"),)),
        ("", ()),
        ("   ", ()),
        # Prose declares nothing.
        ("the day rate in euros", None),
        ("amount (number", None),
        ("amount (number (EUR))", None),
        ("amount, , currency", None),
        ("amount; currency", None),
    ],
)
def test_declared_terms(description: str, declared: tuple[TermSpec, ...] | None) -> None:
    assert declared_terms(description) == declared


DESCRIBED = [
    # In the format, as the suite, the demo and the docs write it: nothing to say.
    ("amount (number, EUR per day), currency", None),
    ("start (date), rate (Integer, GBP per hour), remote (boolean), city (text).", None),
    ("day (weekday), fee(number,per session)", None),
    ("customers (number, paying)", None),
    ("amount (number, EUR per day), days (per month)", None),
    ("amount (EUR, per day)", None),
    ("amount, currency", None),
    ("", None),
    # Prose, which declares nothing and says so by being prose.
    ("the day rate in euros", None),
    ("Price (EUR) and delivery date, negotiable", None),
    ("The rate, in euros, per day", None),
    ("amount; currency", None),
    # The format, misread.
    ("amount (number), amount (string)", "The term amount is declared twice; declare each term once."),
    (
        "amount (numbr, EUR per day)",
        "The term amount: 'numbr' stands where its type goes and is no type; the types are number, "
        "integer, string, text, boolean, date. Did you mean number?",
    ),
    (
        "amount (numbr)",
        "The term amount: 'numbr' stands where its type goes and is no type; the types are number, "
        "integer, string, text, boolean, date. Did you mean number?",
    ),
    (
        "amount (wibble, EUR), ((",
        "The term amount: 'wibble' stands where its type goes and is no type; the types are number, "
        "integer, string, text, boolean, date.",
    ),
    ("amount (number, string)", "The term amount names 2 types (number, string); give it one."),
    (
        "amount (number, EUR), ((",
        "'((' does not read as a term: write each term as a name, or a name and its details in "
        'parentheses — "amount (number, EUR per day), currency" — separated by commas.',
    ),
    (
        "amount (number",
        "'amount (number' does not read as a term: write each term as a name, or a name and its "
        'details in parentheses — "amount (number, EUR per day), currency" — separated by commas.',
    ),
    (
        "amount, , currency",
        "an empty term does not read as a term: write each term as a name, or a name and its details "
        'in parentheses — "amount (number, EUR per day), currency" — separated by commas.',
    ),
]


@pytest.mark.parametrize(("description", "problem"), DESCRIBED)
def test_a_description_in_the_format_that_would_be_misread_is_named(
    description: str, problem: str | None
) -> None:
    assert description_problem(description) == problem


def test_a_long_prose_description_is_read_at_once() -> None:
    assert description_problem("a (" + ", " * 50_000) is not None
    assert description_problem("a, " * 50_000) == "The term a is declared twice; declare each term once."
    assert description_problem("a" + " " * 100_000 + "b") is None
    assert declared_terms("a" + " " * 100_000 + "b") is None
    assert declared_terms("a (" + ", " * 50_000) is None
    assert declared_terms("a, " * 50_000) is None


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"action": "propose", "message": "", "terms": {"amount": 800, "currency": "EUR"}}, None),
        # Protobuf carries 800 as 800.0; any scalar for an untyped term; undeclared terms pass.
        ({"action": "counter", "message": "", "terms": {"amount": 800.0, "currency": 1, "days": [1]}}, None),
        ({"action": "reject", "message": ""}, None),
        (
            {"action": "haggle", "message": ""},
            "move.action 'haggle' is not one of propose, counter, accept, reject",
        ),
        (
            {"action": "Propose", "message": ""},
            "move.action 'Propose' is not one of propose, counter, accept, reject",
        ),
        (
            {"action": "propose", "message": "", "terms": {"currency": "EUR", "amount": "lots"}},
            "move.terms.amount must be a number (EUR per day), got 'lots'",
        ),
        (
            {"action": "propose", "message": "", "terms": {"amount": True}},
            "move.terms.amount must be a number (EUR per day), got boolean",
        ),
        (
            {"action": "propose", "message": "", "terms": {"amount": None}},
            "move.terms.amount must be a number (EUR per day), got null",
        ),
        (
            {"action": "propose", "message": "", "terms": {"amount": "x" * 50}},
            f"move.terms.amount must be a number (EUR per day), got '{'x' * 40}…'",
        ),
        # No JSON number, declared or not (a lenient reading, decode_move, lets one through).
        (
            {"action": "propose", "message": "", "terms": {"amount": float("inf")}},
            "move.terms.amount must be a finite number, got Infinity",
        ),
        (
            {"action": "propose", "message": "", "terms": {"days": float("nan")}},
            "move.terms.days must be a finite number, got NaN",
        ),
    ],
)
def test_check_move(data: dict[str, Any], problem: str | None) -> None:
    move = Move(data["action"], data["message"], data.get("terms"))
    if problem is None:
        check_move(move, RULES)
    else:
        with pytest.raises(MoveError) as refused:
            check_move(move, RULES)
        assert str(refused.value) == problem


TYPED = rules_for(
    [{"name": "offer", "description": "", "terminal": False, "state": ""}],
    "start (date), rate (integer), remote (boolean), city (string)",
)


@pytest.mark.parametrize(
    ("terms", "problem"),
    [
        ({"start": "2026-03-02", "rate": 90.0, "remote": False, "city": "Leeds"}, None),
        ({"start": "2026-02-30"}, "move.terms.start must be a date (YYYY-MM-DD), got '2026-02-30'"),
        ({"start": "next Tuesday"}, "move.terms.start must be a date (YYYY-MM-DD), got 'next Tuesday'"),
        ({"rate": 90.5}, "move.terms.rate must be an integer, got number"),
        ({"remote": "yes"}, "move.terms.remote must be true or false, got 'yes'"),
        ({"city": 7}, "move.terms.city must be a string, got number"),
    ],
)
def test_each_declared_type(terms: dict[str, Any], problem: str | None) -> None:
    move = Move("offer", "", terms)
    if problem is None:
        check_move(move, TYPED)
    else:
        with pytest.raises(MoveError) as refused:
            check_move(move, TYPED)
        assert str(refused.value) == problem


def test_prose_terms_declare_nothing_to_check() -> None:
    rules = rules_for([dict(a) for a in DEFAULT_ACTIONS], "the day rate, in euros please")

    assert rules.terms == ()
    check_move(Move("propose", "", {"amount": "lots"}), rules)


def schema_allows(schema: dict[str, Any], data: dict[str, Any]) -> bool:
    return Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(data)


MOVES = [
    {"action": "propose", "message": "€800.", "terms": {"amount": 800, "currency": "EUR"}, "offerId": "o1"},
    {"action": "accept", "message": "Yes.", "acceptsOfferId": "o1"},
    {"action": "counter", "message": "", "terms": None},
    {"action": "counter", "message": "", "terms": {"amount": 900, "days": 2, "note": None}},
    {"action": "haggle", "message": ""},
    {"action": "propose", "message": "", "terms": {"amount": "lots"}},
    {"action": "propose", "message": "", "terms": {"amount": False}},
    {"action": "propose", "message": "", "terms": {"amount": 1, "days": [2]}},
    {"action": "propose", "message": "", "terms": [800]},
    {"action": "propose"},
    {"action": "propose", "message": "x" * 4001},
    {"action": "propose", "message": "", "terms": {f"t{i}": i for i in range(33)}},
    {"action": "propose", "message": "", "offerId": "o" * 65},
]


@pytest.mark.parametrize("data", MOVES)
def test_the_schema_states_the_rules_the_gateway_applies(data: dict[str, Any]) -> None:
    """A move the schema allows is one parse_move and check_move let through, and only such a move."""
    try:
        check_move(parse_move(data), RULES)
        allowed = True
    except MoveError:
        allowed = False

    assert schema_allows(move_schema(RULES), data) is allowed


def test_the_schema_of_typed_terms() -> None:
    schema = move_schema(TYPED)

    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["action"] == {"enum": ["offer"]}
    assert schema["properties"]["terms"]["properties"] == {
        "start": {"type": "string", "format": "date"},
        "rate": {"type": "integer"},
        "remote": {"type": "boolean"},
        "city": {"type": "string"},
    }
    assert schema["properties"]["terms"]["additionalProperties"] == SCALAR
    assert not schema_allows(schema, {"action": "offer", "message": "", "terms": {"start": "2026-02-30"}})


def test_the_card_params_and_their_reading_round_trip() -> None:
    params = extension_params(RULES)

    assert {k: v for k, v in params.items() if k != "moveSchema"} == {
        "actions": [
            {"name": "propose", "description": "put an offer on the table", "terminal": False},
            {"name": "counter", "description": "answer an offer with another", "terminal": False},
            {
                "name": "accept",
                "description": "accept an offer on the table",
                "terminal": True,
                "state": "completed",
            },
            {"name": "reject", "description": "end without a deal", "terminal": True, "state": "rejected"},
        ],
        "terms": [
            {"name": "amount", "type": "number", "unit": "EUR per day", "currency": "EUR"},
            {"name": "currency"},
        ],
    }
    assert params["moveSchema"] == move_schema(RULES)
    assert rules_from_params(params) == RULES


@pytest.mark.parametrize(
    ("params", "rules"),
    [
        (None, None),
        ({"terms": []}, None),
        ({"actions": []}, None),
        ({"actions": [{"name": "propose"}, {"description": "nameless"}]}, None),
        (
            {
                "actions": [{"name": "offer", "terminal": "yes"}],
                "terms": [{"name": "a", "type": "money"}, {"type": "number"}, 3],
            },
            MoveRules(actions=(ActionSpec("offer"),), terms=(TermSpec("a"),)),
        ),
    ],
)
def test_published_params_are_read_leniently(params: object, rules: MoveRules | None) -> None:
    assert rules_from_params(params) == rules
