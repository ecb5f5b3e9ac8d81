"""The studio whose agent, Vera, answers visitors: its documents, and reading its answers."""

from __future__ import annotations

from typing import Any

from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import Message, Role, TaskState

from a2a_gateway.executor import REPLY_ARTIFACT_ID

HOURS = "We are open Monday to Friday, 9:00 to 17:00. On public holidays the studio is closed."
PRICES = "A logo costs 1,200 EUR; a full brand identity costs 4,500 EUR."
LANGUAGES = "We work in English and Portuguese."


def quoted(title: str, passage: str) -> str:
    """The offline answer quoting one passage."""
    return f'Here is what Vera Studio\'s documents say:\n\nFrom "{title}":\n> {passage}'


def question(words: str, *, context_id: str | None = None) -> Message:
    """A visitor's 1.0 text message."""
    return new_text_message(words, role=Role.ROLE_USER, context_id=context_id)


def answer_of(task: Any) -> str:
    """The reply's text, checking the task is completed and the reply both its last history entry
    and its reply artifact."""
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    return reply_of(task)


def reply_of(task: Any) -> str:
    """The reply's text, checking it is both the last history entry and the reply artifact."""
    last = task.history[-1]
    assert last.role == Role.ROLE_AGENT
    assert [(a.artifact_id, a.name) for a in task.artifacts] == [(REPLY_ARTIFACT_ID, "reply")]
    assert get_artifact_text(task.artifacts[0]) == get_message_text(last)
    return get_message_text(last)
