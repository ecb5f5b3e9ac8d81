"""Names of JSON types, for error messages about decoded input."""

from __future__ import annotations

from collections.abc import Mapping


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type: null, boolean, number, string, array or object.

    An empty string is named "empty string", since that is usually what was wrong.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string" if value else "empty string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__
