"""parley.strict_json: JSON read as JSON means it and Postgres's jsonb can store it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from parley import strict_json


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": [1, 2.5, -3e2, true, null, "x"]}', {"a": [1, 2.5, -300.0, True, None, "x"]}),
        ("1.7976931348623157e308", 1.7976931348623157e308),
        ("-1e308", -1e308),
        (str(10**300), 10**300),
        ('"\\ud83d\\ude00 paired"', "\U0001f600 paired"),
    ],
    ids=["plain", "largest-float", "large-negative", "large-int", "surrogate-pair"],
)
def test_json_is_read_as_json_reads_it(text: str, value: Any) -> None:
    assert strict_json.loads(text) == value


def test_nesting_up_to_the_limit_is_read() -> None:
    deepest = '{"a": ' * (strict_json.MAX_DEPTH - 1) + "[]" + "}" * (strict_json.MAX_DEPTH - 1)

    value = strict_json.loads(deepest)

    for _ in range(strict_json.MAX_DEPTH - 1):
        value = value["a"]
    assert value == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"maximum": NaN}', "NaN is not a JSON number"),
        ("[Infinity]", "Infinity is not a JSON number"),
        ("-Infinity", "-Infinity is not a JSON number"),
        ('{"value": 1e400}', "the number 1e400 is too large"),
        ("-1e400", "the number -1e400 is too large"),
        ("1" * 400, f"the number {'1' * 24}… is too large"),
        ("9" * 5000, f"the number {'9' * 24}… is too large"),
        (
            "[" * (strict_json.MAX_DEPTH + 1) + "]" * (strict_json.MAX_DEPTH + 1),
            "nested deeper than 100 levels",
        ),
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, "nested deeper than 100 levels"),
        ('{"note": "a\\u0000b"}', "a string holds a NUL character (\\u0000), which cannot be stored"),
        ('{"a\\u0000": 1}', "a string holds a NUL character (\\u0000), which cannot be stored"),
        ('["\\ud800"]', "a string holds an unpaired surrogate (\\ud800)"),
        ('{"\\udfff": 1}', "a string holds an unpaired surrogate (\\udfff)"),
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity",
        "float-overflow",
        "negative-overflow",
        "int-overflow",
        "int-past-the-digit-limit",
        "one-level-too-deep",
        "far-too-deep",
        "nul-in-a-value",
        "nul-in-a-key",
        "lone-high-surrogate",
        "lone-low-surrogate-key",
    ],
)
def test_what_json_or_postgres_cannot_hold_is_refused_with_the_reason(text: str, reason: str) -> None:
    # Python's own reader takes these, or fails in its own words (RecursionError, the digit limit).
    with pytest.raises(ValueError, match=re.escape(reason)) as refused:
        strict_json.loads(text)

    assert str(refused.value) == reason
    assert not isinstance(refused.value, json.JSONDecodeError)


def test_text_that_is_not_json_is_refused_with_the_parsers_position() -> None:
    with pytest.raises(json.JSONDecodeError) as refused:
        strict_json.loads('{"a": 1,\n "b" 2}')

    assert (refused.value.msg, refused.value.lineno, refused.value.colno) == ("Expecting ':' delimiter", 2, 6)
