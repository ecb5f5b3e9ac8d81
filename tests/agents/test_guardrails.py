"""Guardrails: the e-mail and phone detectors, block and redact in list order, and validation."""

from __future__ import annotations

import pickle

import pytest
from django.core.exceptions import ValidationError

from agents.guardrails import MAX_PATTERN_LENGTH, Guardrail, GuardrailTripped, check, validate


def _guard(
    match: str, *, action: str = "redact", stage: str = "input", name: str = "g", **extra: str
) -> Guardrail:
    return {"name": name, "stage": stage, "action": action, "match": match, **extra}


def _messages(guardrails: object) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        validate(guardrails)
    return caught.value.messages


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("jane@example.com", "[email redacted]"),
        ("jane.doe+deals@mail.example.co.uk", "[email redacted]"),
        ("j_doe%x@sub-domain.example.org", "[email redacted]"),
        ("josé@exämple.de", "[email redacted]"),
        ("Write to bob@example.com.", "Write to [email redacted]."),
        ("<bob@example.com>, (ann@example.net)", "<[email redacted]>, ([email redacted])"),
        ("a@b.co and c@d.io", "[email redacted] and [email redacted]"),
    ],
)
def test_email_detector_finds(text: str, redacted: str) -> None:
    assert check([_guard("email")], stage="input", text=text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "x@localhost",  # no top-level domain
        "a@b.c",  # a one-letter top-level domain
        "user@123.45",  # a numeric "top-level domain"
        "@example.com",
        "jane at example dot com",
        "price: 1,100 @ 5%",
    ],
)
def test_email_detector_leaves(text: str) -> None:
    assert check([_guard("email")], stage="input", text=text) == text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        # international
        ("+44 20 7946 0958", "[phone redacted]"),
        ("+33 (0)6 12 34 56 78", "[phone redacted]"),
        ("+1-555-123-4567", "[phone redacted]"),
        ("+1 (555) 123-4567", "[phone redacted]"),
        ("+4915112345678", "[phone redacted]"),
        ("+49 30.1234.5678", "[phone redacted]"),
        # national, parenthesised area code
        ("(555) 123-4567", "[phone redacted]"),
        ("(555)123-4567", "[phone redacted]"),
        ("1 (555) 123-4567", "[phone redacted]"),
        ("(030) 1234567", "[phone redacted]"),
        # national, trunk 0
        ("020 7946 0958", "[phone redacted]"),
        ("07700 900123", "[phone redacted]"),
        ("030-12345678", "[phone redacted]"),
        ("06.12.34.56.78", "[phone redacted]"),
        ("01 23 45 67 89", "[phone redacted]"),
        ("0044 20 7946 0958", "[phone redacted]"),
        # North American
        ("555-123-4567", "[phone redacted]"),
        ("555.123.4567", "[phone redacted]"),
        ("555 123 4567", "[phone redacted]"),
        ("1-800-555-0199", "[phone redacted]"),
        # in prose
        ("Call 555-123-4567, thanks.", "Call [phone redacted], thanks."),
        ("tel:+44 20 7946 0958.", "tel:[phone redacted]."),
        ("(call 555-123-4567)", "(call [phone redacted])"),
        ("Call 555-123-4567 24/7", "Call [phone redacted] 24/7"),
        ("call 555-123-4567 3 times", "call [phone redacted] 3 times"),
        ("on 2026-11-30 call 555 123 4567", "on 2026-11-30 call [phone redacted]"),
        ("on 2026-11-30 555 123 4567", "on 2026-11-30 [phone redacted]"),
        ("home 020 7946 0958 or +33 6 12 34 56 78", "home [phone redacted] or [phone redacted]"),
        # the longest reading wins where more digits follow
        ("at 020 7946 0958 10 am", "at [phone redacted] am"),
    ],
)
def test_phone_detector_finds(text: str, redacted: str) -> None:
    assert check([_guard("phone")], stage="input", text=text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        # money
        "1030",
        "€1,100",
        "1100.50",
        "1,100.50",
        "1.234.567,89",
        "12500000.00",
        "12 500 000",
        "12.500.000",
        "I can pay 1000-1200 a month",
        "EUR 1 234 567 890",
        # dates and times
        "2026-11-30",
        "2026.11.30",
        "30.11.2026",
        "30-11-2026",
        "11/30/2026",
        "2026-11-30 14:30",
        "2026-11-30T14:30:00Z",
        "2025-2026",
        "14:30",
        "14:30:00",
        # identifiers
        "550e8400-e29b-41d4-a716-446655440000",
        "abcdefab-cdef-1234-5678-abcdef123456",
        "12345678-1234-5678-1234-567812345678",
        "ORD-1234-5678",
        "12345678",
        "order 0123456789",
        "4111 1111 1111 1111",
        "5500 0000 0000 0004",
        # versions and addresses
        "1.2.3",
        "v2.10.4",
        "10.0.19045.3803",
        "0.10.2024.1115",
        "192.168.100.200",
        "10.10.10.10",
        # too few digits, or a shape the definition leaves out
        "+12",
        "555-1234",
        "612 345 678",
        "12 34 56 78",
        "ref 12 555-123-4567",
    ],
)
def test_phone_detector_leaves(text: str) -> None:
    assert check([_guard("phone")], stage="input", text=text) == text


def test_regex_redaction_and_empty_matches() -> None:
    assert check([_guard("regex", pattern=r"ACME-\d+")], stage="input", text="ACME-1 and ACME-22") == (
        "[redacted] and [redacted]"
    )
    # An empty match redacts nothing and blocks nothing.
    assert check([_guard("regex", pattern=r"\b")], stage="input", text="two words") == "two words"
    assert check([_guard("regex", action="block", pattern=r"(?=x)")], stage="input", text="abc") == "abc"


def test_block_raises_naming_guardrail_and_stage() -> None:
    guard = _guard("regex", action="block", stage="output", name="no-secrets", pattern="sk-[a-z0-9]+")

    with pytest.raises(GuardrailTripped) as caught:
        check([guard], stage="output", text="the key is sk-abc123")

    assert str(caught.value) == 'Guardrail "no-secrets" blocked the output.'
    assert (caught.value.name, caught.value.stage) == ("no-secrets", "output")
    assert "sk-abc123" not in str(caught.value)
    assert check([guard], stage="output", text="no key here") == "no key here"


def test_tripped_pickles() -> None:
    copy = pickle.loads(pickle.dumps(GuardrailTripped("no-secrets", "input")))

    assert (copy.name, copy.stage, str(copy)) == (
        "no-secrets",
        "input",
        'Guardrail "no-secrets" blocked the input.',
    )


def test_only_the_stage_asked_for_applies() -> None:
    guardrails = [
        _guard("email", stage="input"),
        _guard("phone", stage="output", name="phones"),
    ]
    text = "bob@example.com, 555-123-4567"

    assert check(guardrails, stage="input", text=text) == "[email redacted], 555-123-4567"
    assert check(guardrails, stage="output", text=text) == "bob@example.com, [phone redacted]"


def test_redact_before_block_disarms_it_and_block_before_redact_trips() -> None:
    redact = _guard("email", name="hide-emails")
    block = _guard("email", action="block", name="no-emails")

    assert check([redact, block], stage="input", text="bob@example.com") == "[email redacted]"
    with pytest.raises(GuardrailTripped) as caught:
        check([block, redact], stage="input", text="bob@example.com")
    assert caught.value.name == "no-emails"


def test_several_guardrails_apply_in_order() -> None:
    guardrails = [
        _guard("email", name="emails"),
        _guard("phone", name="phones"),
        # Sees the text after the two redactions above: its own marker is added around theirs.
        _guard("regex", name="markers", pattern=r"\[(email|phone) redacted\]"),
        _guard("regex", action="block", name="no-passwords", pattern="(?i)password"),
    ]

    assert check(guardrails, stage="input", text="bob@example.com / +44 20 7946 0958") == (
        "[redacted] / [redacted]"
    )
    with pytest.raises(GuardrailTripped) as caught:
        check(guardrails, stage="input", text="bob@example.com, Password: hunter2")
    assert caught.value.name == "no-passwords"


def test_no_guardrails_and_empty_text() -> None:
    assert check([], stage="input", text="bob@example.com") == "bob@example.com"
    assert check([_guard("email", action="block")], stage="input", text="") == ""


@pytest.mark.parametrize(
    ("guardrails", "stage"),
    [
        ([], "inbound"),
        ([_guard("email", action="mask")], "input"),
        ([_guard("ssn")], "input"),
        ([_guard("regex")], "input"),  # no pattern
    ],
)
def test_check_refuses_what_it_cannot_apply(guardrails: list[Guardrail], stage: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is informative only
        check(guardrails, stage=stage, text="bob@example.com")


@pytest.mark.parametrize(
    "text",
    [
        "1" * 200_000,
        "1 " * 100_000,
        "1-" * 100_000,
        "12." * 70_000,
        "1(2)" * 50_000,
        "555-123 " * 30_000,
        "2026-11-30 " * 20_000,
        "(" * 100_000,
        "+" * 100_000,
        "a" * 200_000,
        "a." * 100_000 + "@",
        "a@" + "b." * 100_000,
        "a@" * 100_000,
        "a@" + "b" * 200_000,
        "a@" + "b-" * 100_000,
    ],
)
def test_detectors_finish_on_hostile_text(text: str) -> None:
    """Quadratic backtracking on 200,000 characters would take minutes: this suite would hang here.
    What is checked is the answer: none of these holds an address or a phone number."""
    guardrails = [_guard("email", action="redact"), _guard("phone", action="redact")]

    assert check(guardrails, stage="input", text=text) == text


def test_validate_accepts_a_good_list() -> None:
    validate([])
    validate(
        [
            _guard("email", action="block", name="no-emails"),
            _guard("phone", stage="output", name="phones", pattern=""),
            _guard("regex", name="keys", pattern=r"sk-[A-Za-z0-9]{20,}"),
        ]
    )


@pytest.mark.parametrize(
    ("guardrails", "messages"),
    [
        ({"name": "x"}, ["guardrails: must be a list."]),
        ("[]", ["guardrails: must be a list."]),
        (["email"], ["guardrails[0]: must be an object."]),
        (
            [{}],
            [
                "guardrails[0].name: required, and not blank.",
                'guardrails[0].stage: required, one of "input", "output".',
                'guardrails[0].action: required, one of "block", "redact".',
                'guardrails[0].match: required, one of "email", "phone", "regex".',
            ],
        ),
        (
            [_guard("email"), _guard("ssn", stage="inbound", action="mask", name="x")],
            [
                'guardrails[1].stage: "inbound" is not one of "input", "output".',
                'guardrails[1].action: "mask" is not one of "block", "redact".',
                'guardrails[1].match: "ssn" is not one of "email", "phone", "regex".',
            ],
        ),
        (
            [_guard("email", stage=["input"])],
            [
                'guardrails[0].stage: ["input"] is not one of "input", "output".',
            ],
        ),
        ([_guard("email", name="  ")], ["guardrails[0].name: required, and not blank."]),
        ([_guard("email", name=7)], ["guardrails[0].name: required, and not blank."]),
        (
            [_guard("email", name="pii"), _guard("phone", name="ok"), _guard("phone", name="pii")],
            ['guardrails[2].name: "pii" is used twice.'],
        ),
        ([_guard("email", patern="x")], ["guardrails[0].patern: unknown field."]),
        ([_guard("regex")], ["guardrails[0].pattern: required for a regex guardrail."]),
        ([_guard("regex", pattern="")], ["guardrails[0].pattern: required for a regex guardrail."]),
        (
            [_guard("regex", pattern="a" * (MAX_PATTERN_LENGTH + 1))],
            [f"guardrails[0].pattern: {MAX_PATTERN_LENGTH + 1} characters, more than {MAX_PATTERN_LENGTH}."],
        ),
        (
            [_guard("email"), _guard("regex", name="r", pattern="(unclosed")],
            ["guardrails[1].pattern: does not compile (missing ), unterminated subpattern at position 0)."],
        ),
        ([_guard("regex", pattern="x*")], ["guardrails[0].pattern: matches empty text."]),
        ([_guard("email", pattern="x")], ['guardrails[0].pattern: only a "regex" guardrail has one.']),
    ],
)
def test_validate_names_the_bad_entry_and_field(guardrails: object, messages: list[str]) -> None:
    assert _messages(guardrails) == messages


def test_validate_accepts_the_longest_pattern() -> None:
    validate([_guard("regex", pattern="a" * MAX_PATTERN_LENGTH)])
