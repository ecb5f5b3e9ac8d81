"""Reads of agents, runs and questions, always within one tenant."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Protocol

from django.db.models import Q, QuerySet

from agents.models import MAX_DELEGATION_DEPTH, Agent, Intent, Message, ModelEndpoint, Question, Run, Tool
from parley import live, roles, strict_json
from parley.models import Event, Membership, Tenant

# A question or approval still open: not answered, and its run active (one of a run that ended
# takes no answer). A filter of Question rows.
OPEN_QUESTION = Q(answered_at=None, run__status__in=Run.ACTIVE)


def can_ask_party(agent: Agent) -> bool:
    """Whether ``agent`` may ask its party anything: only when it has a principal, the member who
    answers its questions.

    An agent with nobody to ask never asks (README, "Negotiating"): its negotiator declines where it
    would ask (:func:`negotiations.negotiator.decide`), and the loop answers a call of a tool that
    asks the party with an error naming why (:func:`agents.services.steps.run_step`). Owners and operators
    answer on a party's behalf; they do not stand in for a party the agent does not have.
    """
    return agent.principal_id is not None


def sees_every_party(membership: Membership) -> bool:
    """Whether the member's inbox holds every party's questions and runs of the tenant.

    Owners and operators answer on any party's behalf and viewers watch them
    all; a principal sees their own agents' only.
    """
    return membership.role != Membership.Role.PRINCIPAL


def visible_agents(*, membership: Membership) -> QuerySet[Agent]:
    """The agents of the member's tenant whose runs, negotiations and pages the member may see: every
    one, except for a principal, who sees their own agents only (:func:`sees_every_party`); another
    party's are a 404 to them, like another tenant's."""
    agents = Agent.objects.for_tenant(membership.tenant_id)
    if not sees_every_party(membership):
        agents = agents.filter(principal_id=membership.user_id)
    return agents


def agents_of_principal(*, membership: Membership) -> QuerySet[Agent]:
    """The agents of the member's tenant that the member is the principal of, by name."""
    agents = Agent.objects.for_tenant(membership.tenant_id)
    return agents.filter(principal_id=membership.user_id).order_by("name")


def visible_runs(*, membership: Membership) -> QuerySet[Run]:
    """The runs of the member's tenant the member may see: those of :func:`visible_agents`, and the
    runs they called as tools, however deep (another agent's work done for them)."""
    agents = visible_agents(membership=membership)
    runs = Run.objects.for_tenant(membership.tenant_id)
    if not sees_every_party(membership):
        # parent__agent, parent__parent__agent, …: as deep as a delegation chain may go.
        lookups = ["parent__" * depth + "agent__in" for depth in range(MAX_DELEGATION_DEPTH + 1)]
        runs = runs.filter(reduce(operator.or_, (Q(**{lookup: agents}) for lookup in lookups)))
    return runs


# What the inbox shows of an open question, its run, agent, party and intent (:func:`open_questions_for`):
# an agent's or a run's whole row is dozens of columns, a page of fifty questions read them fifty times.
INBOX_COLUMNS = (
    "tenant_id",
    "run_id",
    "kind",
    "tool_name",
    "arguments",
    "question",
    "options",
    "created_at",
    "run__tenant_id",
    "run__agent_id",
    "run__intent_id",
    "run__agent__name",
    "run__agent__principal_id",
    "run__agent__principal__username",
    "run__intent__statement",
)


def open_questions_for(*, tenant: Tenant, membership: Membership) -> QuerySet[Question]:
    """Open questions and approvals of the tenant's agents the member sees (see :func:`sees_every_party`),
    newest first, with run, agent, party and intent loaded, their :data:`INBOX_COLUMNS` only; a
    question of a run that ended (cancelled, failed, …) takes no answer and is left out."""
    questions = (
        Question.objects.for_tenant(tenant)
        .filter(OPEN_QUESTION)
        .select_related("run__agent__principal", "run__intent")
        .only(*INBOX_COLUMNS)
        .order_by("-created_at", "-pk")
    )
    if not sees_every_party(membership):
        questions = questions.filter(run__agent__in=visible_agents(membership=membership))
    return questions


def runs_list(
    *, membership: Membership, agent: Agent | None = None, intent: Intent | None = None, status: str = ""
) -> QuerySet[Run]:
    """The runs the member sees (:func:`visible_runs`), newest first, with agent and intent loaded,
    narrowed by each filter given: ``agent``, ``intent``, ``status`` (a :class:`Run.Status` value,
    "" for any)."""
    runs = (
        visible_runs(membership=membership).select_related("agent", "intent").order_by("-created_at", "-pk")
    )
    if agent is not None:
        runs = runs.filter(agent=agent)
    if intent is not None:
        runs = runs.filter(intent=intent)
    if status:
        runs = runs.filter(status=status)
    return runs


def startable_agents(*, membership: Membership) -> QuerySet[Agent]:
    """The agents of the member's tenant whose runs the member may start (see :func:`can_answer_as`),
    by name: every agent for an owner or operator, a party's own agents, none for a viewer."""
    agents = visible_agents(membership=membership).order_by("name", "slug")
    return agents if membership.role in roles.ANSWER else agents.none()


# What else waits on the party under an (agent, intent) thread. ``negotiations`` registers its
# source when it loads, so ``agents`` never imports it (docs/design.md#layers).
WaitingSource = Callable[..., Mapping[tuple[Any, Any], Sequence[Any]]]
_waiting_sources: list[WaitingSource] = []


def register_waiting_source(source: WaitingSource) -> None:
    """Add ``source(*, tenant, pairs)`` to what :func:`waiting_on_party` asks. Idempotent."""
    if source not in _waiting_sources:
        _waiting_sources.append(source)


def waiting_on_party(*, tenant: Tenant, pairs: Iterable[tuple[Any, Any]]) -> dict[tuple[Any, Any], list[Any]]:
    """For each ``(agent_id, intent_id)`` of ``pairs``, what waits on the party under that thread
    (e.g. negotiations parked for guidance), from every registered source; a pair with nothing
    waiting is left out. Each source reads in a fixed number of queries, however many pairs."""
    wanted = set(pairs)
    found: dict[tuple[Any, Any], list[Any]] = {}
    if not wanted:
        return found
    for source in _waiting_sources:
        for pair, rows in source(tenant=tenant, pairs=wanted).items():
            found.setdefault(pair, []).extend(rows)
    return found


@dataclass(frozen=True)
class Understood:
    """What an agent made of its party's answer, said back to the party as it answers.

    ``message`` says it for people: "Understood: at most 1,100 EUR per day for amount.", or why
    the answer gives no usable limit. ``limit`` is the limit read, ``{"term", "kind" ("ceiling" |
    "floor"), "value", "currency", "unit"}`` ("" where the term has none), None when none was.
    """

    message: str
    limit: dict[str, Any] | None = None


# Who reads a party's answer as soon as it is given (the ``offline`` negotiator, for a limit it
# asked for). ``negotiations`` registers its reader when it loads, as for :func:`waiting_on_party`.
AnswerReader = Callable[..., Understood | None]
_answer_readers: list[AnswerReader] = []


def register_answer_reader(reader: AnswerReader) -> None:
    """Add ``reader(*, question, answer)`` to what :func:`answer_understood` asks. Idempotent."""
    if reader not in _answer_readers:
        _answer_readers.append(reader)


def answer_understood(*, question: Question, answer: str) -> Understood | None:
    """What is understood of ``answer`` to ``question`` as it is given: the first registered reader's
    reading, or None where nothing reads it before the agent's model does."""
    for reader in _answer_readers:
        understood = reader(question=question, answer=answer)
        if understood is not None:
            return understood
    return None


class Pageable(Protocol):
    """A lazy list a paginator cuts: ``count()`` and slices, each a bounded number of queries."""

    def count(self) -> int: ...

    def __getitem__(self, cut: slice) -> Any: ...


# What else waits on the party with a question of its own, outside any run (an inbound negotiation
# parked for guidance), as a lazy list (:class:`Pageable`) of (item, the counterparty's last move or
# None) pairs. ``negotiations`` registers its source when it loads, as for :func:`waiting_on_party`.
ParkedSource = Callable[..., Pageable]
_parked_sources: list[ParkedSource] = []


def register_parked_source(source: ParkedSource) -> None:
    """Add ``source(*, tenant, agents)`` to what :func:`parked_for` asks. Idempotent."""
    if source not in _parked_sources:
        _parked_sources.append(source)


def parked_for(*, membership: Membership) -> list[Pageable]:
    """What waits on the parties of the agents the member sees (:func:`visible_agents`) with a
    question of its own: one lazy list (:class:`Pageable`) per registered source, each oldest first;
    none is read until it is counted or cut."""
    agents = visible_agents(membership=membership)
    return [source(tenant=membership.tenant_id, agents=agents) for source in _parked_sources]


def questions_of(*, membership: Membership) -> QuerySet[Question]:
    """The questions of the runs the member sees (:func:`visible_runs`), with run and agent loaded
    (for permission checks)."""
    return (
        Question.objects.for_tenant(membership.tenant_id)
        .filter(run__in=visible_runs(membership=membership))
        .select_related("run__agent")
    )


def run_messages(*, run: Run) -> QuerySet[Message]:
    """The messages ``run`` wrote (its input, model replies and tool results), in thread order."""
    return Message.objects.for_tenant(run.tenant_id).filter(run=run).order_by("seq")


def run_questions(*, run: Run) -> QuerySet[Question]:
    """The questions ``run`` asked, oldest first, with who answered them."""
    return (
        Question.objects.for_tenant(run.tenant_id)
        .filter(run=run)
        .select_related("answered_by")
        .order_by("created_at")
    )


def can_answer_for(*, membership: Membership, agent: Agent) -> bool:
    """Whether the member may answer ``agent``'s questions (see :func:`can_answer_as`).

    ``membership`` must be of the agent's tenant.
    """
    return membership.tenant_id == agent.tenant_id and can_answer_as(
        membership=membership, principal_id=agent.principal_id
    )


def can_answer_as(*, membership: Membership, principal_id: int | None) -> bool:
    """Whether the member may answer for the party ``principal_id``.

    The party may, and so may the tenant's owners and operators (on the party's
    behalf); viewers never may, and neither may another party of the tenant
    (:mod:`parley.roles`).
    """
    if membership.role not in roles.ANSWER:
        return False
    return membership.role in roles.OPERATE or principal_id == membership.user_id


def can_operate(*, membership: Membership, agent: Agent) -> bool:
    """Whether the member is an owner or an operator of ``agent``'s tenant (may see its system message)."""
    return membership.tenant_id == agent.tenant_id and membership.role in roles.OPERATE


def latest_intent(*, agent: Agent) -> Intent | None:
    """``agent``'s newest intent, or None when it has none."""
    return Intent.objects.for_tenant(agent.tenant_id).filter(agent=agent).order_by("-created_at").first()


def agent_tools(*, agent: Agent) -> QuerySet[Tool]:
    """The tools ``agent`` offers by choice, by name; empty means the defaults (see ``agents.tools``)."""
    return Tool.objects.for_tenant(agent.tenant_id).filter(agents=agent).select_related("target_agent")


@dataclass(frozen=True)
class AgentModel:
    """One model ``agent`` may call, in the order it tries them: ``endpoint`` None is ``offline`` or
    a name without a :class:`ModelEndpoint` of the tenant."""

    name: str
    fallback: bool
    endpoint: ModelEndpoint | None


def agent_models(*, agent: Agent) -> list[AgentModel]:
    """``agent.model`` then its ``fallback_models``, each with its endpoint (prices, currency)."""
    names = [agent.model, *(str(n) for n in agent.fallback_models or [])]
    endpoints = {e.name: e for e in ModelEndpoint.objects.for_tenant(agent.tenant_id).filter(name__in=names)}
    return [AgentModel(name=n, fallback=i > 0, endpoint=endpoints.get(n)) for i, n in enumerate(names)]


def agent_currency(*, agent: Agent) -> str:
    """The currency of what ``agent``'s model costs (its runs' costs and cost budgets, its
    negotiation turns'): its model endpoint's, "" for none (``offline``). An agent's fallbacks are
    priced in the same currency (:func:`agents.configuration.full_clean`)."""
    currency = (
        ModelEndpoint.objects.for_tenant(agent.tenant_id)
        .filter(name=agent.model)
        .values_list("currency", flat=True)
        .first()
    )
    return currency or ""


def run_children(*, run: Run) -> QuerySet[Run]:
    """The runs ``run`` delegated to (other agents called as tools), oldest first."""
    return (
        Run.objects.for_tenant(run.tenant_id)
        .filter(parent=run)
        .select_related("agent")
        .order_by("created_at")
    )


def run_timeline(*, run: Run) -> QuerySet[Event]:
    """The stored retries and fallbacks of ``run``'s model calls, in step order, then as they happened.

    Each is an :class:`parley.models.Event` of kind ``run.retry`` (payload
    ``{run, step, model, attempt, wait, reason}``) or ``run.fallback``
    (``{run, step, from, to, reason}``).
    """
    return (
        Event.objects.for_tenant(run.tenant_id)
        .filter(kind__in=live.RUN_TIMELINE_EVENTS, payload__run=str(run.pk))
        .order_by("payload__step", "created_at", "pk")
    )


@dataclass(frozen=True)
class ToolCallShown:
    """One tool call of a model reply and what came of it.

    ``arguments`` is the JSON text the model wrote; ``result`` the tool message
    answering the call (None while it waits); ``question`` the question or
    approval it stopped the run for, if any; ``child`` the run it started when
    the tool is another agent.
    """

    id: str
    name: str
    arguments: str
    result: Message | None = None
    question: Question | None = None
    child: Run | None = None

    @property
    def arguments_shown(self) -> str:
        """The arguments indented for reading; as written when they are not JSON."""
        try:
            return json.dumps(strict_json.loads(self.arguments), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            return self.arguments


@dataclass
class RunStep:
    """Step ``number`` of a run: the model call that made it and what the step wrote.

    ``reply`` is the model's message (None when the call failed or is still in
    flight); ``attempts`` the call's stored retries and fallbacks (see
    :func:`run_timeline`); ``calls`` the reply's tool calls, in order, each
    paired with its result by ``tool_call_id``; ``notes`` every other message
    of the step: the task at step 0, what was sent back to the model (an
    answer that missed the output schema).
    """

    number: int
    reply: Message | None = None
    attempts: list[Event] = field(default_factory=list)
    calls: list[ToolCallShown] = field(default_factory=list)
    notes: list[Message] = field(default_factory=list)


def run_steps(*, run: Run) -> list[RunStep]:
    """``run``'s timeline, step by step from 0 (its task), in four queries however long it is."""
    messages = list(run_messages(run=run))
    questions = {q.tool_call_id: q for q in run_questions(run=run)}
    children = {c.parent_tool_call_id: c for c in run_children(run=run)}
    results = {m.tool_call_id: m for m in messages if m.role == Message.Role.TOOL}
    steps: dict[int, RunStep] = {}

    def at(number: int) -> RunStep:
        return steps.setdefault(number, RunStep(number=number))

    for event in run_timeline(run=run):
        at(int(event.payload.get("step", 0))).attempts.append(event)
    paired: set[str] = set()
    for m in messages:
        if m.role == Message.Role.ASSISTANT:
            step = at(m.step)
            step.reply = m
            for call in m.tool_calls:
                call_id = str(call.get("id", ""))
                paired.add(call_id)
                step.calls.append(
                    ToolCallShown(
                        id=call_id,
                        name=str(call.get("name", "")),
                        arguments=str(call.get("arguments", "")),
                        result=results.get(call_id),
                        question=questions.get(call_id),
                        child=children.get(call_id),
                    )
                )
    for m in messages:
        paired_result = m.role == Message.Role.TOOL and m.tool_call_id in paired
        if m.role != Message.Role.ASSISTANT and not paired_result:
            at(m.step).notes.append(m)
    return [steps[n] for n in sorted(steps)]
