"""JSON from outside, read strictly: what JSON means (RFC 8259) and Postgres's ``jsonb`` can store.

Python's ``json.loads`` reads ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON
(RFC 8259 §6); reads ``1e400`` as ``inf``; and raises ``RecursionError``, not ``ValueError``,
on deep nesting. Postgres refuses non-finite numbers, NUL characters and unpaired surrogates in
``jsonb``, so such a value is accepted on reading and fails later, on saving. :func:`loads`
refuses them all on reading.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

# Arrays and objects one value may nest. As the gateway's MAX_NESTING: deeper values outrun the
# recursion limit of the code that writes them out again (json.dumps, protobuf, jsonschema).
MAX_DEPTH = 100
# NUL, and a surrogate left unpaired: json pairs \ud83d\ude00 into one character, so any surrogate
# that remains has no partner and cannot be encoded as UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SHOWN = 24  # characters of an offending number quoted in the reason


def loads(text: str) -> Any:
    """The JSON value ``text`` holds, refusing what JSON or Postgres cannot hold.

    Raises ``ValueError`` with the reason: ``json.JSONDecodeError`` (a ``ValueError``, with
    ``msg``, ``lineno`` and ``colno``) when ``text`` is not JSON; a plain ``ValueError`` for
    ``NaN``/``Infinity``/``-Infinity``, a number too large for a float ("the number 1e400 is
    too large"), arrays and objects nested deeper than :data:`MAX_DEPTH`, or a string (value
    or key) holding a NUL or an unpaired surrogate.
    """
    try:
        value = json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_finite_int
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    _check(value)
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _refuse_if_infinite(text: str) -> None:
    if math.isinf(float(text)):
        shown = text if len(text) <= _SHOWN else f"{text[:_SHOWN]}…"
        raise ValueError(f"the number {shown} is too large")


def _finite_float(text: str) -> float:
    _refuse_if_infinite(text)
    return float(text)


def _finite_int(text: str) -> int:
    # Checked as a float first: int() of thousands of digits is slow, and past 4300 refused in
    # the interpreter's words.
    _refuse_if_infinite(text)
    return int(text)


def _check(value: Any) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and unstorable strings, without recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            _check_string(item)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth == MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        children: Iterable[Any] = item
        if isinstance(item, dict):
            for key in item:
                _check_string(key)
            children = item.values()
        pending.extend((child, depth + 1) for child in children)


def _check_string(text: str) -> None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return
    if found[0] == "\x00":
        raise ValueError("a string holds a NUL character (\\u0000), which cannot be stored")
    raise ValueError(f"a string holds an unpaired surrogate (\\u{ord(found[0]):04x})")
