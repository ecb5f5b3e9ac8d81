"""The agent loop's negotiation tools, registered when the app is ready (docs/design.md#layers)."""

from __future__ import annotations

from typing import Any

from agents import tools
from agents.llm import ToolSpec
from negotiations import selectors
from negotiations.models import Negotiation
from negotiations.services import batches

URL_LIMIT: int = Negotiation._meta.get_field("counterparty_url").max_length or 500


def _negotiate(context: tools.ToolContext, arguments: dict[str, Any]) -> tools.Outcome:
    targets = arguments.get("targets")
    if not isinstance(targets, list) or not targets:
        raise tools.ToolError("negotiate needs 'targets': a non-empty list of {url, objective}.")
    for i, target in enumerate(targets):
        if not isinstance(target, dict) or not isinstance(target.get("url"), str):
            raise tools.ToolError(f"targets[{i}] needs a string 'url'.")
        if len(target["url"]) > URL_LIMIT:
            raise tools.ToolError(f"targets[{i}].url is longer than {URL_LIMIT} characters.")
        if not target["url"].startswith(("http://", "https://")):
            raise tools.ToolError(f"targets[{i}].url must be an http(s) URL, got {target['url']!r}.")
        if not isinstance(target.get("objective", ""), str):
            raise tools.ToolError(f"targets[{i}].objective must be a string.")
    return batches.batch_open(run=context.run, tool_call_id=context.tool_call_id, targets=targets)


def _answer(context: tools.ToolContext, arguments: dict[str, Any]) -> tools.Outcome:
    ids, guidance = arguments.get("ids"), arguments.get("guidance")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise tools.ToolError("answer needs 'ids': a non-empty list of negotiation ids.")
    if not isinstance(guidance, str) or not guidance.strip():
        raise tools.ToolError("answer needs 'guidance': the party's answer, as text.")
    return batches.batch_answer(
        run=context.run, tool_call_id=context.tool_call_id, ids=ids, guidance=guidance
    )


def register() -> None:
    """Offer ``negotiate`` and ``answer`` to the loop, add the negotiation record to its system
    message, and stop a cancelled run's negotiations."""
    tools.register(
        tools.Tool(
            spec=ToolSpec(
                name="negotiate",
                description=(
                    "Negotiate with other agents over A2A, all at once. Each target is the URL of an "
                    "agent and what you want from it. Returns one digest when every negotiation has "
                    "settled, needs your party, or ran out of turns."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "targets": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "url": {"type": "string"},
                                    "objective": {"type": "string"},
                                },
                                "required": ["url"],
                            },
                        }
                    },
                    "required": ["targets"],
                },
            ),
            handler=_negotiate,
        )
    )
    tools.register(
        tools.Tool(
            spec=ToolSpec(
                name="answer",
                description=(
                    "Give your party's answer to negotiations waiting on it, or settled as unanswered, "
                    "as standing guidance. Pass every id the answer applies to."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "ids": {"type": "array", "items": {"type": "string"}},
                        "guidance": {"type": "string"},
                    },
                    "required": ["ids", "guidance"],
                },
            ),
            handler=_answer,
        )
    )
    tools.register_record_provider(selectors.record_block)
    tools.register_cancel_hook(batches.run_cancelled)
