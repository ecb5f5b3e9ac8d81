"""Tools of the agent loop: the built-in registry other apps fill, and what a run offers.

A tool's handler gets the call's context and its parsed arguments and returns
one of three outcomes:

* :class:`Result` — the text the model sees as the tool call's result;
* :class:`Suspend` — a question for the party; the run stops ``needs_input``;
* :class:`Defer` — the result arrives later through
  :func:`agents.services.tool_calls.tool_call_complete`; the run stops ``waiting``.

What a run offers comes from :func:`tools_for`: the agent's own
:class:`agents.models.Tool` rows when it has any (built-in, host operation or
another agent), else the defaults (:data:`DEFAULT_TOOLS`).

``agents`` never imports ``negotiations``: that app registers ``negotiate``
and ``answer`` here when it is ready, and a record provider for the system
message (docs/design.md#layers). Nor does this module import the ones that call it: how
a host operation's row and another agent's row run is registered from
``AgentsConfig.ready`` (:func:`register_kind`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.llm import ToolSpec
from agents.models import Tool as ToolRow

if TYPE_CHECKING:
    from agents.models import Agent, Intent, Run


@dataclass(frozen=True)
class ToolContext:
    """Where a tool call happens: the run and the model's id for the call. A built-in tool runs
    inside the step's transaction; a host operation before it, in a thread of its own."""

    run: Run
    tool_call_id: str


@dataclass(frozen=True)
class Result:
    text: str


@dataclass(frozen=True)
class Suspend:
    """A question for the party; ``arguments`` are the call's, shown beside it."""

    question: str
    options: list[str] = field(default_factory=list)
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Defer:
    pass


Outcome = Result | Suspend | Defer
# What runs a call: the call's context and its parsed arguments in, the outcome out.
Handler = Callable[[ToolContext, dict[str, Any]], Outcome]


class ToolError(Exception):
    """A tool refused its input; the message becomes the call's result for the model."""


@dataclass(frozen=True)
class Tool:
    """A tool as a run offers it.

    ``requires_approval`` stops the run until the party approves the call;
    ``outside_transaction`` tools (host operations) are run before the step's
    transaction, concurrently with their siblings, because they only wait on
    the network and write nothing of ours.
    """

    spec: ToolSpec
    handler: Handler
    requires_approval: bool = False
    outside_transaction: bool = False


_tools: dict[str, Tool] = {}
_kinds: dict[str, Callable[[ToolRow], Handler]] = {}
_record_providers: list[Callable[[Agent, Intent], str]] = []
_cancel_hooks: list[Callable[[Run], None]] = []

DEFAULT_TOOLS = ("ask_user", "negotiate", "answer")


def register(tool: Tool) -> None:
    """Make ``tool`` available by its name (a later registration replaces an earlier one)."""
    _tools[tool.spec.name] = tool


def register_kind(kind: str, handler_for: Callable[[ToolRow], Handler]) -> None:
    """Run a :class:`agents.models.Tool` row of ``kind`` (host operation, agent) by the handler
    ``handler_for(row)`` returns: how the modules that run those rows, which call this one, give
    it their handlers from ``AgentsConfig.ready``."""
    _kinds[kind] = handler_for


def register_record_provider(provider: Callable[[Agent, Intent], str]) -> None:
    """Add a block to every system message, e.g. the record of negotiations."""
    if provider not in _record_providers:
        _record_providers.append(provider)


def register_cancel_hook(hook: Callable[[Run], None]) -> None:
    """Call ``hook(run)`` inside the transaction that cancels a run, e.g. to stop its negotiations."""
    if hook not in _cancel_hooks:
        _cancel_hooks.append(hook)


def cancel_hooks() -> list[Callable[[Run], None]]:
    return list(_cancel_hooks)


def builtin_names() -> list[str]:
    """Names of the built-in tools registered in this process, sorted."""
    return sorted(_tools)


def tools_for(agent: Agent) -> dict[str, Tool]:
    """The tools a run of ``agent`` offers the model, by name, in a stable order.

    The agent's own tools replace the defaults; a built-in row brings a default
    back. A built-in row whose name is not registered is left out
    (:func:`agents.configuration.full_clean` refuses to save one).
    """
    # Only the agent's tenant's tools, whatever a careless admin linked.
    rows = list(agent.tools.filter(tenant_id=agent.tenant_id).select_related("target_agent"))
    if not rows:
        return {name: _tools[name] for name in DEFAULT_TOOLS if name in _tools}
    offered: dict[str, Tool] = {}
    for row in rows:
        tool = offer(row)
        if tool is not None:
            offered[row.name] = tool
    return offered


def offer(row: ToolRow) -> Tool | None:
    """The runnable tool for one :class:`agents.models.Tool` row (None: an unregistered built-in).

    A built-in row keeps the built-in's description and parameters where its
    own are empty.
    """
    handler: Handler
    if row.kind == ToolRow.Kind.BUILTIN:
        builtin = _tools.get(row.name)
        if builtin is None:
            return None
        spec = ToolSpec(
            name=row.name,
            description=row.description or builtin.spec.description,
            parameters=row.parameters or builtin.spec.parameters,
        )
        handler = builtin.handler
    else:
        spec = ToolSpec(name=row.name, description=row.description, parameters=row.parameters)
        handler = _kinds[row.kind](row)
    if row.suspends:
        handler = _suspending_handler(row)
    return Tool(
        spec=spec,
        handler=handler,
        requires_approval=row.requires_approval,
        outside_transaction=row.kind == ToolRow.Kind.HOST and not row.suspends,
    )


def _suspending_handler(row: ToolRow) -> Handler:
    def call(context: ToolContext, arguments: dict[str, Any]) -> Outcome:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            question = row.description or f"{row.name} needs your input."
        return Suspend(question=question.strip(), arguments=arguments)

    return call


def record_blocks(agent: Agent, intent: Intent) -> list[str]:
    return [block for provider in _record_providers if (block := provider(agent, intent))]


def _ask_user(context: ToolContext, arguments: dict[str, Any]) -> Outcome:
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ToolError("ask_user needs a non-empty string 'question'.")
    options = arguments.get("options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ToolError("ask_user 'options', when given, must be a list of strings.")
    return Suspend(question=question.strip(), options=options, arguments=arguments)


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
