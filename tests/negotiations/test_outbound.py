"""Our outbound side against a counterparty built here from plain a2a-sdk parts, not our gateway.

The counterparty answers the way SDK servers tend to — its reply only in
``status.message`` — and keeps its Tasks in the SDK's in-memory store, so the
test can compute the verdict over *its* record and compare it with ours.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from a2a.helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from django.contrib.auth.models import AbstractUser
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette

from agents.models import Agent, Intent, Question, Run
from agents.services import questions, runs
from negotiations.client import with_reply_in_history
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.negotiator import terminal_actions
from negotiations.verdict import settle
from negotiations.wire import task_record_from_json
from tests.conftest import LiveStack, wait_until
from tests.loopback import LoopbackServer, agent_card

FLOOR = 1000
ASKING = 1200


class PlainSeller(AgentExecutor):
    """Counters at 1,200 EUR until offered at least 1,000, then accepts that offer by its id."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id
        assert context.context_id
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        move: dict[str, Any] = get_data_parts(context.message.parts)[0]
        amount = (move.get("terms") or {}).get("amount", 0)
        if move["action"] == "reject":
            await updater.reject(self._say(updater, {"action": "reject", "message": "Understood."}))
        elif amount >= FLOOR:
            reply = {
                "action": "accept",
                "message": f"Agreed at €{amount:,.0f}.",
                "terms": move["terms"],
                "offerId": str(uuid.uuid4()),
                "acceptsOfferId": move["offerId"],
            }
            await updater.complete(self._say(updater, reply))
        else:
            reply = {
                "action": "counter",
                "message": f"My rate is €{ASKING:,}.",
                "terms": {"amount": ASKING, "currency": "EUR"},
                "offerId": str(uuid.uuid4()),
            }
            await updater.requires_input(self._say(updater, reply))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id
        assert context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    @staticmethod
    def _say(updater: TaskUpdater, move: dict[str, Any]) -> Any:
        return updater.new_agent_message([new_data_part(move)])


class PlainCounterparty(LoopbackServer):
    """The seller served by uvicorn on loopback, in a thread of the test process, on an event loop
    of its own so that the test can reach the SDK's task store there."""

    what = "the plain counterparty"

    def __init__(self) -> None:
        super().__init__()
        self.url = self.origin
        self.store = InMemoryTaskStore()
        card = agent_card(
            "Plain Seller",
            "A seller built from plain a2a-sdk parts.",
            self.url,
            skill_description="Sells CFO days.",
        )
        handler = DefaultRequestHandler(agent_executor=PlainSeller(), task_store=self.store, agent_card=card)
        app = Starlette(
            routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
        )
        self.listen(app)
        self.loop: asyncio.AbstractEventLoop | None = None

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.server.serve())

    def stored_task(self, task_id: str) -> dict[str, Any]:
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(self.store.get(task_id, ServerCallContext()), self.loop)
        task = future.result(timeout=5)
        assert task is not None
        return MessageToDict(task)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        time.sleep(0.2)


@pytest.fixture
def counterparty() -> Iterator[PlainCounterparty]:
    with PlainCounterparty() as server:
        yield server


@pytest.mark.django_db(transaction=True)
def test_our_client_negotiates_with_a_plain_sdk_counterparty(
    live_stack: LiveStack,
    counterparty: PlainCounterparty,
    agent: Agent,
    intent: Intent,
    principal: AbstractUser,
) -> None:
    run = runs.run_start(
        agent=agent, intent=intent, task=f"Find me a fractional CFO. Talk to {counterparty.url}"
    )
    question = wait_until(
        lambda: Question.across_tenants.filter(run=run).first(), timeout=60, what="the question"
    )
    questions.question_answer(question=question, answer="Up to €1,100 a day.", user=principal)
    wait_until(
        lambda: Run.across_tenants.get(pk=run.pk).status == Run.Status.DONE,
        timeout=60,
        what="the run to finish",
    )

    negotiation = Negotiation.across_tenants.get(agent=agent)
    settlement = Settlement.across_tenants.get(negotiation=negotiation)
    turns = list(negotiation.turns.order_by("seq"))
    assert negotiation.counterparty_name == "Plain Seller"
    assert negotiation.status == Negotiation.Status.SETTLED
    assert negotiation.task_state == "completed"
    assert [t.side for t in turns] == [Turn.Side.OURS, Turn.Side.THEIRS] * (len(turns) // 2)
    assert [t.action for t in turns[-2:]] == ["counter", "accept"]
    closing, offer = turns[-1], turns[-2]
    assert closing.accepts_offer_id == offer.offer_id
    assert offer.terms is not None
    assert FLOOR <= offer.terms["amount"] <= 1100
    assert (settlement.outcome, settlement.basis, settlement.terms) == ("agreed", "reference", offer.terms)
    assert settlement.ended_by == Turn.Side.THEIRS

    # The counterparty's own record yields the same verdict by the same function.
    theirs = task_record_from_json(with_reply_in_history(counterparty.stored_task(negotiation.task_id)))
    verdict = settle(theirs, our_role="agent", terminal_actions=terminal_actions(agent))
    assert verdict is not None
    assert (verdict.outcome, verdict.basis, verdict.terms) == (
        settlement.outcome,
        settlement.basis,
        settlement.terms,
    )
    assert len(theirs.history) == len(turns)
