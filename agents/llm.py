"""The model port of the agent loop: what a model is asked and what it answers.

A model gets chat-completions messages (``{"role", "content", "tool_calls"?,
"tool_call_id"?}``) and tool specs (``{"name", "description", "parameters"}``)
and answers with text, tool calls, or both. :func:`model_for` picks the
implementation an agent is configured with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agents.models import Agent

ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model wrote it; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class ModelReply:
    """A model's answer to one step, with its usage in tokens."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: ``parameters`` is JSON Schema, handed over verbatim."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


class ModelError(Exception):
    """The model could not answer; the run ends ``failed`` with this message."""


class ChatModel(Protocol):
    """What the loop needs from a model."""

    def complete(self, *, messages: list[ChatMessage], tools: list[ToolSpec]) -> ModelReply: ...


def model_for(agent: Agent) -> ChatModel:
    """The model client for ``agent.model``.

    Raises :class:`ModelError` for a model name this deployment cannot serve.
    """
    if agent.model == "offline":
        from agents.offline import OfflineModel

        return OfflineModel()
    raise ModelError(f"model {agent.model!r} is not available; this deployment serves 'offline'")
