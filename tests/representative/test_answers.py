"""The representative face: visitors' questions answered from the agent's own grounding documents only."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text
from a2a.types import Role, SendMessageRequest, StreamResponse, TaskState
from django.contrib.auth.models import AbstractUser

from a2a_gateway.models import A2ATask
from agents.llm import Usage
from agents.models import Agent
from negotiations.models import Negotiation
from representative.answers import Exchange, system_message, visitor_answer
from representative.models import GroundingDocument, IntakeRequest
from representative.retrieval import PASSAGE_CHARS, retrieve
from tests.a2a_gateway.conftest import Endpoint, endpoint_of, proposal, run, user_message
from tests.a2a_gateway.servers import InProcessGateway
from tests.chat_server import ChatServer, hang, status, text
from tests.conftest import LiveStack, wait_until
from tests.representative.studio import HOURS, LANGUAGES, PRICES, answer_of, question, quoted, reply_of

# --- Offline: retrieval --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("asked", "title", "passage"),
    [
        ("When are you open?", "Opening hours", HOURS),
        ("How much does a logo cost?", "Services and prices", PRICES),
        ("Do you speak Portuguese?", "Services and prices", LANGUAGES),
    ],
)
def test_offline_quotes_the_best_passage_with_its_title(
    vera: Agent, asked: str, title: str, passage: str
) -> None:
    reply = visitor_answer(agent=vera, text=asked, caller="c")

    assert reply.text == quoted(title, passage)
    assert reply.intake_request_id is None
    assert reply.usage == Usage(model="offline")


@pytest.mark.django_db
def test_offline_says_plainly_what_the_documents_do_not_cover(vera: Agent) -> None:
    reply = visitor_answer(agent=vera, text="Who won the football match?", caller="c")

    assert reply.text == (
        "Vera Studio's documents do not cover that, so I cannot answer it. To leave a request for "
        'Vera Studio\'s team, start your message with "Request:".'
    )


@pytest.mark.django_db
def test_offline_without_intake_owner_does_not_offer_requests(vera: Agent) -> None:
    vera.intake_owner = None
    vera.save()

    reply = visitor_answer(agent=vera, text="Who won the football match?", caller="c")

    assert reply.text == "Vera Studio's documents do not cover that, so I cannot answer it."


@pytest.mark.django_db
def test_another_agents_grounding_is_never_retrieved(vera: Agent, agent: Agent, seller: Agent) -> None:
    GroundingDocument.objects.create(
        tenant=agent.tenant, agent=agent, title="Football", text="Tomas coaches a football club."
    )
    GroundingDocument.objects.create(
        tenant=seller.tenant, agent=seller, title="Football", text="Idris plays football on Sundays."
    )

    assert retrieve(agent=vera, question="football club") == []
    assert [p.title for p in retrieve(agent=agent, question="football club")] == ["Football"]


@pytest.mark.django_db
def test_retrieval_needs_a_third_of_the_question(vera: Agent) -> None:
    # "studio" alone is one word of four: too little to say the passage answers the question.
    assert retrieve(agent=vera, question="studio revenue profit margin") == []
    found = retrieve(agent=vera, question="studio holidays closed")
    assert [(p.title, p.text) for p in found] == [("Opening hours", HOURS)]


@pytest.mark.django_db
def test_long_paragraphs_are_quoted_in_pieces(vera: Agent) -> None:
    sentences = [f"Sentence {n} is about nothing in particular at all." for n in range(40)]
    GroundingDocument.objects.create(
        tenant=vera.tenant, agent=vera, title="Long", text=" ".join([*sentences, "Parking is free."])
    )

    [found] = retrieve(agent=vera, question="Is parking free?")

    assert found.title == "Long"
    assert found.text.endswith("Parking is free.")
    assert len(found.text) <= PASSAGE_CHARS


# --- Chat model -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_chat_model_gets_only_instructions_and_grounding_and_usage_comes_back(
    chat_vera: Agent, chat: ChatServer
) -> None:
    chat.script(text("We open at nine.", input_tokens=1000, output_tokens=500))

    reply = visitor_answer(agent=chat_vera, text="When do you open?", caller="c")

    assert reply.text == "We open at nine."
    assert reply.usage == Usage(
        model="house-model", input_tokens=1000, output_tokens=500, cost=Decimal("0.006")
    )
    [request] = chat.requests
    system = system_message(chat_vera)
    assert request.body["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": "When do you open?"},
    ]
    assert [t["function"]["name"] for t in request.body["tools"]] == ["leave_request"]
    assert HOURS in system
    assert PRICES in system
    assert "Private" not in system


@pytest.mark.django_db
def test_chat_model_sees_the_earlier_exchanges(chat_vera: Agent, chat: ChatServer) -> None:
    history = [Exchange(question="Hi?", answer="Hello.")]

    visitor_answer(agent=chat_vera, text="And prices?", caller="c", history=history)

    assert chat.requests[0].body["messages"][1:] == [
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "And prices?"},
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("failure", [status(400), text("   ")], ids=["model-error", "empty-answer"])
def test_chat_model_without_an_answer_falls_back_on_the_offline_answer(
    chat_vera: Agent, chat: ChatServer, failure: Any
) -> None:
    chat.script(failure)

    reply = visitor_answer(agent=chat_vera, text="When are you open?", caller="c")

    assert reply.text == quoted("Opening hours", HOURS)


# --- Over A2A -------------------------------------------------------------------------------------


@pytest.fixture
def vera_endpoint(live_stack: LiveStack, vera: Agent) -> Endpoint:
    return endpoint_of(live_stack, vera)


@pytest.mark.django_db(transaction=True)
def test_a_question_over_a2a_gets_the_quoted_passage(vera_endpoint: Endpoint) -> None:
    task = vera_endpoint.send(question("When are you open?"))

    assert answer_of(task) == quoted("Opening hours", HOURS)
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    assert Negotiation.across_tenants.count() == 0
    assert IntakeRequest.across_tenants.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_question_over_the_0_3_wire(vera_endpoint: Endpoint) -> None:
    message = {
        "messageId": "m-1",
        "role": "user",
        "parts": [{"kind": "text", "text": "Do you speak Portuguese?"}],
    }

    response = vera_endpoint.rpc("message/send", {"message": message}, version=None)

    assert response.status_code == 200, response.text
    task = response.json()["result"]
    assert (task["kind"], task["status"]["state"]) == ("task", "completed")
    last = task["history"][-1]
    assert last["role"] == "agent"
    expected = quoted("Services and prices", LANGUAGES)
    assert [p["text"] for p in last["parts"]] == [expected]
    assert [p["text"] for p in task["artifacts"][0]["parts"]] == [expected]


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_question_in_the_context_sees_the_first(
    live_stack: LiveStack, chat_vera: Agent, chat: ChatServer
) -> None:
    endpoint = endpoint_of(live_stack, chat_vera)
    chat.script(text("Monday to Friday."), text("From nine."))
    context_id = str(uuid.uuid4())

    first = endpoint.send(question("Which days are you open?", context_id=context_id))
    second = endpoint.send(question("From when?", context_id=context_id))

    assert (answer_of(first), answer_of(second)) == ("Monday to Friday.", "From nine.")
    assert second.id != first.id
    assert chat.requests[1].body["messages"][1:] == [
        {"role": "user", "content": "Which days are you open?"},
        {"role": "assistant", "content": "Monday to Friday."},
        {"role": "user", "content": "From when?"},
    ]


@pytest.fixture
def negotiating_vera_endpoint(vera_endpoint: Endpoint, principal: AbstractUser) -> Endpoint:
    """Vera's endpoint, with Tomas as the party its negotiator asks for the limit it does not know."""
    vera_endpoint.agent.principal = principal
    vera_endpoint.agent.save(update_fields=["principal"])
    return vera_endpoint


@pytest.mark.django_db(transaction=True)
def test_a_negotiation_move_still_negotiates_where_the_face_is_on(
    negotiating_vera_endpoint: Endpoint,
) -> None:
    vera_endpoint = negotiating_vera_endpoint
    task = vera_endpoint.send(user_message(proposal(800)))

    assert task.status.state in {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_COMPLETED}
    assert Negotiation.across_tenants.filter(agent=vera_endpoint.agent, task_id=task.id).count() == 1
    assert IntakeRequest.across_tenants.count() == 0


@pytest.mark.django_db(transaction=True)
def test_text_on_a_negotiation_task_is_still_a_malformed_move(negotiating_vera_endpoint: Endpoint) -> None:
    vera_endpoint = negotiating_vera_endpoint
    task = vera_endpoint.send(user_message(proposal(800)))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    message = {
        "messageId": "m-2",
        "role": "ROLE_USER",
        "taskId": task.id,
        "contextId": task.context_id,
        "parts": [{"text": "When are you open?"}],
    }

    response = vera_endpoint.rpc("SendMessage", {"message": message})

    error = response.json()["error"]
    assert error["code"] == -32602
    assert error["message"] == (
        "Invalid negotiation move: the message has no data part carrying a move {action, message, …}"
    )


@pytest.mark.django_db(transaction=True)
def test_a_slow_model_gets_the_try_again_text_in_time(
    live_stack: LiveStack, chat_vera: Agent, chat: ChatServer
) -> None:
    chat_vera.turn_timeout = 1
    chat_vera.try_again_text = "Busy right now; ask again in a minute."
    chat_vera.save()
    chat.script(hang(10))

    task = endpoint_of(live_stack, chat_vera).send(question("When are you open?"))

    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert reply_of(task) == "Busy right now; ask again in a minute."


@pytest.mark.django_db(transaction=True)
def test_each_question_gives_its_concurrency_slot_back(vera_endpoint: Endpoint) -> None:
    Agent.across_tenants.filter(pk=vera_endpoint.agent.pk).update(max_concurrency=1)

    answers = [answer_of(vera_endpoint.send(question("When are you open?"))) for _ in range(3)]

    assert answers == [quoted("Opening hours", HOURS)] * 3


@pytest.mark.django_db(transaction=True)
def test_a_question_streams_its_answer(vera_endpoint: Endpoint) -> None:
    card = vera_endpoint.card()

    async def call(http: httpx.AsyncClient) -> list[StreamResponse]:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        request = SendMessageRequest(message=question("When are you open?"))
        return [event async for event in client.send_message(request)]

    events = run(call)

    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert get_artifact_text(artifact) == quoted("Opening hours", HOURS)


def test_a_cancel_mid_answer_leaves_the_task_canceled_without_the_answer(
    transactional_db: None, chat_vera: Agent, chat: ChatServer, settings: Any
) -> None:
    chat.script(hang(3, text("We open at nine.")))
    asked = question("When do you open?")
    with InProcessGateway() as gateway, ThreadPoolExecutor(1) as pool:
        settings.PUBLIC_BASE_URL = gateway.origin
        endpoint = Endpoint(agent=chat_vera, url=f"{gateway.origin}/a2a/acme/vera")
        sent = pool.submit(endpoint.send, asked)
        wait_until(lambda: chat.requests, what="the model to be asked")
        task_id = A2ATask.across_tenants.get().task_id

        canceled = endpoint.rpc("CancelTask", {"id": task_id}).json()["result"]

        answered = sent.result()

    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert answered.status.state == TaskState.TASK_STATE_CANCELED
    stored = A2ATask.across_tenants.get()
    assert stored.state == "TASK_STATE_CANCELED"
    assert [m["role"] for m in stored.data["history"]] == ["ROLE_USER"]
    assert "artifacts" not in stored.data
