"""The sweep of lost pump messages: which outbound negotiations it pumps again, and which it leaves.

Runs on Postgres and on the embedded default's SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from agents.models import Agent, Intent, Run
from negotiations.models import Batch, Negotiation
from negotiations.services import outbound, sweeps
from parley import locks
from tests.conftest import database_url

BOUND = timedelta(minutes=15)


def negotiation(agent: Agent, *, run_status: str = Run.Status.WAITING, **fields: Any) -> Negotiation:
    """An outbound negotiation opened by a ``negotiate`` call of a run in ``run_status``, last written
    past the bound; ``fields`` override its own."""
    intent = Intent.objects.create(tenant=agent.tenant, agent=agent, statement="Hire a CFO.")
    run = Run.objects.create(tenant=agent.tenant, agent=agent, intent=intent, status=run_status)
    batch = Batch.objects.create(tenant=agent.tenant, run=run, tool_call_id="c1")
    fields = {"direction": Negotiation.Direction.OUTBOUND, **fields}
    row = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        counterparty_url="https://seller.example/a2a",
        batch=batch,
        **fields,
    )
    Negotiation.across_tenants.filter(pk=row.pk).update(
        updated_at=timezone.now() - BOUND - timedelta(minutes=1)
    )
    return row


@pytest.mark.django_db
def test_the_sweep_pumps_a_negotiation_with_nothing_reported_past_the_bound_and_leaves_every_other(
    agent: Agent,
) -> None:
    """Nothing reported, its run waiting on it, untouched past the bound: its pump's message was
    lost — while it was open, or after it stopped (settled, waiting on the party, out of turns,
    failed) and before its pump reported that. Within the bound (a turn in flight), already
    reported, inbound, or serving a run that stopped: left."""
    lost = [negotiation(agent)]
    in_flight = negotiation(agent)
    Negotiation.across_tenants.filter(pk=in_flight.pk).update(updated_at=timezone.now())
    for status in (
        Negotiation.Status.WAITING,
        Negotiation.Status.SETTLED,
        Negotiation.Status.FAILED,
        Negotiation.Status.OUT_OF_TURNS,
    ):
        lost.append(negotiation(agent, status=status))
        negotiation(agent, status=status, event={"kind": "reported"})
    negotiation(agent, event={"kind": "settled"})
    negotiation(agent, direction=Negotiation.Direction.INBOUND, task_id="t-1")
    negotiation(agent, run_status=Run.Status.CANCELLED)

    found = sweeps.stalled_pumps(before=timezone.now() - BOUND)
    assert sorted(found) == sorted((str(n.pk), agent.tenant_id) for n in lost)


@pytest.mark.django_db
def test_a_pumped_negotiation_is_stamped_so_the_next_sweep_waits_a_bound(agent: Agent, settings: Any) -> None:
    settings.SWEEP_STALLED_AFTER = BOUND.total_seconds()
    lost = negotiation(agent)

    assert sweeps.stalled_pumps_resend() == [(str(lost.pk), agent.tenant_id)]
    assert sweeps.stalled_pumps_resend() == []


@contextmanager
def pumped_elsewhere(negotiation: Negotiation) -> Iterator[None]:
    """The negotiation's pump running in another worker: its lock held by another session (Postgres),
    or by this process (the embedded default's SQLite)."""
    name = f"negotiation-pump:{negotiation.pk}"
    if connection.vendor == "postgresql":
        key = locks.advisory_key(name)
        with psycopg.connect(database_url(), autocommit=True) as other:
            row = other.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
            assert row == (True,)
            yield
            # Released here, not by closing: the server frees a closed session's locks only once
            # its backend has gone, which the next pump may still beat.
            other.execute("SELECT pg_advisory_unlock(%s)", [key])
    else:
        with locks.alone(name) as mine:
            assert mine
            yield


@pytest.mark.django_db
def test_a_second_pump_of_a_negotiation_being_pumped_does_nothing(agent: Agent) -> None:
    """While a pump runs, a copy of its message (sent again by the sweep while the first waited in a
    busy queue) does nothing; once it ended, a pump runs to an event and reports it."""
    lost = negotiation(agent)

    with pumped_elsewhere(lost):
        outbound.negotiation_pump_alone(negotiation_id=lost.pk, tenant_id=agent.tenant_id)
        lost.refresh_from_db()
        assert (lost.status, lost.turns.count(), lost.error) == (Negotiation.Status.OPEN, 0, "")

    outbound.negotiation_pump_alone(negotiation_id=lost.pk, tenant_id=agent.tenant_id)
    lost.refresh_from_db()
    assert lost.status != Negotiation.Status.OPEN
    assert lost.event is not None
