"""Request bodies: JSON read strictly (:func:`parley.strict_json.loads`)."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import JSONParser

from parley import strict_json

# JSON is Unicode text (RFC 8259 §8.1); anything else Python can "decode" (rot13, zlib…) is refused.
UNICODE_CODECS = frozenset(
    {"utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"}
)


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, refusing with a 400 what JSON or Postgres cannot hold — ``NaN``, numbers
    too large, nesting deeper than :data:`parley.strict_json.MAX_DEPTH`, NUL characters — where
    ``json.loads`` would accept it (to fail on saving) or raise ``RecursionError`` (a 500). A
    charset that is not a Unicode encoding is a 415."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            codec = ""
        if codec not in UNICODE_CODECS:
            raise UnsupportedMediaType(f"application/json; charset={encoding}")
        try:
            text = codecs.getreader(codec)(stream).read()
        except UnicodeError as exc:
            raise ParseError(f"The body is not {encoding}: {exc}.") from exc
        try:
            return strict_json.loads(text)
        except ValueError as exc:
            raise ParseError(f"The body is not valid JSON: {exc}") from exc
