"""Tools of the agent loop and the registry other apps fill.

A tool's handler gets the call's context and its parsed arguments and returns
one of three outcomes:

* :class:`Result` — the text the model sees as the tool call's result;
* :class:`Suspend` — a question for the party; the run stops ``needs_input``;
* :class:`Defer` — the result arrives later through
  :func:`agents.services.tool_call_complete`; the run stops ``waiting``.

``agents`` never imports ``negotiations``: that app registers ``negotiate``
and ``answer`` here when it is ready, and a record provider for the system
message (DESIGN.md §3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.llm import ToolSpec

if TYPE_CHECKING:
    from agents.models import Agent, Intent, Run


@dataclass(frozen=True)
class ToolContext:
    """Where a tool call happens: inside the run's step transaction."""

    run: Run
    tool_call_id: str


@dataclass(frozen=True)
class Result:
    text: str


@dataclass(frozen=True)
class Suspend:
    question: str
    options: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Defer:
    pass


Outcome = Result | Suspend | Defer


class ToolError(Exception):
    """A tool refused its input; the message becomes the call's result for the model."""


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    handler: Callable[[ToolContext, dict[str, Any]], Outcome]


_tools: dict[str, Tool] = {}
_record_providers: list[Callable[[Agent, Intent], str]] = []

DEFAULT_TOOLS = ("ask_user", "negotiate", "answer")


def register(tool: Tool) -> None:
    """Make ``tool`` available by its name (a later registration replaces an earlier one)."""
    _tools[tool.spec.name] = tool


def register_record_provider(provider: Callable[[Agent, Intent], str]) -> None:
    """Add a block to every system message, e.g. the record of negotiations."""
    if provider not in _record_providers:
        _record_providers.append(provider)


def tools_for(agent: Agent) -> dict[str, Tool]:
    """The tools a run of ``agent`` offers the model, by name, in a stable order."""
    return {name: _tools[name] for name in DEFAULT_TOOLS if name in _tools}


def record_blocks(agent: Agent, intent: Intent) -> list[str]:
    return [block for provider in _record_providers if (block := provider(agent, intent))]


def _ask_user(context: ToolContext, arguments: dict[str, Any]) -> Outcome:
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ToolError("ask_user needs a non-empty string 'question'.")
    options = arguments.get("options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ToolError("ask_user 'options', when given, must be a list of strings.")
    return Suspend(question=question.strip(), options=options)


register(
    Tool(
        spec=ToolSpec(
            name="ask_user",
            description=(
                "Ask the party you act for something only they can tell you: a limit, a date, a "
                "preference. The run stops until they answer; the answer is this call's result."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "options": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["question"],
            },
        ),
        handler=_ask_user,
    )
)
