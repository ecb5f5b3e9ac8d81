"""Tests for negotiations.wire: move encoding, Task readers, canonical terms."""

from __future__ import annotations

import re
from typing import Any

import pytest
from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict

from negotiations.models import Turn
from negotiations.wire import (
    MAX_ACTION,
    MAX_OFFER_ID,
    Entry,
    Move,
    MoveError,
    TaskRecord,
    canonical_terms,
    decode_move,
    parse_move,
    task_record_from_json,
    task_record_from_proto,
    terms_equal,
)

OFFER: dict[str, Any] = {
    "action": "propose",
    "message": "1,000 a day, two days a month.",
    "terms": {"amount": 1000, "currency": "EUR", "days": 2},
    "offerId": "offer-1",
}
ACCEPT: dict[str, Any] = {
    "action": "accept",
    "message": "Agreed.",
    "terms": {"amount": 1000, "currency": "EUR", "days": 2},
    "offerId": "offer-2",
    "acceptsOfferId": "offer-1",
}


# --- Move.to_data -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("move", "expected"),
    [
        (Move("counter", "No."), {"action": "counter", "message": "No."}),
        (
            Move("propose", "Here.", terms={"amount": 5}, offer_id="o1"),
            {"action": "propose", "message": "Here.", "terms": {"amount": 5}, "offerId": "o1"},
        ),
        (
            Move("accept", "Yes.", accepts_offer_id="o1"),
            {"action": "accept", "message": "Yes.", "acceptsOfferId": "o1"},
        ),
        # An empty terms object is still terms; only None is left out.
        (Move("propose", "", terms={}), {"action": "propose", "message": "", "terms": {}}),
    ],
)
def test_to_data(move: Move, expected: dict[str, Any]) -> None:
    assert move.to_data() == expected


def test_to_data_copies_terms() -> None:
    move = Move("propose", "Here.", terms={"amount": 5})
    data = move.to_data()
    data["terms"]["amount"] = 6
    assert move.terms == {"amount": 5}


# --- parse_move ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (OFFER, Move("propose", OFFER["message"], dict(OFFER["terms"]), "offer-1")),
        (ACCEPT, Move("accept", "Agreed.", dict(ACCEPT["terms"]), "offer-2", "offer-1")),
        ({"action": "ask", "message": ""}, Move("ask", "")),
        ({"action": "propose", "message": "x", "terms": None}, Move("propose", "x")),
        ({"action": "propose", "message": "x", "reasoning": "ignored"}, Move("propose", "x")),
        (
            {
                "action": "propose",
                "message": "x",
                "terms": {"a": "s", "b": 1.5, "c": True, "d": None},
            },
            Move("propose", "x", {"a": "s", "b": 1.5, "c": True, "d": None}),
        ),
    ],
)
def test_parse_move_accepts(data: dict[str, Any], expected: Move) -> None:
    assert parse_move(data) == expected


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ([], "move must be a JSON object, got array"),
        (None, "move must be a JSON object, got null"),
        ("accept", "move must be a JSON object, got string"),
        ({"message": "x"}, "move.action is required"),
        ({"action": 3, "message": "x"}, "move.action must be a non-empty string, got number"),
        (
            {"action": "", "message": "x"},
            "move.action must be a non-empty string, got empty string",
        ),
        ({"action": "accept"}, "move.message is required"),
        ({"action": "accept", "message": None}, "move.message must be a string, got null"),
        (
            {"action": "accept", "message": "x", "terms": [1]},
            "move.terms must be a flat JSON object, got array",
        ),
        (
            {"action": "accept", "message": "x", "terms": "450"},
            "move.terms must be a flat JSON object, got string",
        ),
        (
            {"action": "accept", "message": "x", "terms": {"when": {"day": "Mon"}}},
            "move.terms.when must be a string, number, boolean or null, got object",
        ),
        (
            {"action": "accept", "message": "x", "terms": {"days": ["Mon"]}},
            "move.terms.days must be a string, number, boolean or null, got array",
        ),
        (
            {"action": "accept", "message": "x", "terms": {"amount": float("inf")}},
            "move.terms.amount must be a finite number, got Infinity",
        ),
        (
            {"action": "accept", "message": "x", "terms": {1: "a"}},
            "move.terms keys must be strings, got number",
        ),
        (
            {"action": "accept", "message": "x", "offerId": 7},
            "move.offerId must be a string, got number",
        ),
        (
            {"action": "accept", "message": "x", "acceptsOfferId": None},
            "move.acceptsOfferId must be a string, got null",
        ),
        # What Postgres cannot store, or what exceeds the columns a move lands in.
        ({"action": "a" * 65, "message": "x"}, "move.action must be at most 64 characters"),
        ({"action": "pro\x00pose", "message": "x"}, "move.action must not contain a NUL character"),
        ({"action": "accept", "message": "x" * 4001}, "move.message must be at most 4000 characters"),
        ({"action": "accept", "message": "\x00"}, "move.message must not contain a NUL character"),
        (
            {"action": "accept", "message": "x", "offerId": "o" * 65},
            "move.offerId must be at most 64 characters",
        ),
        (
            {"action": "accept", "message": "x", "acceptsOfferId": "o" * 65},
            "move.acceptsOfferId must be at most 64 characters",
        ),
        (
            {"action": "accept", "message": "x", "acceptsOfferId": "o\x00"},
            "move.acceptsOfferId must not contain a NUL character",
        ),
        (
            {"action": "propose", "message": "x", "terms": {f"t{i}": i for i in range(33)}},
            "move.terms must have at most 32 keys, got 33",
        ),
        (
            {"action": "propose", "message": "x", "terms": {"k" * 65: 1}},
            "move.terms keys must be at most 64 characters",
        ),
        (
            {"action": "propose", "message": "x", "terms": {"amo\x00unt": 1}},
            "move.terms keys must not contain a NUL character",
        ),
        (
            {"action": "propose", "message": "x", "terms": {"currency": "EU\x00R"}},
            "move.terms.currency must not contain a NUL character",
        ),
    ],
)
def test_parse_move_rejects(data: object, error: str) -> None:
    with pytest.raises(MoveError, match=f"^{re.escape(error)}$"):
        parse_move(data)


def test_parse_move_accepts_each_bound_exactly() -> None:
    data = {
        "action": "a" * 64,
        "message": "m" * 4000,
        "terms": {f"{i:064d}": i for i in range(32)},
        "offerId": "o" * 64,
        "acceptsOfferId": "p" * 64,
    }

    assert parse_move(data).to_data() == data


@pytest.mark.parametrize(
    ("column", "bound"),
    [("action", MAX_ACTION), ("offer_id", MAX_OFFER_ID), ("accepts_offer_id", MAX_OFFER_ID)],
)
def test_bounds_fit_the_turn_columns(column: str, bound: int) -> None:
    assert Turn._meta.get_field(column).max_length == bound


def test_move_error_is_value_error() -> None:
    assert issubclass(MoveError, ValueError)


@pytest.mark.parametrize("data", [OFFER, ACCEPT, {"action": "reject", "message": "No."}])
def test_parse_move_round_trips(data: dict[str, Any]) -> None:
    assert parse_move(data).to_data() == data


# --- decode_move --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (OFFER, Move("propose", OFFER["message"], dict(OFFER["terms"]), "offer-1")),
        ({"action": "accept", "message": ""}, Move("accept", "")),
        # Malformed optional fields are dropped, not fatal.
        ({"action": "a", "message": "m", "terms": [1, 2]}, Move("a", "m")),
        ({"action": "a", "message": "m", "terms": "450"}, Move("a", "m")),
        ({"action": "a", "message": "m", "offerId": 1, "acceptsOfferId": None}, Move("a", "m")),
        # Nested terms are the peer's business; the lenient reader keeps them.
        (
            {"action": "a", "message": "m", "terms": {"when": {"day": "Mon"}}},
            Move("a", "m", {"when": {"day": "Mon"}}),
        ),
        ({"action": "", "message": "m"}, Move("", "m")),
        (None, None),
        ([OFFER], None),
        ("text", None),
        ({"action": "accept"}, None),
        ({"message": "hi"}, None),
        ({"action": 1, "message": "m"}, None),
        ({"action": "a", "message": None}, None),
    ],
)
def test_decode_move(data: object, expected: Move | None) -> None:
    assert decode_move(data) == expected


# --- task_record_from_json ----------------------------------------------------------------


def task_v03(state: str, *messages: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A Task as an Index peer (A2A 0.3) returns it."""
    return {
        "id": "t1",
        "contextId": "c1",
        "status": {"state": state, "timestamp": "2025-06-01T00:00:00Z"},
        "history": [
            {"messageId": f"m{i}", "role": role, "parts": parts, "taskId": "t1"}
            for i, (role, parts) in enumerate(messages)
        ],
        "artifacts": [],
    }


def test_both_dialects_give_the_same_record() -> None:
    v03 = task_v03(
        "completed",
        ("user", [{"kind": "data", "data": OFFER}]),
        ("agent", [{"kind": "text", "text": "Hello"}, {"kind": "data", "data": ACCEPT}]),
        ("user", [{"kind": "text", "text": "thanks"}]),
    )
    v10 = {
        "id": "t1",
        "status": {"state": "TASK_STATE_COMPLETED"},
        "history": [
            {"messageId": "m0", "role": "ROLE_USER", "parts": [{"data": OFFER}]},
            {
                "messageId": "m1",
                "role": "ROLE_AGENT",
                "parts": [{"text": "Hello", "mediaType": "text/plain"}, {"data": ACCEPT}],
            },
            {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "thanks"}]},
        ],
    }
    expected = TaskRecord(
        state="completed",
        history=(
            Entry("user", parse_move(OFFER)),
            Entry("agent", parse_move(ACCEPT)),
            Entry("user", None, "thanks"),
        ),
    )
    assert task_record_from_json(v03) == expected
    assert task_record_from_json(v10) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("submitted", "submitted"),
        ("working", "working"),
        ("input-required", "input-required"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("canceled", "canceled"),
        ("rejected", "rejected"),
        ("auth-required", "auth-required"),
        ("unknown", "unknown"),
        ("TASK_STATE_SUBMITTED", "submitted"),
        ("TASK_STATE_WORKING", "working"),
        ("TASK_STATE_INPUT_REQUIRED", "input-required"),
        ("TASK_STATE_COMPLETED", "completed"),
        ("TASK_STATE_FAILED", "failed"),
        ("TASK_STATE_CANCELED", "canceled"),
        ("TASK_STATE_REJECTED", "rejected"),
        ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
        ("TASK_STATE_UNSPECIFIED", "unknown"),
        ("expired", "unknown"),
        (None, "unknown"),
        (3, "unknown"),
    ],
)
def test_state_is_normalised(state: object, expected: str) -> None:
    assert task_record_from_json({"status": {"state": state}}).state == expected


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ({}, TaskRecord("unknown", ())),
        ({"status": "completed"}, TaskRecord("unknown", ())),
        ({"status": {"state": "working"}, "history": None}, TaskRecord("working", ())),
        # protobuf JSON leaves out an empty parts list.
        (
            {"status": {"state": "working"}, "history": [{"role": "user"}]},
            TaskRecord("working", (Entry("user", None),)),
        ),
    ],
)
def test_missing_pieces_read_as_empty(task: dict[str, Any], expected: TaskRecord) -> None:
    assert task_record_from_json(task) == expected


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        # The first data part that decodes wins; earlier undecodable ones are skipped.
        (
            [{"kind": "data", "data": {"note": 1}}, {"kind": "data", "data": OFFER}],
            Entry("agent", parse_move(OFFER)),
        ),
        (
            [{"kind": "data", "data": OFFER}, {"kind": "data", "data": ACCEPT}],
            Entry("agent", parse_move(OFFER)),
        ),
        # No decodable move: the first text part stands in.
        (
            [{"kind": "data", "data": {"note": 1}}, {"kind": "text", "text": "a"}, {"text": "b"}],
            Entry("agent", None, "a"),
        ),
        ([{"kind": "file", "file": {}}, "junk", {"kind": "text", "text": 5}], Entry("agent", None)),
        # kind decides, not which field happens to be present.
        ([{"kind": "text", "text": "t", "data": OFFER}], Entry("agent", None, "t")),
        ([], Entry("agent", None)),
    ],
)
def test_entry_parts(parts: list[Any], expected: Entry) -> None:
    record = task_record_from_json(task_v03("working", ("agent", parts)))
    assert record.history == (expected,)


@pytest.mark.parametrize(
    ("role", "expected"),
    [("user", "user"), ("ROLE_USER", "user"), ("Agent", "agent"), ("ROLE_AGENT", "agent")],
)
def test_roles(role: str, expected: str) -> None:
    record = task_record_from_json({"history": [{"role": role, "parts": []}]})
    assert record.history[0].role == expected


@pytest.mark.parametrize(
    ("task", "error"),
    [
        ({"history": {"0": {}}}, "task.history must be an array, got object"),
        ({"history": ["hi"]}, "task.history[0] must be an object, got string"),
        (
            {"history": [{"role": "user"}, {"role": "ROLE_UNSPECIFIED"}]},
            "task.history[1].role must be user or agent, got 'ROLE_UNSPECIFIED'",
        ),
        ({"history": [{"parts": []}]}, "task.history[0].role must be user or agent, got None"),
        (
            {"history": [{"role": "user", "parts": {"kind": "text"}}]},
            "task.history[0].parts must be an array, got object",
        ),
    ],
)
def test_malformed_task_raises(task: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        task_record_from_json(task)


# --- task_record_from_proto ---------------------------------------------------------------


def data_part(payload: dict[str, Any]) -> Part:
    value = struct_pb2.Value()
    ParseDict(payload, value)
    return Part(data=value)


def test_proto_task_matches_json_task() -> None:
    task = Task(
        id="t1",
        status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED),
        history=[
            Message(message_id="m0", role=Role.ROLE_USER, parts=[data_part(OFFER)]),
            Message(message_id="m1", role=Role.ROLE_AGENT, parts=[Part(text="Let me check.")]),
        ],
    )
    record = task_record_from_proto(task)
    assert record == task_record_from_json(
        task_v03(
            "input-required",
            ("user", [{"kind": "data", "data": OFFER}]),
            ("agent", [{"kind": "text", "text": "Let me check."}]),
        )
    )
    # Protobuf hands the integers back as floats; decoding turns integral ones back into ints.
    move = record.history[0].move
    assert move is not None
    assert move.terms == {"amount": 1000, "currency": "EUR", "days": 2}
    assert isinstance(move.terms["amount"], int)
    assert canonical_terms(move.terms) == '{"amount":1000,"currency":"EUR","days":2}'


# --- canonical_terms / terms_equal --------------------------------------------------------


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        (None, "null"),
        ({}, "{}"),
        ({"b": 1, "a": "x"}, '{"a":"x","b":1}'),
        ({"amount": 100.0}, '{"amount":100}'),
        ({"amount": 100.5}, '{"amount":100.5}'),
        ({"amount": "450"}, '{"amount":"450"}'),
        ({"ok": True, "n": None}, '{"n":null,"ok":true}'),
        ({"z": {"d": 2.0, "c": [3, 1.0, "é"]}}, '{"z":{"c":[3,1,"\\u00e9"],"d":2}}'),
    ],
)
def test_canonical_terms(terms: dict[str, Any] | None, expected: str) -> None:
    assert canonical_terms(terms) == expected


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ({"amount": 100}, {"amount": 100.0}, True),
        ({"amount": 450}, {"amount": "450"}, False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
        ({"days": [1, 2]}, {"days": [2, 1]}, False),
        ({"a": None}, {}, False),
        ({"flag": True}, {"flag": 1}, False),
        ({"amount": 0.1}, {"amount": 0.1}, True),
        ({}, None, False),
        (None, None, True),
    ],
)
def test_terms_equal(a: dict[str, Any] | None, b: dict[str, Any] | None, equal: bool) -> None:
    assert terms_equal(a, b) is equal
    assert terms_equal(b, a) is equal
