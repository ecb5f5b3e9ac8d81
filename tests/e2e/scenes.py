"""A dashboard with realistic data, made by the demo scenario on the live stack (``negotiations.demo``).

:func:`dashboard_scene` plays the demo to its end once (three settlements),
then starts Tomas's agent on a second intent with the same CFOs and stops
when it waits on his question, with those three negotiations parked behind
it. Every role has a member, and the configuration pages have rows to show.
Call it with the live stack running and the database reachable from this
thread (never under Playwright's loop: see ``tests.e2e.conftest.off_loop``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth import get_user_model

from a2a_gateway.auth import inbound_key_create
from agents.addresses import agent_url
from agents.models import Agent, Intent, ModelEndpoint, Question, Run, Tool
from agents.services import questions, runs
from negotiations import demo
from negotiations.models import Negotiation, Settlement
from parley.models import Membership
from parley.services import api_key_create, invitation_create, placeholder_create, placeholder_invite
from representative.models import GroundingDocument
from tests.conftest import make_user, wait_until

DEMO_QUESTION = (
    "What is your limit on amount (EUR per day): the most you will pay, or the least you will take?"
)
DEMO_ANSWER = "Up to €1,100 a day."
SECOND_INTENT = "Bring in a fractional CFO to prepare the Series A data room."
LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string", "description": "The purchase order number."}},
    "required": ["order"],
}


@dataclass(frozen=True)
class Scene:
    """What :func:`dashboard_scene` made: the demo's world, its finished run (``settled_run``) and the
    run waiting on Tomas (``waiting_run``, its question ``question``), the agreed negotiation, a
    second agent with a host tool needing approval, the members ``olga`` (operator), ``owen``
    (owner) and ``vera`` (viewer), whose password is ``tests.conftest.PASSWORD``, an open
    invitation of nia@example.com (``invitation_path``, its link's path), and a placeholder member,
    ``acme.petra`` (``placeholder``), with an open invitation for it."""

    world: demo.DemoWorld
    settled_run: Run
    waiting_run: Run
    question: Question
    agreed: Negotiation
    buyer: Agent
    tool: Tool
    endpoint: ModelEndpoint
    invitation_path: str
    placeholder: Membership


def wait_question(run: Run) -> Question:
    """The open question ``run`` asks (the offline model asks within seconds)."""
    question: Question = wait_until(
        lambda: Question.across_tenants.filter(run=run, answered_at=None).first(),
        timeout=60,
        what="the question",
    )
    return question


def wait_ended(run: Run) -> Run:
    def ended() -> Run | None:
        fresh = Run.across_tenants.get(pk=run.pk)
        return fresh if fresh.status not in Run.ACTIVE else None

    finished: Run = wait_until(ended, timeout=120, what="the run to finish")
    return finished


def dashboard_scene() -> Scene:
    """Play the demo on the live stack and add what the other pages list; see the module docstring."""
    world = demo.demo_seed()
    acme = world.tomas_agent.tenant
    tomas = world.tomas_agent.principal
    assert tomas is not None
    urls = [agent_url(a) for a in world.cfo_agents]

    settled_run = runs.run_start(agent=world.tomas_agent, intent=world.intent, task=demo.demo_task(urls))
    questions.question_answer(question=wait_question(settled_run), answer=DEMO_ANSWER, user=tomas)
    settled_run = wait_ended(settled_run)
    assert settled_run.status == Run.Status.DONE, settled_run.end_reason
    agreed = Negotiation.across_tenants.get(
        agent=world.tomas_agent, intent=world.intent, settlement__outcome=Settlement.Outcome.AGREED
    )

    second = Intent.objects.create(tenant=acme, agent=world.tomas_agent, statement=SECOND_INTENT)
    waiting_run = runs.run_start(agent=world.tomas_agent, intent=second, task=demo.demo_task(urls))
    question = wait_question(waiting_run)

    people = {"olga": Membership.Role.OPERATOR, "owen": Membership.Role.OWNER, "vera": Membership.Role.VIEWER}
    for username, role in people.items():
        Membership.objects.create(user=make_user(username), tenant=acme, role=role)
    owen = get_user_model().objects.get(username="owen")

    endpoint = ModelEndpoint.objects.create(
        tenant=acme,
        name="house-model",
        base_url="https://models.example.com/v1",
        upstream_model="house-1",
        input_price=Decimal(2),
        output_price=Decimal(8),
        currency="EUR",
    )
    tool = Tool.objects.create(
        tenant=acme,
        name="place_order",
        description="Place a purchase order with a supplier.",
        parameters=LOOKUP_SCHEMA,
        kind=Tool.Kind.HOST,
        url="https://erp.example.com/parley/place-order",
        secret="s3cret",
        timeout=10,
        requires_approval=True,
    )
    buyer = Agent.objects.create(
        tenant=acme,
        slug="procurement",
        name="Acme procurement",
        party_id="acme:team:procurement",
        description="Buys parts for Acme Robotics.",
        system_prompt="You buy parts for Acme Robotics.",
        terms=demo.TERMS,
        principal=owen,
        model=endpoint.name,
    )
    buyer.tools.add(tool)
    GroundingDocument.objects.create(
        tenant=acme,
        agent=world.tomas_agent,
        title="About Acme Robotics",
        text="Acme Robotics builds warehouse robots in Rotterdam; 40 people; seed round closed in 2024.",
    )
    inbound_key_create(agent=world.tomas_agent, name="CFO Guild")
    api_key_create(tenant=acme, name="Host backend", scopes=["read", "write"], user=owen)
    invited = invitation_create(
        tenant=acme, email="nia@example.com", role=Membership.Role.OPERATOR, user=owen, origin=""
    )
    petra = Membership.objects.get(user=placeholder_create(tenant=acme, username="acme.petra"), tenant=acme)
    placeholder_invite(membership=petra, email="petra@example.com", user=owen, origin="")
    return Scene(
        world=world,
        settled_run=settled_run,
        waiting_run=Run.across_tenants.get(pk=waiting_run.pk),
        question=question,
        agreed=agreed,
        buyer=buyer,
        tool=tool,
        endpoint=endpoint,
        invitation_path=invited.link,
        placeholder=petra,
    )
