"""Which face of an agent takes an inbound A2A message: its negotiator, or its representative.

Protocol-edge logic: the choice reads the message's parts (a negotiation move
is a data part) and which stored task it continues, and answers a data part
sent on a representative's task with a JSON-RPC error. Whether the agent has a
representative face at all is the face's own rule
(:func:`representative.selectors.face_on`).
"""

from __future__ import annotations

from a2a.helpers import get_message_text
from a2a.types import Message
from a2a.utils.errors import InvalidParamsError

from agents.models import Agent
from negotiations.models import Negotiation
from representative.selectors import face_on


def takes(*, agent: Agent, message: Message, task_id: str | None) -> bool:
    """Whether ``message`` (to the stored task ``task_id``, None if new) is for the representative face.

    * A follow-up keeps its task's face: the negotiator's if an inbound
      negotiation of ``agent`` has that task id, the representative's otherwise.
    * A first message is the representative's when it carries no data part (a
      negotiation move is always a data part, ``negotiations.wire``), has some
      text, and the face is on for ``agent``: it has a grounding document or an
      intake owner. Otherwise it stays the negotiator's, which refuses it as
      before ("Invalid negotiation move: …").

    Raises:
        InvalidParamsError: (-32602) a data part sent on a representative's task: "Task <id> is a
            conversation with the agent's representative; send negotiation moves in a new task."
    """
    has_data = any(part.HasField("data") for part in message.parts)
    if task_id:
        if (
            Negotiation.objects.for_tenant(agent.tenant_id)
            .filter(agent=agent, direction=Negotiation.Direction.INBOUND, task_id=task_id)
            .exists()
        ):
            return False
        if has_data:
            raise InvalidParamsError(
                message=f"Task {task_id} is a conversation with the agent's representative; "
                "send negotiation moves in a new task."
            )
        return True
    if has_data or not get_message_text(message).strip():
        return False
    return face_on(agent)
