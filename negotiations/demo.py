"""The demo scenario "Bring in a fractional CFO" (end-to-end issue, item 8).

Tenant ``acme`` hosts Tomas, a founder, and his agent; tenant ``cfo-guild``
hosts three fractional-CFO agents with different hidden day-rate floors. One
of them speaks prose only (its operator turned structured terms off), so the
three settlements differ: agreed on terms, declined, and unconfirmed.

Every agent runs on the ``offline`` model, or, given a :class:`DemoModel`, on
that chat-completions model: a :class:`~agents.models.ModelEndpoint` of its
name in each tenant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from allauth.account.models import EmailAddress
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum

from agents.models import Agent, Intent, Message, ModelEndpoint, Run
from negotiations.models import Negotiation, Settlement, Turn
from parley.models import Membership, Tenant

TOMAS_PASSWORD = "tomas-demo"
# Acme's operator: she configures its agents, tools and models (the operator pages).
OPERATOR_USERNAME = "maya"
OPERATOR_PASSWORD = "maya-demo"
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


@dataclass(frozen=True)
class DemoModel:
    """The chat-completions model every demo agent runs on: ``name``, the model id the endpoint
    serves (and the name of its :class:`ModelEndpoint` in each tenant), at ``base_url``, with
    ``api_key`` ("" sends none)."""

    name: str
    base_url: str
    api_key: str = ""


class DemoModelError(ValueError):
    """The model the demo was given cannot be used; the message says what is wrong."""


def demo_model(*, url: str, name: str, key_env: str, environ: Mapping[str, str]) -> DemoModel:
    """The :class:`DemoModel` at ``url`` serving ``name``, its key read from the variable ``key_env``
    of ``environ`` ("" for a server that takes no key).

    Raises :class:`DemoModelError` for a URL that is not http(s) with a host, a name a model
    endpoint cannot have (``offline`` is the built-in model's), or a key variable that is unset
    or empty — before anything is created.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DemoModelError(
            f"--model-url {url!r} is not an http(s) URL of a chat-completions endpoint, "
            "e.g. https://openrouter.ai/api/v1"
        )
    key = ""
    if key_env:
        key = environ.get(key_env, "")
        if not key:
            raise DemoModelError(f"--model-key-env names {key_env}, which is not set in the environment")
    try:
        ModelEndpoint(name=name, base_url=url, upstream_model=name, api_key=key).full_clean(
            exclude=["tenant"]
        )
    except ValidationError as exc:
        problems = "; ".join(f"{field}: {' '.join(m)}" for field, m in exc.message_dict.items())
        raise DemoModelError(f"the model cannot be used: {problems}") from exc
    return DemoModel(name=name, base_url=url, api_key=key)


def _demo_account(username: str, first_name: str, password: str) -> User:
    """The demo's account ``username`` (made, or reset), its address ``<username>@acme.example``
    verified, so it logs in under mandatory e-mail verification."""
    email = f"{username}@acme.example"
    user, _ = User.objects.get_or_create(username=username, defaults={"first_name": first_name})
    user.email = email
    user.set_password(password)
    user.save()
    EmailAddress.objects.filter(user=user).exclude(email=email).delete()
    EmailAddress.objects.update_or_create(
        user=user, email=email, defaults={"verified": True, "primary": True}
    )
    return user


@transaction.atomic
def demo_seed(model: DemoModel | None = None) -> DemoWorld:
    """Create (or re-create) both demo tenants, their users and agents, on ``model`` (default
    ``offline``). Acme has Tomas, the party, and Maya, its operator (:data:`OPERATOR_USERNAME`)."""
    Tenant.objects.filter(slug__in=["acme", "cfo-guild"]).delete()
    tomas = _demo_account("tomas", "Tomas", TOMAS_PASSWORD)
    maya = _demo_account(OPERATOR_USERNAME, "Maya", OPERATOR_PASSWORD)
    acme = Tenant.objects.create(slug="acme", name="Acme Robotics")
    Membership.objects.create(user=tomas, tenant=acme, role=Membership.Role.PRINCIPAL)
    Membership.objects.create(user=maya, tenant=acme, role=Membership.Role.OPERATOR)
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
    if model is not None:
        for tenant in (acme, guild):
            ModelEndpoint.objects.create(
                tenant=tenant,
                name=model.name,
                base_url=model.base_url,
                upstream_model=model.name,
                api_key=model.api_key,
            )
            Agent.objects.for_tenant(tenant).update(model=model.name)
        tomas_agent.refresh_from_db()
        for agent in cfo_agents:
            agent.refresh_from_db()
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


@dataclass(frozen=True)
class DemoUsage:
    """Which models answered and what they used: ``run_models`` the names that answered the run's
    steps, ``turn_models`` those that decided negotiation moves (both sides; none on ``offline``),
    ``model_moves`` how many recorded moves they decided, and the tokens of all of it."""

    run_models: list[str]
    turn_models: list[str]
    model_moves: int
    input_tokens: int
    output_tokens: int


def demo_usage(world: DemoWorld, run: Run) -> DemoUsage:
    """What ``run`` and every negotiation of the demo's agents used, read back as stored."""
    agents = [world.tomas_agent, *world.cfo_agents]
    steps = Message.objects.for_tenant(run.tenant_id).filter(run=run, role=Message.Role.ASSISTANT)
    steps = steps.exclude(model="")
    # Both tenants' moves: Tomas's agent's and the CFOs'.
    turns = Turn.across_tenants.filter(negotiation__agent__in=agents).exclude(model="")
    # The run's usage already counts the moves Tomas's agent decided for it; the CFOs' are theirs.
    cfo_tenant = world.cfo_agents[0].tenant_id
    cfo_side = (
        Negotiation.objects.for_tenant(cfo_tenant)
        .filter(agent__in=world.cfo_agents)
        .aggregate(input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"))
    )
    return DemoUsage(
        run_models=sorted(set(steps.values_list("model", flat=True))),
        turn_models=sorted(set(turns.values_list("model", flat=True))),
        model_moves=turns.count(),
        input_tokens=run.input_tokens + (cfo_side["input_tokens"] or 0),
        output_tokens=run.output_tokens + (cfo_side["output_tokens"] or 0),
    )


def demo_pairs(world: DemoWorld) -> list[SidePair]:
    """Each outbound negotiation of Tomas's agent with the inbound record the CFO's side kept."""
    pairs = []
    ours = Negotiation.objects.for_tenant(world.tomas_agent.tenant_id).filter(agent=world.tomas_agent)
    for outbound in ours.order_by("counterparty_url"):
        inbound = (
            Negotiation.objects.for_tenant(world.cfo_agents[0].tenant_id)
            .filter(
                agent__in=world.cfo_agents,
                direction=Negotiation.Direction.INBOUND,
                task_id=outbound.task_id,
            )
            .first()
        )
        pairs.append(
            SidePair(
                counterparty=outbound.counterparty_name or outbound.counterparty_url,
                ours=Settlement.objects.for_tenant(outbound.tenant_id).filter(negotiation=outbound).first(),
                theirs=(
                    Settlement.objects.for_tenant(inbound.tenant_id).filter(negotiation=inbound).first()
                    if inbound
                    else None
                ),
            )
        )
    return pairs
