"""The answer contract: every accepted turn gets one non-empty answer within the agent's timeout.

The turn is made slow for real: the agent's evaluation hook (called inside the
turn, negotiations/evaluation.py) holds its request until the test lets it go,
so the answer provably came while the turn was still running.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Count

from agents.models import Agent
from negotiations.models import Negotiation
from tests.a2a_gateway.conftest import Endpoint, move, proposal
from tests.a2a_gateway.rpc import call, message, task_of, tune
from tests.a2a_gateway.servers import HeldHook
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULT_TRY_AGAIN = "I could not answer in time. Please try again in a moment."


def reply_text(task: dict[str, Any]) -> str:
    """The text of the last message of ``task``'s history (1.0 JSON), which must be the agent's."""
    last = task["history"][-1]
    assert last["role"] == "ROLE_AGENT"
    [part] = last["parts"]
    return str(part["text"])


@pytest.mark.parametrize(
    ("configured", "answer"),
    [
        (
            "Still thinking it over — send that again in a minute.",
            "Still thinking it over — send that again in a minute.",
        ),
        ("  ", DEFAULT_TRY_AGAIN),
    ],
    ids=["its-own-text", "blank-text"],
)
def test_a_turn_that_outlasts_the_timeout_is_answered_try_again(
    seller_endpoint: Endpoint, seller: Agent, configured: str, answer: str
) -> None:
    with HeldHook() as hook:
        tune(seller, turn_timeout=1.0, evaluation_url=hook.url, try_again_text=configured)

        task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))

        assert hook.answered == 0  # the turn was still running when the answer came
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert reply_text(task) == answer
        assert [(a["artifactId"], a["parts"]) for a in task["artifacts"]] == [
            ("negotiator:reply", [{"text": answer}])
        ]
        stored = call(seller_endpoint.url, "GetTask", {"id": task["id"]}).json()["result"]
        assert stored["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert reply_text(stored) == answer


def test_the_counterparty_tries_again_on_the_same_task(seller_endpoint: Endpoint, seller: Agent) -> None:
    with HeldHook() as hook:
        tune(seller, turn_timeout=1.0, evaluation_url=hook.url)
        task = task_of(call(seller_endpoint.url, "SendMessage", message(proposal(800))))
        assert reply_text(task) == DEFAULT_TRY_AGAIN
        hook.release.set()
        # The late turn ends on its own (the hook answers both of its moves).
        wait_until(lambda: hook.answered == 2, what="the late turn to end")
        tune(seller, turn_timeout=30.0)

        again = call(seller_endpoint.url, "SendMessage", message(proposal(820), task=task))

    answered = task_of(again)
    assert answered["id"] == task["id"]
    assert answered["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    last = answered["history"][-1]
    assert last["role"] == "ROLE_AGENT"
    assert last["parts"][0]["data"]["action"] in ("propose", "counter")
    assert Negotiation.across_tenants.annotate(n=Count("turns")).get().n == 4


def test_the_0_3_wire_gets_the_same_answer(seller_endpoint: Endpoint, seller: Agent) -> None:
    with HeldHook() as hook:
        tune(seller, turn_timeout=1.0, evaluation_url=hook.url)
        sent = {
            "message": {
                "kind": "message",
                "messageId": "m-0-3",
                "role": "user",
                "parts": [{"kind": "data", "data": move("propose", "€800 a day?", terms={"amount": 800})}],
            }
        }

        response = call(seller_endpoint.url, "message/send", sent, version=None)

        assert hook.answered == 0
    task = response.json()["result"]
    assert task["status"]["state"] == "input-required"
    assert task["history"][-1]["role"] == "agent"
    assert task["history"][-1]["parts"] == [{"kind": "text", "text": DEFAULT_TRY_AGAIN}]
