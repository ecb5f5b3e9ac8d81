"""The demo scenario "Bring in a fractional CFO" (end-to-end issue, item 8).

Tenant ``acme`` hosts Tomas, a founder, and his agent; tenant ``cfo-guild``
hosts three fractional-CFO agents with different hidden day-rate floors. One
of them speaks prose only (its operator turned structured terms off), so the
three settlements differ: agreed on terms, declined, and unconfirmed.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from agents.models import Agent, Intent
from negotiations.models import Negotiation, Settlement
from parley.models import Membership, Tenant

TOMAS_PASSWORD = "tomas-demo"
INTENT = "Bring in a fractional CFO for two days a month before the round closes."
TERMS = "amount (number, EUR per day), currency"

CFOS = [
    # slug, name, floor (EUR/day), structured terms
    ("idris", "Idris Haddad", 950, True),
    ("noor", "Noor Lindqvist", 1400, True),
    ("priya", "Priya Raman", 1000, False),
]


@dataclass(frozen=True)
class DemoWorld:
    tomas_agent: Agent
    intent: Intent
    cfo_agents: list[Agent]


@transaction.atomic
def demo_seed() -> DemoWorld:
    """Create (or re-create) both demo tenants, their users and agents."""
    Tenant.objects.filter(slug__in=["acme", "cfo-guild"]).delete()
    user_model = get_user_model()
    tomas, _ = user_model.objects.get_or_create(username="tomas", defaults={"first_name": "Tomas"})
    tomas.set_password(TOMAS_PASSWORD)
    tomas.save()
    acme = Tenant.objects.create(slug="acme", name="Acme Robotics")
    Membership.objects.create(user=tomas, tenant=acme, role=Membership.Role.PRINCIPAL)
    tomas_agent = Agent.objects.create(
        tenant=acme,
        slug="tomas",
        name="Tomas's agent",
        party_id="acme:user:tomas",
        description="Acts for Tomas Berg, founder of Acme Robotics.",
        system_prompt=(
            "You act for Tomas Berg, founder of Acme Robotics. Never commit to a day rate above "
            "what Tomas has told you he will pay; ask him when you do not know."
        ),
        terms=TERMS,
        principal=tomas,
    )
    intent = Intent.objects.create(
        tenant=acme, agent=tomas_agent, statement=INTENT, external_id="fractional-cfo"
    )
    guild = Tenant.objects.create(slug="cfo-guild", name="The CFO Guild")
    cfo_agents = []
    for slug, name, floor, structured in CFOS:
        agent = Agent.objects.create(
            tenant=guild,
            slug=slug,
            name=name,
            party_id=f"cfo-guild:member:{slug}",
            description=f"Fractional CFO {name}: two days a month for seed-stage startups.",
            system_prompt=f"You act for {name}, a fractional CFO. Never go below your day-rate floor.",
            terms=TERMS if structured else "",
            term_guards=[{"term": "amount", "op": ">=", "value": floor, "currency": "EUR"}],
        )
        Intent.objects.create(tenant=guild, agent=agent, statement="Take on fractional CFO clients.")
        cfo_agents.append(agent)
    return DemoWorld(tomas_agent=tomas_agent, intent=intent, cfo_agents=cfo_agents)


def demo_task(urls: list[str]) -> str:
    """The task Tomas gives his agent: the intent and the CFOs to talk to, by URL."""
    return "Find me a fractional CFO, two days a month. Talk to all of these at once: " + " ".join(urls)


@dataclass(frozen=True)
class SidePair:
    """One exchange as each side recorded it."""

    counterparty: str
    ours: Settlement | None
    theirs: Settlement | None

    @property
    def verdicts_match(self) -> bool:
        if self.ours is None or self.theirs is None:
            return False
        return (self.ours.outcome, self.ours.basis, self.ours.terms) == (
            self.theirs.outcome,
            self.theirs.basis,
            self.theirs.terms,
        )


def demo_pairs(world: DemoWorld) -> list[SidePair]:
    """Each outbound negotiation of Tomas's agent with the inbound record the CFO's side kept."""
    pairs = []
    for outbound in Negotiation.objects.filter(agent=world.tomas_agent).order_by("counterparty_url"):
        inbound = Negotiation.objects.filter(
            agent__in=world.cfo_agents,
            direction=Negotiation.Direction.INBOUND,
            task_id=outbound.task_id,
        ).first()
        pairs.append(
            SidePair(
                counterparty=outbound.counterparty_name or outbound.counterparty_url,
                ours=Settlement.objects.filter(negotiation=outbound).first(),
                theirs=Settlement.objects.filter(negotiation=inbound).first() if inbound else None,
            )
        )
    return pairs
