"""The sweep of lost Agent Exchange sends: a request still queued past the bound is sent again.

Runs on Postgres and on the embedded default's SQLite.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.models import Agent
from exchange import outbound
from exchange.models import OutboundExchange

BOUND = timedelta(minutes=15)


def exchange(agent: Agent, name: str, *, age: timedelta, **fields: Any) -> OutboundExchange:
    row = OutboundExchange.objects.create(
        tenant=agent.tenant,
        agent=agent,
        url="https://peer.example/a2a/globex/helpdesk",
        exchange_id=name,
        reference="sha256:" + "A" * 43,
        **fields,
    )
    OutboundExchange.across_tenants.filter(pk=row.pk).update(updated_at=timezone.now() - age)
    return row


@pytest.mark.django_db
def test_a_queued_exchange_past_the_bound_is_sent_again_once_per_bound(agent: Agent, settings: Any) -> None:
    """Queued past the bound: its send never ran. Queued within it (a send in flight), completed or
    failed: left. What is sent again is stamped, so the next sweep leaves it for another bound."""
    settings.SWEEP_STALLED_AFTER = BOUND.total_seconds()
    past = BOUND + timedelta(minutes=1)
    lost = exchange(agent, "lost", age=past)
    exchange(agent, "in-flight", age=BOUND - timedelta(minutes=1))
    exchange(agent, "completed", age=past, status=OutboundExchange.Status.COMPLETED)
    exchange(agent, "failed", age=past, status=OutboundExchange.Status.FAILED)

    assert outbound.stalled_sends_resend() == [(lost.pk, agent.tenant_id)]
    assert outbound.stalled_sends_resend() == []
