"""Agents calling agents: a delegate run started for a tool call of its caller
(:func:`run_delegate`), and its result given back when it ends (:func:`delegate_return`).
"""

from __future__ import annotations

import json
from typing import Any

from agents import tools
from agents.models import MAX_DELEGATION_DEPTH, Run
from agents.models import Tool as ToolRow
from agents.services import runs, tool_calls


def run_delegate(
    *, parent: Run, tool_call_id: str, tool: ToolRow, arguments: dict[str, Any]
) -> tools.Outcome:
    """Run ``tool.target_agent``'s loop on ``arguments`` as a child of ``parent``: the agent-as-tool.

    The task is ``arguments["task"]`` when it is a string, else the arguments
    as JSON; the child gets an intent of its own. The child's final text
    becomes the tool call's result when it ends (see :func:`runs.ended`), and
    cancelling the parent cancels the child. Returns :class:`tools.Defer`.
    Raises :class:`tools.ToolError` for a target of another tenant, an agent
    already in the chain of callers, or a chain deeper than
    :data:`MAX_DELEGATION_DEPTH`.
    """
    target = tool.target_agent
    if target is None or target.tenant_id != parent.tenant_id:
        raise tools.ToolError(f"{tool.name} has no agent of this tenant to run.")
    chain = [parent]
    while chain[-1].parent_id is not None:
        chain.append(Run.objects.for_tenant(parent.tenant_id).get(pk=chain[-1].parent_id))
    if any(run.agent_id == target.pk for run in chain):
        raise tools.ToolError(f"{tool.name} would run {target.name}, which is already working on this call.")
    if len(chain) > MAX_DELEGATION_DEPTH:
        raise tools.ToolError(
            f"{tool.name} refused: agents may call agents at most {MAX_DELEGATION_DEPTH} deep."
        )
    task = arguments["task"] if isinstance(arguments.get("task"), str) else json.dumps(arguments)
    if not task.strip():
        raise tools.ToolError(f"{tool.name} needs a non-empty 'task'.")
    intent = runs.intent_create(agent=target, statement=f"Asked by {parent.agent.name}: {task}")
    runs.create_run(
        agent=target,
        intent=intent,
        task=task,
        status=Run.Status.QUEUED,
        parent=parent,
        parent_tool_call_id=tool_call_id,
    )
    return tools.Defer()


def delegate_handler(row: ToolRow) -> tools.Handler:
    """How a run calls the agent of the tool ``row``: :func:`run_delegate` (registered for the
    ``agent`` kind, :func:`agents.tools.register_kind`)."""

    def call(context: tools.ToolContext, arguments: dict[str, Any]) -> tools.Outcome:
        return run_delegate(
            parent=context.run, tool_call_id=context.tool_call_id, tool=row, arguments=arguments
        )

    return call


def delegate_return(*, run_id: Any, tenant_id: int) -> None:
    """Give an ended delegate run's result to the run that called it as a tool.

    Its own transaction, after the delegate's end commits: locks are taken
    caller first everywhere else, so the delegate's end must not take its
    caller's. The result is the delegate's output when it ended ``done``, else
    what ended it. A caller that stopped, or has the result, drops it.
    """
    run = Run.objects.for_tenant(tenant_id).select_related("agent").filter(pk=run_id).first()
    if run is None or run.parent_id is None or run.status not in Run.ENDED:
        return
    if run.status == Run.Status.DONE:
        result = run.output
    else:
        result = f"{run.agent.name} ended {run.status}: {run.end_reason}"
    parent = Run.objects.for_tenant(tenant_id).get(pk=run.parent_id)
    tool_calls.tool_call_complete(run=parent, tool_call_id=run.parent_tool_call_id, result=result)
