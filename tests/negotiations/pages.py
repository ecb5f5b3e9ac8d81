"""What the dashboard tests of negotiations share: page addresses, negotiations built by the real
inbound service or written as rows, and the board's table read back as text."""

from __future__ import annotations

import uuid
from html.parser import HTMLParser
from typing import Any

from django.urls import reverse

from agents.models import Agent, Intent
from negotiations import selectors
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import recording
from negotiations.services.inbound import InboundReply, inbound_check, inbound_turn
from negotiations.wire import TaskRecord
from parley.models import Tenant

# The floor the inbound tests' agent sells above: the offline negotiator then counters, never asks.
FLOOR = [{"term": "amount", "op": ">=", "value": 950, "currency": "EUR"}]
# A buyer's ceiling, and settlements to record on a negotiation (Settlement fields), for scored pages.
CEILING = [{"term": "amount", "op": "<=", "value": 1100, "currency": "EUR"}]
AGREED_AT_1000: dict[str, Any] = {
    "outcome": Settlement.Outcome.AGREED,
    "basis": Settlement.Basis.TERMS,
    "terms": {"amount": 1000, "currency": "EUR"},
    "reason": "Closing move carries terms.",
    "ended_by": "ours",
}
DECLINED: dict[str, Any] = {
    "outcome": Settlement.Outcome.DECLINED,
    "basis": Settlement.Basis.STATE,
    "reason": "Task ended as rejected.",
    "ended_by": "theirs",
}


def board_url(tenant: Tenant | str) -> str:
    return reverse("negotiations:list", kwargs={"tenant": tenant if isinstance(tenant, str) else tenant.slug})


def detail_url(n: Negotiation, tenant: Tenant | None = None) -> str:
    return reverse("negotiations:detail", kwargs={"tenant": (tenant or n.tenant).slug, "pk": n.pk})


def inbound(agent: Agent, move: dict[str, Any], task_id: str = "task-1") -> InboundReply:
    """Deliver the counterparty's ``move`` on ``task_id`` to ``agent`` as the gateway does, and answer it
    with the agent's (offline) negotiator: two turns written, a settlement if a side closed."""
    negotiation = Negotiation.across_tenants.filter(agent=agent, task_id=task_id).first()
    prior = selectors.turns_record(negotiation) if negotiation else TaskRecord(state="submitted", history=())
    incoming = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": move}]}
    inbound_check(agent=agent, task_id=task_id if negotiation else "", incoming=incoming)
    return inbound_turn(
        agent=agent, task_id=task_id, context_id=f"ctx-{task_id}", prior=prior, incoming=incoming
    )


def inbound_deal(
    agent: Agent, task_id: str = "task-1", opening: str = "Would €800 a day work?"
) -> Negotiation:
    """An inbound negotiation of ``agent`` (which must hold :data:`FLOOR`) that ends agreed by reference:
    they offer 800, the agent counters, they accept the counter and the agent confirms. Four turns."""
    reply = inbound(
        agent,
        {
            "action": "propose",
            "message": opening,
            "terms": {"amount": 800, "currency": "EUR"},
            "offerId": "o-1",
        },
        task_id,
    )
    counter = reply.message["parts"][0]["data"]
    inbound(
        agent,
        {
            "action": "accept",
            "message": "Deal.",
            "terms": counter["terms"],
            "offerId": "o-2",
            "acceptsOfferId": counter["offerId"],
        },
        task_id,
    )
    return Negotiation.across_tenants.get(agent=agent, task_id=task_id)


def outbound(
    agent: Agent,
    name: str,
    *,
    intent: Intent | None = None,
    status: str = Negotiation.Status.OPEN,
    turns: int = 2,
    settlement: dict[str, Any] | None = None,
) -> Negotiation:
    """An outbound negotiation of ``agent`` with ``name`` written as rows: ``turns`` alternating moves
    (ours first, ``propose`` then ``counter``…), and a settlement with the fields in ``settlement``.

    Counted and scored as the recording services do: ``turns_recorded`` set, the deal's score stored
    (:func:`negotiations.services.recording.score_save`)."""
    n = Negotiation.objects.create(
        tenant=agent.tenant,
        agent=agent,
        intent=intent,
        direction=Negotiation.Direction.OUTBOUND,
        counterparty_url=f"https://example.org/a2a/{name.split()[0].lower()}",
        counterparty_name=name,
        task_id=f"task-{uuid.uuid4()}",
        status=status,
        turn_count=(turns + 1) // 2,
        turns_recorded=turns,
    )
    for seq in range(1, turns + 1):
        Turn.objects.create(
            tenant=agent.tenant,
            negotiation=n,
            seq=seq,
            side=Turn.Side.OURS if seq % 2 else Turn.Side.THEIRS,
            action="propose" if seq == 1 else "counter",
            message=f"Move {seq}.",
            terms={"amount": 900 + seq, "currency": "EUR"},
            offer_id=f"offer-{seq}",
        )
    if settlement is not None:
        Settlement.objects.create(tenant=agent.tenant, negotiation=n, **settlement)
        recording.score_save(
            Negotiation.objects.for_tenant(agent.tenant)
            .select_related("agent", "intent", "settlement")
            .get(pk=n.pk)
        )
        n.refresh_from_db()
    return n


class _Table(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag in ("th", "td"):
            self._cell = []
        elif self._cell is not None and tag == "br":
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False
        elif self._cell is not None and tag in ("th", "td"):
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def board_rows(html: str) -> list[list[str]]:
    """The text of each cell of each row of the board's table, as a screen reader reads it."""
    table = _Table()
    table.feed(html)
    return table.rows
