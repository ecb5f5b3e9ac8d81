"""The negotiation move on the wire, and the Task history it travels in.

A move is the one data part of a negotiation message (docs/wire-format.md#moves):

    {"action": str, "message": str, "terms"?: {flat JSON object},
     "offerId"?: str, "acceptsOfferId"?: str}

Two readers exist on purpose. ``parse_move`` is strict and raises ``MoveError`` naming the bad
field; it is for input we accept from our own callers. ``decode_move`` is the lenient rule
(docs/wire-format.md#reading-a-move), which is what the Index peer applies to every message in a Task, so
verification must use it to reach the same verdict as the peer.

Tasks arrive in two JSON dialects: A2A 1.0 protobuf-JSON (``"TASK_STATE_COMPLETED"``,
``"ROLE_USER"``, parts ``{"data": ...}``) from a2a-sdk, and A2A 0.3 (``"completed"``, ``"user"``,
parts ``{"kind": "data", "data": ...}``) from Index peers. Both reduce to one ``TaskRecord``.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from a2a.types import Task
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct, Value

from parley.jsontypes import json_type

Role = Literal["user", "agent"]

# The task states of A2A 0.3, the names TaskRecord.state is normalised to.
TASK_STATES = frozenset(
    {
        "submitted",
        "working",
        "input-required",
        "completed",
        "failed",
        "canceled",
        "rejected",
        "auth-required",
        "unknown",
    }
)

_ROLES: dict[str, Role] = {
    "user": "user",
    "role_user": "user",
    "agent": "agent",
    "role_agent": "agent",
}


# What parse_move lets through must fit the columns it lands in (negotiations.models.Turn: action,
# offer_id and accepts_offer_id are 64 characters); the other bounds keep one move a sentence
# and a handful of terms, well inside the gateway's body limit.
MAX_ACTION = 64
MAX_OFFER_ID = 64
MAX_MESSAGE = 4000
MAX_TERMS = 32
MAX_TERM_KEY = 64


class MoveError(ValueError):
    """An inbound move failed ``parse_move``; the message names the field and the problem."""


@dataclass(frozen=True)
class Move:
    """One negotiation move (docs/wire-format.md#moves).

    ``offer_id`` is set on every move that carries terms; ``accepts_offer_id`` names the offer
    an accepting move binds to. Empty strings mean "absent".
    """

    action: str
    message: str
    terms: dict[str, Any] | None = None
    offer_id: str = ""
    accepts_offer_id: str = ""

    def to_data(self) -> dict[str, Any]:
        """The wire dict ``{"action", "message", "terms"?, "offerId"?, "acceptsOfferId"?}``.

        ``terms`` is left out only when None (an empty object is still an offer on the table,
        as the peer's truthiness test treats it); the ids are left out when empty.
        """
        data: dict[str, Any] = {"action": self.action, "message": self.message}
        if self.terms is not None:
            data["terms"] = dict(self.terms)
        if self.offer_id:
            data["offerId"] = self.offer_id
        if self.accepts_offer_id:
            data["acceptsOfferId"] = self.accepts_offer_id
        return data


def nul_path(value: object, where: str) -> str | None:
    """The path of the first string in the JSON ``value`` that holds a NUL, or None.

    Paths read ``where.key`` and ``where[index]``; a key holding a NUL is reported as
    ``<object> keys``. Postgres stores no NUL, in text or jsonb.
    """
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return f"{where} keys"
            if found := nul_path(item, f"{where}.{key}"):
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if found := nul_path(item, f"{where}[{index}]"):
                return found
    return None


def number_text(value: float) -> str:
    """``value`` as a reply names it: a finite number as Python writes it, NaN and the infinities
    as they come on the wire (``NaN``, ``Infinity``, ``-Infinity``: JavaScript's words, which
    Python's JSON reader takes and JSON itself has none for, RFC 8259 §6)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def non_finite(value: object, where: str) -> tuple[str, float] | None:
    """The path and value of the first number in the JSON ``value`` that is not finite (NaN,
    ±Infinity), or None.

    Paths read as :func:`nul_path`'s. Such a number is no JSON: protobuf will not write it out
    again (the A2A SDK's and our own ``MessageToDict`` raise) and Postgres's ``jsonb`` holds none.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if found := non_finite(item, f"{where}.{key}"):
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if found := non_finite(item, f"{where}[{index}]"):
                return found
    return None


def struct_of(struct: Struct) -> dict[str, Any]:
    """The JSON object a protobuf ``Struct`` (a message's or a part's metadata) holds, as
    :func:`value_of` reads it."""
    return {key: value_of(item) for key, item in struct.fields.items()}


def value_of(value: Value) -> Any:
    """The JSON value a protobuf ``Value`` (an A2A data part's) holds, as Python: numbers as floats.

    Unlike ``MessageToDict``, which raises on them, it keeps NaN and ±Infinity, so that they can
    be refused by name (:func:`non_finite_path`). The gateway's edge bounds the nesting.
    """
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_of(value.struct_value)
    if kind == "list_value":
        return [value_of(item) for item in value.list_value.values]
    if kind == "number_value":
        return value.number_value
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def storage_problem(value: str, limit: int | None = None) -> str | None:
    """Why Postgres cannot store ``value`` in a column of ``limit`` characters ("must not contain a
    NUL character", "must be at most <limit> characters"), or None if it can."""
    if "\x00" in value:
        return "must not contain a NUL character"
    if limit is not None and len(value) > limit:
        return f"must be at most {limit} characters"
    return None


def _storable(where: str, value: str, limit: int | None = None) -> str:
    """``value``, if Postgres can store it; else :class:`MoveError` naming ``where``."""
    if problem := storage_problem(value, limit):
        raise MoveError(f"{where} {problem}")
    return value


def _optional_id(data: Mapping[str, Any], key: str) -> str:
    if key not in data:
        return ""
    value = data[key]
    if not isinstance(value, str):
        raise MoveError(f"move.{key} must be a string, got {json_type(value)}")
    return _storable(f"move.{key}", value, MAX_OFFER_ID)


def integral_numbers(terms: Mapping[str, Any]) -> dict[str, Any]:
    """``terms`` with integral floats as ints: protobuf turns ``105`` into ``105.0`` on the wire."""
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in terms.items()}


def parse_move(data: object) -> Move:
    """Validate an inbound move dict strictly and return it as a ``Move``.

    Rules: ``data`` is an object; ``action`` a non-empty string of at most ``MAX_ACTION``
    characters; ``message`` a string (may be empty) of at most ``MAX_MESSAGE``; ``terms``, if
    present and not null, a flat object of at most ``MAX_TERMS`` keys of at most ``MAX_TERM_KEY``
    characters, whose values are string, number, boolean or null (finite numbers only);
    ``offerId`` and ``acceptsOfferId``, if present, strings of at most ``MAX_OFFER_ID``. No
    string checked here (term keys included) may hold a NUL, which Postgres cannot store.
    Unknown keys are ignored, as the peer ignores them (docs/wire-format.md#moves).

    Stricter than the peer, which accepts nested terms: use ``decode_move`` to read a Task.

    Raises:
        MoveError: naming the field, e.g. "move.terms must be a flat JSON object, got array",
            "move.action must be at most 64 characters", "move.message must not contain a NUL
            character".
    """
    if not isinstance(data, Mapping):
        raise MoveError(f"move must be a JSON object, got {json_type(data)}")

    if "action" not in data:
        raise MoveError("move.action is required")
    action = data["action"]
    if not isinstance(action, str) or not action:
        raise MoveError(f"move.action must be a non-empty string, got {json_type(action)}")
    _storable("move.action", action, MAX_ACTION)

    if "message" not in data:
        raise MoveError("move.message is required")
    message = data["message"]
    if not isinstance(message, str):
        raise MoveError(f"move.message must be a string, got {json_type(message)}")
    _storable("move.message", message, MAX_MESSAGE)

    terms = data.get("terms")
    if terms is not None:
        if not isinstance(terms, Mapping):
            raise MoveError(f"move.terms must be a flat JSON object, got {json_type(terms)}")
        if len(terms) > MAX_TERMS:
            raise MoveError(f"move.terms must have at most {MAX_TERMS} keys, got {len(terms)}")
        for key, value in terms.items():
            if not isinstance(key, str):
                raise MoveError(f"move.terms keys must be strings, got {json_type(key)}")
            _storable("move.terms keys", key, MAX_TERM_KEY)
            if isinstance(value, str):
                _storable(f"move.terms.{key}", value)
            if value is not None and not isinstance(value, str | int | float):
                raise MoveError(
                    f"move.terms.{key} must be a string, number, boolean or null, got {json_type(value)}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise MoveError(f"move.terms.{key} must be a finite number, got {number_text(value)}")
        terms = integral_numbers(terms)

    return Move(
        action=action,
        message=message,
        terms=terms,
        offer_id=_optional_id(data, "offerId"),
        accepts_offer_id=_optional_id(data, "acceptsOfferId"),
    )


def decode_move(data: object) -> Move | None:
    """Read a move leniently, per docs/wire-format.md#reading-a-move.

    Returns a ``Move`` when ``data`` is an object whose ``action`` and ``message`` are strings,
    else None. Malformed optional fields are dropped rather than rejected: ``terms`` is kept
    only if it is an object (nested values included), the ids only if they are strings.
    """
    if not isinstance(data, Mapping):
        return None
    action = data.get("action")
    message = data.get("message")
    if not isinstance(action, str) or not isinstance(message, str):
        return None
    terms = data.get("terms")
    offer_id = data.get("offerId")
    accepts_offer_id = data.get("acceptsOfferId")
    return Move(
        action=action,
        message=message,
        terms=integral_numbers(terms) if isinstance(terms, Mapping) else None,
        offer_id=offer_id if isinstance(offer_id, str) else "",
        accepts_offer_id=accepts_offer_id if isinstance(accepts_offer_id, str) else "",
    )


@dataclass(frozen=True)
class Entry:
    """One message of a Task's history.

    ``move`` is the decoded move, or None when no data part decodes; ``text`` is then the first
    text part (docs/wire-format.md#reading-a-move: history falls back to it), and "" otherwise.
    """

    role: Role
    move: Move | None
    text: str = ""


@dataclass(frozen=True)
class TaskRecord:
    """What negotiation logic needs of an A2A Task: its state (A2A 0.3 name, one of
    ``TASK_STATES``) and its history in order."""

    state: str
    history: tuple[Entry, ...]


def state_name(raw: object) -> str:
    """The A2A 0.3 name of a 1.0 or 0.3 state: "TASK_STATE_INPUT_REQUIRED" and
    "input-required" both give "input-required"; a missing or unrecognised state (1.0's
    UNSPECIFIED included) gives "unknown"."""
    if not isinstance(raw, str):
        return "unknown"
    name = raw.lower().removeprefix("task_state_").replace("_", "-")
    return name if name in TASK_STATES else "unknown"


def _part_kind(part: Mapping[str, Any]) -> str:
    """0.3 parts say ``kind``; 1.0 parts are a oneof, told apart by which field is set."""
    kind = part.get("kind")
    if isinstance(kind, str):
        return kind
    for field in ("data", "text"):
        if field in part:
            return field
    return ""


def _entry(index: int, message: object) -> Entry:
    where = f"task.history[{index}]"
    if not isinstance(message, Mapping):
        raise ValueError(f"{where} must be an object, got {json_type(message)}")
    raw_role = message.get("role")
    role = _ROLES.get(raw_role.lower()) if isinstance(raw_role, str) else None
    if role is None:
        raise ValueError(f"{where}.role must be user or agent, got {raw_role!r}")

    parts = message.get("parts") or []
    if not isinstance(parts, list):
        raise ValueError(f"{where}.parts must be an array, got {json_type(parts)}")
    move: Move | None = None
    text: str | None = None
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = _part_kind(part)
        if kind == "data" and move is None:
            move = decode_move(part.get("data"))
        elif kind == "text" and text is None and isinstance(part.get("text"), str):
            text = part["text"]
    return Entry(role=role, move=move, text="" if move is not None or text is None else text)


def task_record_from_json(task: Mapping[str, Any]) -> TaskRecord:
    """Reduce a Task in A2A 1.0 protobuf-JSON or A2A 0.3 JSON to a ``TaskRecord``.

    Shapes: ``{"status": {"state": ...}, "history": [{"role": ..., "parts": [...]}, ...]}``;
    other keys are ignored. A missing ``history`` or ``parts`` counts as empty, since protobuf
    JSON omits empty lists. Each message's move is the first data part that ``decode_move``
    accepts (docs/wire-format.md#reading-a-move).

    Raises:
        ValueError: ``history`` is not an array, or a message is not an object, has parts that
            are not an array, or has a role other than user/agent (either dialect).
    """
    status = task.get("status")
    state = state_name(status.get("state") if isinstance(status, Mapping) else None)
    history = task.get("history") or []
    if not isinstance(history, list):
        raise ValueError(f"task.history must be an array, got {json_type(history)}")
    return TaskRecord(
        state=state,
        history=tuple(_entry(index, message) for index, message in enumerate(history)),
    )


def task_record_from_proto(task: Task) -> TaskRecord:
    """Reduce an a2a-sdk 1.3.0 ``Task`` to a ``TaskRecord`` via its protobuf JSON.

    Numbers in data parts come back as floats (docs/wire-format.md#dialects); ``canonical_terms`` makes
    that harmless. Raises ``ValueError`` as ``task_record_from_json`` does.
    """
    return task_record_from_json(MessageToDict(task))


def _canonical(value: object) -> str:
    if isinstance(value, Mapping):
        members = sorted(value.items())
        return "{" + ",".join(f"{json.dumps(k)}:{_canonical(v)}" for k, v in members) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_canonical(item) for item in value) + "]"
    # Protobuf stores every number as a double, so 100 comes back as 100.0 (JS has one number
    # type, so the peer never sees the difference either).
    if isinstance(value, float) and value.is_integer():
        return json.dumps(int(value))
    return json.dumps(value)


def canonical_terms(terms: Mapping[str, Any] | None) -> str:
    """Canonical compact JSON of a terms object, for equality (docs/wire-format.md#terms).

    Keys sorted at every depth, arrays kept in order, no whitespace, integral floats written as
    ints (so 100 and 100.0 agree, while 450 and "450" still differ). Null values are kept: the
    peer drops only JS ``undefined``, which JSON cannot carry, so ``{"a": null}`` differs from
    ``{}`` on both sides. ``None`` terms give ``"null"``.
    """
    return _canonical(terms)


def terms_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two terms objects have the same ``canonical_terms``."""
    return canonical_terms(a) == canonical_terms(b)
