"""The model port of the agent loop: what a model is asked and what it answers.

A model gets chat-completions messages (``{"role", "content", "tool_calls"?,
"tool_call_id"?}``) and tool specs (``{"name", "description", "parameters"}``)
and answers with text, tool calls, or both. :func:`model_for` picks the
implementation an agent is configured with.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from parley import strict_json

if TYPE_CHECKING:
    from agents.models import Agent

ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model wrote it.

    ``arguments`` is the text the model wrote, JSON or not. A server that sent a JSON value where
    chat completions put a string gets ``arguments`` as that value's JSON text, so the stored call
    goes back to the model as valid chat completions, and ``raw_kind`` naming what was sent
    (``"object"``, ``"array"``, ``"number"``… see :func:`json_kind`); ``""`` for a string.
    """

    id: str
    name: str
    arguments: str
    raw_kind: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a JSON object: they must be a string holding one ("" stands for ``{}``).

        The one rule for every caller of a model, so that arguments breaking it become an error
        result the model can act on. Raises :class:`BadArguments` saying what they are instead: a
        bare JSON value sent in place of the string, text that is not JSON as
        :func:`parley.strict_json.loads` reads it, or JSON that is not an object.
        """
        if self.raw_kind:
            raise BadArguments(
                f"the arguments of {self.name} must be a string holding a JSON object, and the model "
                f"sent a bare JSON {self.raw_kind} instead"
            )
        try:
            value = strict_json.loads(self.arguments or "{}")
        except ValueError as exc:
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise BadArguments(f"the arguments of {self.name} are not valid JSON ({problem})") from exc
        if not isinstance(value, dict):
            raise BadArguments(
                f"the arguments of {self.name} must be a JSON object, not a JSON {json_kind(value)}"
            )
        return value


class BadArguments(ValueError):
    """A tool call's arguments are not a JSON object; the message names the tool and what they are."""


def json_kind(value: Any) -> str:
    """The JSON name of a decoded value's type: object, array, string, number, boolean or null."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


@dataclass(frozen=True)
class ModelReply:
    """A model's answer to one step: what it said, which model said it, usage in tokens and cost.

    ``cost`` is in the answering endpoint's currency (``Decimal(0)`` for ``offline``).
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    cost: Decimal = Decimal(0)


@dataclass(frozen=True)
class Usage:
    """Model work added up over calls: tokens, and ``cost`` in the answering endpoint's currency;
    ``model`` is the name of the model that answered last ("" before any, and for ``offline``,
    which costs nothing)."""

    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)

    def plus(self, reply: ModelReply) -> Usage:
        """This usage with ``reply``'s added."""
        return Usage(
            model=reply.model or self.model,
            input_tokens=self.input_tokens + reply.input_tokens,
            output_tokens=self.output_tokens + reply.output_tokens,
            cost=self.cost + reply.cost,
        )


@dataclass(frozen=True)
class Retry:
    """One failed try about to be retried: ``wait`` seconds before try ``attempt + 1``."""

    model: str
    attempt: int
    wait: float
    reason: str


@dataclass(frozen=True)
class CallOptions:
    """How one step calls the model.

    * ``on_delta`` gets each piece of text as it is generated (streaming). What a try
      streamed is void unless the call returns that try's reply: ``on_retry`` or
      ``on_fallback`` follows a failed try (the deltas then start over), or the call raises;
    * ``on_retry`` is told before every wait between tries, and ``on_fallback``
      when the next model of the list takes over (``(from_model, to_model, reason)``);
    * ``cancelled`` is polled while waiting and between streamed chunks; once it
      returns True the call stops with :class:`ModelCancelled`;
    * ``response_format`` is a JSON Schema the final answer must follow;
    * ``deadline`` (timezone-aware, absolute) is when the answer is due: no try runs past it and
      no wait between tries ends after it. ``None``: each try is bounded by its endpoint's timeout
      only. Raises ``ValueError`` for a naive ``deadline``.
    """

    on_delta: Callable[[str], None] | None = None
    on_retry: Callable[[Retry], None] | None = None
    on_fallback: Callable[[str, str, str], None] | None = None
    cancelled: Callable[[], bool] = lambda: False
    response_format: dict[str, Any] | None = None
    deadline: datetime | None = None

    def __post_init__(self) -> None:
        if self.deadline is not None and self.deadline.utcoffset() is None:
            raise ValueError("CallOptions.deadline must be timezone-aware")


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: ``parameters`` is JSON Schema, handed over verbatim."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


class ModelError(Exception):
    """The model could not answer; the run ends ``failed`` with this message."""


class ModelCancelled(ModelError):
    """The run was cancelled while its model call was in flight; nothing is retried."""


class ChatModel(Protocol):
    """What the loop needs from a model."""

    def complete(
        self, *, messages: list[ChatMessage], tools: list[ToolSpec], options: CallOptions | None = None
    ) -> ModelReply: ...


def model_for(agent: Agent) -> ChatModel:
    """The model client for ``agent.model``, falling back on ``agent.fallback_models`` in order.

    ``offline`` is the built-in model; any other name is the agent's tenant's
    :class:`~agents.models.ModelEndpoint` of that name (``offline`` may appear among the
    fallbacks too). Raises :class:`ModelError` naming a model the tenant has no endpoint for, or
    when the models are priced in more than one currency.
    """
    from agents.offline import OfflineModel

    if agent.model == "offline":
        return OfflineModel()
    from agents.chat_completions import ChatCompletionsModel, FallbackChain
    from agents.models import ModelEndpoint

    names = [agent.model, *agent.fallback_models]
    endpoints = {e.name: e for e in ModelEndpoint.objects.for_tenant(agent.tenant_id).filter(name__in=names)}
    chain: list[tuple[str, ChatModel]] = []
    for name in names:
        if name == "offline":
            chain.append((name, OfflineModel()))
        elif name in endpoints:
            chain.append((name, ChatCompletionsModel(endpoints[name])))
        else:
            raise ModelError(f"model {name!r} is not available; no model endpoint of that name is configured")
    currencies = sorted({e.currency for e in endpoints.values()})
    if len(currencies) > 1:
        # A run's cost and its cost budget add up the answering models' prices: one currency.
        raise ModelError(
            f"the models {', '.join(names)} are priced in {' and '.join(currencies)}; use one currency"
        )
    return FallbackChain(chain)
