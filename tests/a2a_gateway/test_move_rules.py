"""What a counterparty meets of an agent's move rules (docs/move-rules.md), through a2a-sdk's resolver
and client at both protocol versions, over HTTP to the live stack.

The card says what the agent takes — plain text only where its representative
face answers it; its vocabulary, the terms it declares and a JSON Schema of a
move in our negotiation extension — and a move outside those rules is refused
with -32602, naming the action or the term, before anything is stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import AgentCard, TaskState
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from jsonschema import Draft202012Validator, FormatChecker

from agents.models import Agent
from negotiations.models import Negotiation, Turn
from negotiations.rules import NEGOTIATION_EXTENSION
from tests.a2a_gateway.conftest import Endpoint, counts, endpoint_of, move, proposal, run, user_message
from tests.a2a_gateway.servers import on_wire
from tests.a2a_gateway.test_errors import snapshot
from tests.conftest import LiveStack
from tests.representative.studio import HOURS, answer_of, question, quoted

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = ["1.0", "0.3"]
NOTHING = {"Negotiation": 0, "Turn": 0, "Settlement": 0, "A2ATask": 0}
NO_MOVE = "Invalid negotiation move: the message has no data part carrying a move {action, message, …}"
# The seller's terms description, "amount (number, EUR per day), currency", as the card publishes it.
SELLER_TERMS = [
    {"name": "amount", "type": "number", "unit": "EUR per day", "currency": "EUR"},
    {"name": "currency"},
]
DEFAULT_ACTIONS = [
    {"name": "propose", "description": "put an offer on the table", "terminal": False},
    {"name": "counter", "description": "answer an offer with another", "terminal": False},
    {"name": "accept", "description": "accept an offer on the table", "terminal": True, "state": "completed"},
    {"name": "reject", "description": "end without a deal", "terminal": True, "state": "rejected"},
]


def rules_on(card: AgentCard) -> dict[str, Any]:
    """The params of the card's negotiation extension, as JSON."""
    [extension] = [e for e in card.capabilities.extensions if e.uri == NEGOTIATION_EXTENSION]
    assert not extension.required
    return MessageToDict(extension.params)


def refusal_of(endpoint: Endpoint, data: dict[str, Any], wire: str, **ids: Any) -> str:
    """The -32602 message a2a-sdk's client raises for the move ``data``, sent on ``wire``."""
    with pytest.raises(InvalidParamsError) as refused:
        endpoint.send(user_message(data, **ids), card=on_wire(endpoint.card(), wire))
    return str(refused.value.message)


# --- Input modes -----------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_an_agent_that_answers_no_visitor_takes_no_plain_text_and_its_card_says_so(
    seller_endpoint: Endpoint, wire: str
) -> None:
    card = seller_endpoint.card()
    body = run(lambda http: http.get(seller_endpoint.card_url)).json()

    assert list(card.default_input_modes) == ["application/json"]
    assert body["defaultInputModes"] == ["application/json"]  # what a 0.3 client reads
    assert all("text/plain" not in skill.input_modes for skill in card.skills)
    with pytest.raises(InvalidParamsError) as refused:
        seller_endpoint.send(question("Do you take on new clients?"), card=on_wire(card, wire))
    assert refused.value.message == NO_MOVE
    assert counts() == NOTHING


@pytest.mark.parametrize("wire", WIRES)
def test_an_agent_whose_representative_answers_takes_plain_text_and_its_card_says_so(
    live_stack: LiveStack, vera: Agent, wire: str
) -> None:
    endpoint = endpoint_of(live_stack, vera)
    card = endpoint.card()

    assert list(card.default_input_modes) == ["application/json", "text/plain"]
    assert [(s.id, list(s.input_modes)) for s in card.skills] == [
        ("negotiate", ["application/json"]),
        ("ask", ["text/plain"]),
    ]
    task = endpoint.send(question("When are you open?"), card=on_wire(card, wire))
    assert answer_of(task) == quoted("Opening hours", HOURS)
    assert Negotiation.across_tenants.count() == 0


# --- The rules on the card -------------------------------------------------------------------


def test_the_card_publishes_the_vocabulary_the_terms_and_the_schema_of_a_move(
    seller_endpoint: Endpoint,
) -> None:
    card = seller_endpoint.card()
    legacy = run(lambda http: http.get(f"{seller_endpoint.url}/.well-known/agent.json")).json()

    params = rules_on(card)
    assert params["actions"] == DEFAULT_ACTIONS
    assert params["terms"] == SELLER_TERMS
    schema = params["moveSchema"]
    Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["action", "message"]
    assert schema["properties"]["action"] == {"enum": ["propose", "counter", "accept", "reject"]}
    assert schema["properties"]["terms"]["properties"] == {
        "amount": {"type": "number", "description": "EUR per day"},
        "currency": {"type": ["string", "number", "boolean", "null"]},
    }
    # The legacy path serves it to 0.3 clients, keys in one order on every web process.
    [extension] = [e for e in legacy["capabilities"]["extensions"] if e["uri"] == NEGOTIATION_EXTENSION]
    assert extension["params"]["terms"] == SELLER_TERMS
    assert list(extension["params"]) == ["actions", "moveSchema", "terms"]


def test_a_custom_vocabulary_and_typed_terms_are_published(seller_endpoint: Endpoint, seller: Agent) -> None:
    seller.allowed_actions = [
        {"name": "book", "description": "book the session", "terminal": True, "state": "completed"},
        {"name": "decline", "description": "", "terminal": True, "state": ""},
        {"name": "suggest", "description": "suggest another slot", "terminal": False, "state": ""},
    ]
    seller.terms = "day (date), fee (integer, GBP per session), remote (boolean)"
    seller.save()

    params = rules_on(seller_endpoint.card())

    assert params["actions"] == [
        {"name": "book", "description": "book the session", "terminal": True, "state": "completed"},
        {"name": "decline", "description": "", "terminal": True, "state": "rejected"},
        {"name": "suggest", "description": "suggest another slot", "terminal": False},
    ]
    assert params["terms"] == [
        {"name": "day", "type": "date"},
        {"name": "fee", "type": "integer", "unit": "GBP per session", "currency": "GBP"},
        {"name": "remote", "type": "boolean"},
    ]


# --- Moves outside the rules -----------------------------------------------------------------


HAGGLE = "Invalid negotiation move: move.action 'haggle' is not one of propose, counter, accept, reject"
LOTS = "Invalid negotiation move: move.terms.amount must be a number (EUR per day), got 'lots'"

MOVES = [
    pytest.param(move("haggle", "Come on, meet me halfway."), HAGGLE, id="unknown-action"),
    pytest.param(move("propose", "Lots.", terms={"amount": "lots", "currency": "EUR"}), LOTS, id="lots"),
    pytest.param(
        move("propose", "Yes.", terms={"amount": True, "currency": "EUR"}),
        "Invalid negotiation move: move.terms.amount must be a number (EUR per day), got boolean",
        id="boolean-amount",
    ),
    # Terms the agent does not declare pass unchecked; any scalar for a term it declares untyped.
    pytest.param(
        move("propose", "€800, two days.", terms={"amount": 800, "currency": "EUR", "days": 2}),
        None,
        id="extra-term",
    ),
    pytest.param(move("propose", "€800.", terms={"amount": 800, "currency": 978}), None, id="untyped-term"),
]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(("data", "refusal"), MOVES)
def test_a_first_move_outside_the_rules_is_refused_naming_what_is_wrong(
    seller_endpoint: Endpoint, data: dict[str, Any], refusal: str | None, wire: str
) -> None:
    """The card's schema and the gateway agree: a move the schema refuses is refused, and the
    refusal names the action (and the allowed ones) or the term (and its type)."""
    schema = rules_on(seller_endpoint.card())["moveSchema"]

    assert Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(data) is (refusal is None)
    if refusal is None:
        task = seller_endpoint.send(user_message(data), card=on_wire(seller_endpoint.card(), wire))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert Turn.across_tenants.filter(side=Turn.Side.THEIRS).get().terms == data["terms"]
    else:
        assert refusal_of(seller_endpoint, data, wire) == refusal
        assert counts() == NOTHING


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(("data", "refusal"), [m for m in MOVES if m.values[1] is not None])
def test_a_follow_up_outside_the_rules_leaves_the_task_as_it_was(
    seller_endpoint: Endpoint, data: dict[str, Any], refusal: str, wire: str
) -> None:
    task = seller_endpoint.send(user_message(proposal(800)))
    before, before_counts = snapshot(task), counts()

    assert refusal_of(seller_endpoint, data, wire, task=task) == refusal

    assert snapshot(task) == before
    assert counts() == before_counts
    again = seller_endpoint.send(user_message(proposal(850), task=task))
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.mark.parametrize("wire", WIRES)
def test_a_term_typed_date_refuses_a_relative_date(
    seller_endpoint: Endpoint, seller: Agent, wire: str
) -> None:
    seller.terms = "amount (number, EUR per day), currency, start (date)"
    seller.save()
    data = move(
        "propose", "From next week.", terms={"amount": 1000, "currency": "EUR", "start": "next Monday"}
    )

    assert refusal_of(seller_endpoint, data, wire) == (
        "Invalid negotiation move: move.terms.start must be a date (YYYY-MM-DD), got 'next Monday'"
    )
    assert counts() == NOTHING


def test_the_raw_refusal_is_invalid_params_on_both_wires(seller_endpoint: Endpoint) -> None:
    data = move("haggle", "Halfway?")

    current = seller_endpoint.rpc(
        "SendMessage", {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": data}]}}
    )
    legacy = seller_endpoint.rpc(
        "message/send",
        {"message": {"messageId": "m-2", "role": "user", "parts": [{"kind": "data", "data": data}]}},
        version=None,
    )

    for response in (current, legacy):
        assert response.status_code == 200
        error = response.json()["error"]
        assert (error["code"], error["message"]) == (-32602, HAGGLE)
    assert counts() == NOTHING
