"""What every page's navigation asks of the agent pages."""

from __future__ import annotations

from django import template

from agents import selectors
from parley.models import Membership

register = template.Library()


@register.simple_tag
def can_start_work(membership: Membership | None) -> bool:
    """Whether the member may start a run of at least one agent (the "Start work" link); False
    without a membership (a page outside any tenant)."""
    return isinstance(membership, Membership) and selectors.startable_agents(membership=membership).exists()
