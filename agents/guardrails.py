"""Per-agent guardrails: checks that block or redact text where it crosses the platform's edge.

An agent's ``guardrails`` (:attr:`agents.models.Agent.guardrails`) is a list of
``{name, stage, action, match, pattern?}`` entries, applied in list order:

* ``stage`` says which text the guardrail sees. ``input`` is text entering the
  model from the party or from a counterparty (a task, an answer, a tool
  result, a counterparty's message); ``output`` is text the agent produces that
  leaves the platform (a final answer, a message sent over A2A).
* ``action``: ``block`` refuses the whole text (:class:`GuardrailTripped`);
  ``redact`` replaces each match with ``[email redacted]``, ``[phone redacted]``
  or ``[redacted]`` (for ``regex``).
* ``match``: ``email``, ``phone`` or ``regex`` (the operator's ``pattern``,
  Python :mod:`re` syntax, at most :data:`MAX_PATTERN_LENGTH` characters).

What counts as an e-mail address: a local part of letters, digits and
``. _ % + -``, an ``@``, then dot-separated labels of letters, digits, ``_``
or ``-`` ending in a top-level domain of two or more letters
(``jane.doe+deals@mail.example.co.uk``).

What counts as a phone number: a token of 8 to 15 digits (0-9; 15 is E.164's
maximum) made of digit groups joined by single spaces, hyphens or dots, where
one group may be parenthesised, that is

* international: it starts with ``+`` (``+44 20 7946 0958``,
  ``+33 (0)6 12 34 56 78``, ``+1-555-123-4567``, ``+4915112345678``); or
* national, with a parenthesised area code (``(555) 123-4567``,
  ``1 (555) 123-4567``, ``(030) 1234567``); or
* national, starting with a trunk ``0`` and an area code of at least one more
  digit, every later group at least two digits (``020 7946 0958``,
  ``06.12.34.56.78``, ``0044 20 7946 0958``); or
* North American without parentheses: 3, 3 and 4 digits, optionally after a
  ``1`` (``555-123-4567``, ``1 555.123.4567``).

A token is whole: not glued to a letter, not part of a hyphenated code
(``ORD-1234-5678``), not continued by ``.``, ``,``, ``:`` or ``/`` and a digit.
So these are never phone numbers: a run of digits with no ``+`` and no
separator (``12345678``, ``1030``), amounts (``€1,100``, ``1100.50``,
``12 500 000``, ``12.500.000``), dates (``2026-11-30``, ``30.11.2026``,
``11/30/2026``), times (``14:30:00``), UUIDs, version numbers
(``10.0.19045.3803``) and IP addresses. Without a ``+``, a national number of
another shape is missed (``612 345 678``, ``12 34 56 78``). A run of
space-separated digit groups is read from its start only, so that a card number
is not taken apart into phone numbers: a number that follows other digits with
only a space between is missed (``ref 12 555-123-4567``), and one that runs into
more digits is redacted with them, the longest reading of 8 to 15 digits
(``020 7946 0958 10``).

Safety on large or hostile text: the built-in detectors run in time linear in
the text's length (no nested quantifiers over overlapping characters; a phone
candidate spans at most eight groups). An operator's ``pattern`` runs as
written, and :mod:`re` has no timeout: :func:`validate` caps its length but
cannot rule out a pattern that backtracks catastrophically.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, NotRequired, TypedDict

from django.core.exceptions import ValidationError
from django.db import models

from agents.models import entry_error

MAX_PATTERN_LENGTH = 500


class Stage(models.TextChoices):
    INPUT = "input", "Input (entering the model)"
    OUTPUT = "output", "Output (leaving the platform)"


class Action(models.TextChoices):
    BLOCK = "block", "Block"
    REDACT = "redact", "Redact"


class Match(models.TextChoices):
    EMAIL = "email", "E-mail address"
    PHONE = "phone", "Phone number"
    REGEX = "regex", "Regular expression"


class Guardrail(TypedDict):
    """One entry of ``Agent.guardrails``; ``pattern`` only for ``match == "regex"``."""

    name: str
    stage: str
    action: str
    match: str
    pattern: NotRequired[str]


_FIELDS = frozenset({"name", "stage", "action", "match", "pattern"})

MARKERS = {Match.EMAIL: "[email redacted]", Match.PHONE: "[phone redacted]", Match.REGEX: "[redacted]"}


class GuardrailTripped(Exception):
    """A ``block`` guardrail found its match in the text of ``stage``.

    The message names the guardrail and the stage, never the text that tripped
    it (which is what the guardrail keeps from spreading).
    """

    def __init__(self, name: str, stage: str) -> None:
        # Both go to Exception.args so that the exception pickles (Celery results, logging handlers).
        super().__init__(name, stage)
        self.name = name
        self.stage = stage

    def __str__(self) -> str:
        return f'Guardrail "{self.name}" blocked the {self.stage}.'


_EMAIL = re.compile(
    # The lookbehind starts a match only at the start of a local part, so a long
    # run of local-part characters with no "@" is scanned once, not once per character.
    r"(?<![\w.%+-])[\w.%+-]+@[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}"
)

_PHONE_CANDIDATE = re.compile(
    r"""
    (?<!\w)(?<!\w-)(?<!\d[.,:/])              # a whole token: not inside a word, a code or a number
    (?!(?:19|20)\d\d([.-])\d\d\1\d\d(?!\d))   # not an ISO date (2026-11-30)
    (?!\d\d([.-])\d\d\2(?:19|20)\d\d(?!\d))   # nor a day- or month-first one (30.11.2026)
    \+?
    (?:\(\d{1,5}\)[ .-]?)?
    \d+
    (?:[ .-]\d+|[ .-]?\(\d{1,5}\)[ .-]?\d+){0,7}
    (?!\w|-\w|[.,:/]\d)                       # and the token ends here
    """,
    re.VERBOSE | re.ASCII,
)

_NATIONAL_PHONE = re.compile(
    r"""
      (?:1[ .-]?)?\(\d{2,5}\)[ .-]?\d+(?:[ .-]\d+)*   # (555) 123-4567, 1 (555) 123-4567, (030) 1234567
    | 0\d{1,5}(?:[ .-]\d{2,})+                        # 020 7946 0958, 06.12.34.56.78
    | (?:1[ .-])?\d{3}[ .-]\d{3}[ .-]\d{4}            # 555-123-4567, 1 555.123.4567
    """,
    re.VERBOSE | re.ASCII,
)


def check(guardrails: Sequence[Guardrail], *, stage: str, text: str) -> str:
    """Apply the guardrails of ``stage`` (``"input"`` or ``"output"``) to ``text``, in list order.

    Each sees the text as the ones before it left it, so a ``redact`` listed
    before a ``block`` on the same match disarms the block. Returns the text
    with every ``redact`` guardrail's matches replaced by its marker.

    Raises :class:`GuardrailTripped` when a ``block`` guardrail finds a match,
    and ``ValueError`` for an unknown ``stage`` or an entry :func:`validate`
    would refuse (a guardrail that cannot run must not let the text through).
    """
    if stage not in Stage.values:
        raise ValueError(f"unknown guardrail stage {stage!r}")
    for guardrail in guardrails:
        if guardrail.get("stage") != stage:
            continue
        action, match = guardrail.get("action"), guardrail.get("match")
        spans = _find(match, guardrail.get("pattern"), text)
        if action == Action.BLOCK:
            if next(spans, None) is not None:
                raise GuardrailTripped(str(guardrail.get("name")), stage)
        elif action == Action.REDACT:
            text = _replace(text, spans, MARKERS[Match(match)])
        else:
            raise ValueError(f"guardrail {guardrail.get('name')!r} has an unknown action {action!r}")
    return text


def validate(guardrails: object) -> None:
    """Check a value for ``Agent.guardrails``: a list of ``{name, stage, action, match, pattern?}``.

    Raises :class:`~django.core.exceptions.ValidationError` with one message
    per problem, each naming the entry by index and the field
    (``guardrails[2].pattern: ...``): not a list, an entry that is not an
    object or has an unknown field, a missing or unknown stage, action or
    match, an empty or duplicate name, a ``regex`` entry whose pattern is
    missing, longer than :data:`MAX_PATTERN_LENGTH`, does not compile or
    matches empty text, and a pattern on an entry that is not a ``regex``.
    Each problem with an entry is an :func:`agents.models.entry_error`, so the
    operator's editor shows it at the entry's row.
    """
    if not isinstance(guardrails, list):
        raise ValidationError("guardrails: must be a list.", code="invalid")
    errors: list[ValidationError] = []
    names: set[str] = set()
    for index, entry in enumerate(guardrails):
        if not isinstance(entry, dict):
            errors.append(_problem(index, "", "must be an object."))
            continue
        for field in sorted(str(key) for key in entry if key not in _FIELDS):
            errors.append(_problem(index, field, "unknown field."))
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            errors.append(_problem(index, "name", "required, and not blank.", "required"))
        elif name.strip() in names:
            errors.append(_problem(index, "name", f'"{name}" is used twice.', "duplicate"))
        else:
            names.add(name.strip())
        for field, choices in (("stage", Stage), ("action", Action), ("match", Match)):
            errors.extend(_choice_errors(index, field, entry.get(field), choices.values))
        errors.extend(_pattern_errors(index, entry))
    if errors:
        raise ValidationError(errors)


def _problem(index: int, field: str, problem: str, code: str = "invalid") -> ValidationError:
    """The error ``guardrails[<index>].<field>: <problem>`` (no field: the entry as a whole)."""
    where = f"guardrails[{index}]" + (f".{field}" if field else "")
    return entry_error(f"{where}: {problem}", index=index, field=field, problem=problem, code=code)


def _choice_errors(index: int, field: str, value: object, allowed: list[str]) -> list[ValidationError]:
    if value in allowed:
        return []
    choices = ", ".join(f'"{v}"' for v in allowed)
    if value is None:
        return [_problem(index, field, f"required, one of {choices}.", "required")]
    shown = json.dumps(value, default=repr)
    return [_problem(index, field, f"{shown} is not one of {choices}.", "invalid_choice")]


def _pattern_errors(index: int, entry: dict[Any, Any]) -> list[ValidationError]:
    pattern = entry.get("pattern")
    if entry.get("match") != Match.REGEX:
        if pattern in (None, ""):
            return []
        return [_problem(index, "pattern", 'only a "regex" guardrail has one.')]
    if not isinstance(pattern, str) or not pattern:
        return [_problem(index, "pattern", "required for a regex guardrail.", "required")]
    if len(pattern) > MAX_PATTERN_LENGTH:
        return [
            _problem(
                index, "pattern", f"{len(pattern)} characters, more than {MAX_PATTERN_LENGTH}.", "max_length"
            )
        ]
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return [_problem(index, "pattern", f"does not compile ({exc}).")]
    if compiled.fullmatch(""):
        return [_problem(index, "pattern", "matches empty text.")]
    return []


def _find(match: object, pattern: object, text: str) -> Iterator[tuple[int, int]]:
    """The ``(start, end)`` offsets of ``match``'s matches in ``text``, left to right, none overlapping."""
    if match == Match.EMAIL:
        return (m.span() for m in _EMAIL.finditer(text))
    if match == Match.PHONE:
        return _phone_spans(text)
    if match == Match.REGEX and isinstance(pattern, str) and pattern:
        # An empty match (a lookaround, "\b") redacts nothing and blocks nothing.
        return (m.span() for m in re.finditer(pattern, text) if m.end() > m.start())
    raise ValueError(f"cannot apply a guardrail matching {match!r} with pattern {pattern!r}")


def _replace(text: str, spans: Iterator[tuple[int, int]], marker: str) -> str:
    pieces: list[str] = []
    done = 0
    for start, end in spans:
        pieces += [text[done:start], marker]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _phone_spans(text: str) -> Iterator[tuple[int, int]]:
    position = 0
    while (candidate := _PHONE_CANDIDATE.search(text, position)) is not None:
        length = _longest_phone(candidate.group())
        if length:
            yield candidate.start(), candidate.start() + length
            position = candidate.start() + length
        else:
            position = candidate.end()


def _longest_phone(candidate: str) -> int:
    """The length of the longest prefix of ``candidate``, cut at a space, that is a phone number; 0 if none.

    Only spaces are cut points: a cut at a hyphen or a dot would take part of a
    longer number for a phone number.
    """
    cuts = [m.start() for m in re.finditer(" ", candidate)] + [len(candidate)]
    for cut in reversed(cuts):
        prefix = candidate[:cut]
        digits = sum(ch.isdigit() for ch in prefix)
        if 8 <= digits <= 15 and (prefix.startswith("+") or _NATIONAL_PHONE.fullmatch(prefix)):
            return cut
    return 0
