"""Which face of an agent takes an inbound message: its negotiator's, or its representative's."""

from __future__ import annotations

import pytest
from a2a.helpers import new_data_part
from a2a.types import Message, Part, Role
from a2a.utils.errors import InvalidParamsError

from a2a_gateway.routing import takes
from agents.models import Agent
from negotiations.models import Negotiation
from tests.a2a_gateway.conftest import proposal, user_message


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("parts", "face_on", "taken"),
    [
        ([Part(text="When are you open?")], True, True),
        ([Part(text="When are you open?")], False, False),
        ([Part(text="   ")], True, False),
        ([Part(text="Hello"), new_data_part({"action": "propose"})], True, False),
    ],
    ids=["text", "face-off", "blank", "with-data"],
)
def test_a_first_message_without_a_move_is_the_representatives(
    vera: Agent, parts: list[Part], face_on: bool, taken: bool
) -> None:
    if not face_on:
        vera.grounding_documents.all().delete()
        vera.intake_owner = None
        vera.save()
    message = Message(message_id="m", role=Role.ROLE_USER, parts=parts)

    assert takes(agent=vera, message=message, task_id=None) is taken


@pytest.mark.django_db
def test_a_follow_up_keeps_its_tasks_face(vera: Agent) -> None:
    Negotiation.objects.create(
        tenant=vera.tenant, agent=vera, direction=Negotiation.Direction.INBOUND, task_id="t-neg"
    )
    words = Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="When are you open?")])
    move = user_message(proposal(800))

    assert takes(agent=vera, message=words, task_id="t-neg") is False
    assert takes(agent=vera, message=words, task_id="t-rep") is True
    with pytest.raises(
        InvalidParamsError, match="Task t-rep is a conversation with the agent's representative"
    ):
        takes(agent=vera, message=move, task_id="t-rep")
