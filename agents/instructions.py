"""The system message a run gets, built fresh at every step (docs/design.md#the-agent-loop)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.utils import timezone

from agents import tools
from agents.models import Agent, Intent

# What a preview of the system message calls an intent when the agent has none and nothing was typed.
PLACEHOLDER_INTENT = "(the intent of the run goes here)"


def system_message(*, agent: Agent, intent: Intent, now: datetime | None = None) -> str:
    """The operator's prompt, who the agent is, today's date, the intent and the record blocks.

    ``now`` defaults to the current time; the date is given in the agent's
    timezone. Parts are joined by blank lines, as the seed agent does
    (docs/design.md#the-agent-loop).
    """
    today = (now or timezone.now()).astimezone(ZoneInfo(agent.timezone))
    parts = [
        agent.system_prompt.strip(),
        f"You are {agent.name}, acting on behalf of {agent.party_id or agent.name}.",
        f"Today is {today:%A, %-d %B %Y} ({agent.timezone}). Record dates as absolute dates.",
        "Call only the tools you are offered.",
        f"Current intent: {intent.statement}\nEverything you do in this session serves that intent.",
        *tools.record_blocks(agent, intent),
    ]
    return "\n\n".join(p for p in parts if p)
