"""Reads of the negotiation record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery

from agents.llm import ChatMessage, ToolSpec
from agents.models import OFFLINE, Agent, Intent, Question
from agents.selectors import Understood
from negotiations import chart, limits, model_negotiator, negotiator, offline
from negotiations.digest import clean, compact_json
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.score import Score
from negotiations.wire import Entry, Move, Role, TaskRecord
from parley.models import Tenant

RECORD_LIMIT = 10
# The board's orders besides newest first, each with what it reads: a column ascending, or with "-"
# descending (see :func:`board_sorted`).
BOARD_ORDERS = {
    "surplus": "Least surplus first",
    "-surplus": "Most surplus first",
    "share": "Smallest share of the aspiration first",
    "-share": "Largest share of the aspiration first",
    "turns": "Fewest turns first",
    "-turns": "Most turns first",
    "cost": "Cheapest first",
    "-cost": "Costliest first",
}


def inbound_intent(agent: Agent) -> Intent | None:
    """The intent an inbound negotiation of ``agent`` is attached to: its latest one, if any.

    Inbound messages carry no intent, so the one the agent works on now stands
    for them (as ``services.inbound_turn`` attaches it).
    """
    return agent.intents.order_by("-created_at").first()


def binding(agent: Agent, intent_id: Any) -> QuerySet[Negotiation]:
    """Negotiations of ``agent`` under the intent that hold their counterparty
    (docs/design.md#one-live-negotiation).

    Binding: going (open, out of turns, or settled as ``unanswered`` — its Task
    is still open), waiting on the party, closed as a deal (agreed or
    unconfirmed), or failed once a Task existed or with its opening move stored
    unrecorded (a move may have reached them; ``answer`` retries it). Not
    binding: declined and conflict, which free the counterparty, and a failure
    before any Task with no move stored, which reached nobody.
    """
    return (
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent, intent_id=intent_id)
        .exclude(status=Negotiation.Status.FAILED, task_id="", outbound_move__isnull=True)
        .exclude(settlement__outcome__in=[Settlement.Outcome.DECLINED, Settlement.Outcome.CONFLICT])
    )


def binding_outbound(agent: Agent, intent: Intent | None) -> Negotiation | None:
    """The binding outbound negotiation of ``agent`` under ``intent`` that holds it, or None (None
    for no intent): the oldest closed as a deal (``Settlement.DEALS``), else the oldest unfinished.

    While there is one, an inbound first message under the same intent is refused
    (``negotiations.services.inbound._refuse_if_bound``): for good after a deal, until it settles otherwise.
    """
    if intent is None:
        return None
    bound = binding(agent, intent.pk).filter(direction=Negotiation.Direction.OUTBOUND).order_by("created_at")
    return bound.filter(settlement__outcome__in=Settlement.DEALS).first() or bound.first()


def board(
    *,
    tenant: Tenant | int,
    agent: Agent | None = None,
    intent: Intent | None = None,
    status: str = "",
    direction: str = "",
    counterparty: str = "",
) -> QuerySet[Negotiation]:
    """The tenant's negotiations, both directions, newest first, narrowed by each filter given.

    ``status`` and ``direction`` are values of :class:`Negotiation.Status` and
    :class:`Negotiation.Direction` ("" for any); ``counterparty`` matches part of
    the counterparty's name or URL, in any case. Each row comes with its agent,
    intent and settlement loaded (its Turn rows counted in ``turns_recorded``) and annotated with
    its latest turn's ``last_side``, ``last_action`` and ``last_at``
    (None without turns): one query however many rows.
    """
    latest = Turn.objects.for_tenant(tenant).filter(negotiation=OuterRef("pk")).order_by("-seq")
    rows = (
        Negotiation.objects.for_tenant(tenant)
        .select_related("agent", "intent", "settlement")
        .annotate(
            last_side=Subquery(latest.values("side")[:1]),
            last_action=Subquery(latest.values("action")[:1]),
            last_at=Subquery(latest.values("created_at")[:1]),
        )
        .order_by("-created_at", "-pk")
    )
    if agent is not None:
        rows = rows.filter(agent=agent)
    if intent is not None:
        rows = rows.filter(intent=intent)
    if status:
        rows = rows.filter(status=status)
    if direction:
        rows = rows.filter(direction=direction)
    if counterparty:
        rows = rows.filter(counterparty_matches(counterparty))
    return rows


@dataclass(frozen=True)
class BoardCounts:
    """How many negotiations :func:`board`'s rows hold, and how many of them are settled."""

    total: int
    settled: int


def board_counts(rows: QuerySet[Negotiation]) -> BoardCounts:
    """:func:`board`'s ``rows`` counted, all and settled, in one query (one pass over them, where two
    counts would read them twice)."""
    # Of the status, not the id: Postgres then counts from the index on (tenant, agent, status) alone.
    counts = rows.aggregate(
        total=Count("status"), settled=Count("status", filter=Q(status=Negotiation.Status.SETTLED))
    )
    return BoardCounts(counts["total"], counts["settled"])


def counterparty_matches(text: str) -> Q:
    """Negotiations whose counterparty's name or URL contains ``text``, in any case: the board's
    ``counterparty`` filter (the dashboard's and the API's)."""
    return Q(counterparty_name__icontains=text) | Q(counterparty_url__icontains=text)


def negotiation_turns(negotiation: Negotiation) -> QuerySet[Turn]:
    """Every turn of ``negotiation``, in order (by ``seq``)."""
    return Turn.objects.for_tenant(negotiation.tenant_id).filter(negotiation=negotiation).order_by("seq")


def move_of(turn: Turn) -> Move | None:
    """The move ``turn`` recorded; None for a message that carried none."""
    if not turn.action:
        return None
    return Move(turn.action, turn.message, turn.terms, turn.offer_id, turn.accepts_offer_id)


def turns_record(negotiation: Negotiation) -> TaskRecord:
    """The negotiation's Task as recorded in its turns (roles as on the wire)."""
    ours: Role = "user" if negotiation.direction == Negotiation.Direction.OUTBOUND else "agent"
    theirs: Role = "agent" if ours == "user" else "user"
    history = tuple(
        Entry(role=ours if t.side == Turn.Side.OURS else theirs, move=move_of(t), text=t.message)
        for t in negotiation_turns(negotiation)
    )
    return TaskRecord(state=negotiation.task_state or "submitted", history=history)


@dataclass(frozen=True)
class DecisionPrompt:
    """What the agent's chat model is shown to decide its next move in a negotiation.

    ``messages`` are the chat messages (the system message of the template, then
    the record as one user message) and ``tool`` the one tool the move comes back
    as (:data:`negotiations.model_negotiator.MOVE_TOOL`). ``model`` is the
    agent's model: on ``offline`` (``sent`` False) its concession strategy
    ``strategy`` decides instead, and no prompt is sent. ``awaits_their_move``:
    the next decision comes with the counterparty's next message (inbound), which
    is then added to the record as its last line.
    """

    model: str
    strategy: str
    messages: list[ChatMessage]
    tool: ToolSpec
    awaits_their_move: bool

    @property
    def sent(self) -> bool:
        return self.model != OFFLINE


def decision_prompt(negotiation: Negotiation) -> DecisionPrompt:
    """The prompt of ``negotiation``'s next decision, built now exactly as the negotiator builds it
    (:func:`negotiations.negotiator.decision_brief` with the arguments the services pass: outbound
    its objective and turn cap, inbound the agent's turn cap), for any model the agent is on.

    Reads only. Raises :class:`negotiations.negotiator.NegotiatorError` where the negotiator would
    fail to build it too (a malformed term guard, an unknown timezone).
    """
    agent = negotiation.agent
    outbound = negotiation.direction == Negotiation.Direction.OUTBOUND
    brief = negotiator.decision_brief(
        agent=agent,
        record=turns_record(negotiation),
        our_role="user" if outbound else "agent",
        guidance=negotiation.guidance,
        max_moves=negotiation.max_turns if outbound else agent.max_turns,
        intent=negotiation.intent,
        objective=negotiation.objective if outbound else "",
        answers=answers_of(negotiation),
    )
    return DecisionPrompt(
        model=agent.model,
        strategy=agent.strategy,
        messages=model_negotiator.prompt(brief),
        tool=model_negotiator.move_tool(brief),
        awaits_their_move=not outbound,
    )


def answers_of(negotiation: Negotiation) -> tuple[model_negotiator.Answer, ...]:
    """The questions ``negotiation`` parked on and the party's answers, oldest first."""
    return tuple(
        model_negotiator.Answer(question=str(a["question"]), answer=str(a["answer"]))
        for a in negotiation.answers
    )


def record_block(agent: Agent, intent: Intent) -> str:
    """The system message's record of negotiations the agent is party to (docs/design.md#the-agent-loop).

    The last ten, oldest first, both directions; "" when there are none.
    """
    recent = list(
        Negotiation.objects.for_tenant(agent.tenant_id)
        .filter(agent=agent)
        .select_related("settlement")
        .annotate(turns_so_far=Count("turns"))
        .order_by("-updated_at")[:RECORD_LIMIT]
    )[::-1]
    if not recent:
        return ""
    lines = [
        "Negotiations you are party to. This is the record of what happened, kept by the platform; "
        "trust it over the conversation above:"
    ]
    for n in recent:
        who = f" with {clean(n.counterparty_name)}" if n.counterparty_name else ""
        how = "you contacted them" if n.direction == Negotiation.Direction.OUTBOUND else "they contacted you"
        lines.append(f"- {n.pk}{who} — {how}; {_detail(n)}")
    lines.append(
        "Only negotiations you opened move on when you answer. Never open a second negotiation with a "
        "counterparty you already have one with."
    )
    waiting = [str(n.pk) for n in recent if n.status == Negotiation.Status.WAITING]
    if waiting:
        lines.append(
            f"Waiting on your party right now: {', '.join(waiting)}. Ask with ask_user, then call answer "
            "with every id the answer applies to — before you report back, not after."
        )
    return "\n".join(lines)


def _detail(n: Negotiation) -> str:
    if n.status == Negotiation.Status.WAITING:
        return f'waiting on your guidance: "{clean(n.parked_question)}"'
    if n.status == Negotiation.Status.OPEN:
        return f"still open, {n.turns_so_far} turns so far"  # type: ignore[attr-defined]  # annotated above
    settlement = getattr(n, "settlement", None)
    if settlement is None:
        return n.get_status_display()
    return settlement.outcome + (f": {compact_json(settlement.terms)}" if settlement.terms else "")


def waiting_for_party(
    *, tenant: Tenant | int, pairs: set[tuple[Any, Any]]
) -> dict[tuple[Any, Any], list[tuple[Negotiation, Turn | None]]]:
    """The tenant's outbound negotiations waiting on the party (status ``waiting``) under each
    ``(agent_id, intent_id)`` of ``pairs``, oldest first, keyed by that pair; a pair with none is left out.

    What the party's inbox shows next to a question: the run's own negotiations,
    which its question came from (an inbound one has a question of its own,
    :func:`parked_inbound`). Each comes paired with the counterparty's latest
    Turn (:func:`_their_last_turns`). Two queries however many pairs and negotiations.
    """
    if not pairs:
        return {}
    # Those of the pairs' agents under the pairs' intents, then the pairs themselves: one condition a
    # column, where one per pair made the query (and building it) grow with the inbox's page.
    intents = {intent_id for _, intent_id in pairs}
    under = Q(intent_id__in=intents - {None})
    if None in intents:
        under |= Q(intent_id__isnull=True)
    candidates = (
        Negotiation.objects.for_tenant(tenant)
        .filter(
            under,
            agent_id__in={agent_id for agent_id, _ in pairs},
            status=Negotiation.Status.WAITING,
            direction=Negotiation.Direction.OUTBOUND,
        )
        .order_by("created_at", "pk")
    )
    rows = [n for n in candidates if (n.agent_id, n.intent_id) in pairs]
    last_moves = _their_last_turns(tenant, rows)
    found: dict[tuple[Any, Any], list[tuple[Negotiation, Turn | None]]] = {}
    for n in rows:
        found.setdefault((n.agent_id, n.intent_id), []).append((n, last_moves.get(n.pk)))
    return found


class ParkedInbound:
    """A lazy list of inbound negotiations waiting on their party, for a paginator: ``count()`` is one
    query; a slice is two, its rows loaded with agent, principal and intent, each paired with the
    counterparty's latest Turn (:func:`_their_last_turns`)."""

    def __init__(self, tenant: Tenant | int, rows: QuerySet[Negotiation]) -> None:
        self.tenant, self.rows = tenant, rows

    def count(self) -> int:
        """How many there are."""
        return self.rows.count()

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, cut: slice) -> list[tuple[Negotiation, Turn | None]]:
        rows = list(self.rows[cut])
        last_moves = _their_last_turns(self.tenant, rows)
        return [(n, last_moves.get(n.pk)) for n in rows]


def parked_inbound(*, tenant: Tenant | int, agents: QuerySet[Agent]) -> ParkedInbound:
    """The tenant's inbound negotiations of ``agents`` waiting on their party, oldest first: each asks
    it ``parked_question`` and takes its answer
    (:func:`negotiations.services.parking.negotiation_guidance_give`). What the party's inbox lists
    with an answer box, a page at a time (:class:`ParkedInbound`).
    """
    rows = (
        Negotiation.objects.for_tenant(tenant)
        .filter(agent__in=agents, status=Negotiation.Status.WAITING, direction=Negotiation.Direction.INBOUND)
        .select_related("agent__principal", "intent")
        .order_by("created_at", "pk")
    )
    return ParkedInbound(tenant, rows)


def _their_last_turns(tenant: Tenant | int, rows: list[Negotiation]) -> dict[Any, Turn]:
    """The counterparty's latest Turn of each of ``rows`` by negotiation id (action, message, terms,
    offerId; its raw message left unloaded); one without a move of theirs is left out. One query."""
    theirs = Turn.objects.for_tenant(tenant).filter(side=Turn.Side.THEIRS)
    # A correlated subquery rather than Postgres's DISTINCT ON, so the embedded default's SQLite runs it.
    latest = theirs.filter(negotiation=OuterRef("negotiation")).order_by("-seq").values("seq")[:1]
    return {
        turn.negotiation_id: turn
        for turn in theirs.filter(negotiation__in=[n.pk for n in rows], seq=Subquery(latest)).defer(
            "raw", "artifact"
        )
    }


def guidance_understood(
    *, agent: Agent, intent: Intent | None, before: list[str], answer: str
) -> Understood | None:
    """What ``agent``'s ``offline`` negotiator reads of the party's limit from ``answer``, added to
    the standing guidance ``before`` (:func:`negotiations.negotiator.limit_reading`, the rule the
    negotiator decides by).

    None where it reads nothing of it: a chat model reads its guidance itself, a term guard or a
    fixed term needs none, an answer without an amount leaves a limit given before as it was, and
    a malformed guard fails the negotiation before any answer is read.
    """
    try:
        reading = negotiator.limit_reading(agent=agent, guidance=[*before, answer], intent=intent)
    except negotiator.NegotiatorError:
        return None
    if reading is None or (reading.limit is not None and not limits.names_an_amount(answer)):
        return None
    limit = reading.limit
    return Understood(
        message=reading.message,
        limit=None
        if limit is None
        else {
            "term": limit.term,
            "kind": limit.kind,
            "value": limit.value,
            "currency": reading.currency,
            "unit": reading.unit,
        },
    )


def last_answer_understood(negotiation: Negotiation) -> Understood | None:
    """What the ``offline`` negotiator reads of the latest line of ``negotiation``'s standing guidance,
    the party's answer just given (see :func:`guidance_understood`); None without guidance."""
    if not negotiation.guidance:
        return None
    return guidance_understood(
        agent=negotiation.agent,
        intent=negotiation.intent,
        before=negotiation.guidance[:-1],
        answer=negotiation.guidance[-1],
    )


def question_understood(*, question: Question, answer: str) -> Understood | None:
    """The answer reader ``negotiations`` registers (:func:`agents.selectors.register_answer_reader`):
    what ``answer`` to a run's ``question`` tells the outbound negotiations waiting on the party under
    the run's thread, which the ``offline`` loop answers with it word for word.

    Each as :func:`guidance_understood`; where they read it differently, each is named ("With Noor
    Lindqvist: …"), and no one limit is given. None where none of them reads it.
    """
    if question.kind != Question.Kind.QUESTION:
        return None
    run = question.run
    waiting = (
        Negotiation.objects.for_tenant(run.tenant_id)
        .filter(
            agent_id=run.agent_id,
            intent_id=run.intent_id,
            status=Negotiation.Status.WAITING,
            direction=Negotiation.Direction.OUTBOUND,
        )
        .select_related("agent", "intent")
        .order_by("created_at", "pk")
    )
    readings: dict[str, tuple[Understood, list[str]]] = {}
    for negotiation in waiting:
        understood = guidance_understood(
            agent=negotiation.agent, intent=negotiation.intent, before=negotiation.guidance, answer=answer
        )
        if understood is not None:
            who = clean(negotiation.counterparty_name or negotiation.counterparty_url)
            readings.setdefault(understood.message, (understood, []))[1].append(who)
    if len(readings) <= 1:
        return next((understood for understood, _ in readings.values()), None)
    said = " ".join(f"With {', '.join(names)}: {message}" for message, (_, names) in readings.items())
    return Understood(message=said)


def negotiation_score(negotiation: Negotiation, *, turns: list[Turn] | None = None) -> Score:
    """``negotiation`` scored for its own side (:class:`negotiations.score.Score`): the one place a
    negotiation is scored, for its page, the board and the API.

    The term and our limit are the ``offline`` negotiator's reading now
    (:func:`negotiations.negotiator.bargain`: a term guard's bound, else the standing guidance's);
    none where a guard is malformed. The aspiration is where the ``offline`` strategy opens
    (:attr:`negotiations.limits.Limit.opening`); an agent on a chat model sets out where its guard's
    ``aspiration`` says, else nowhere known. The agreed value is :func:`agreed_value`'s. ``turns`` are the
    negotiation's turns in order where the caller has them (else read when needed: only for a deal
    without a number in its terms); the count of turns is theirs, else the negotiation's
    ``turns_recorded``.
    """
    agent = negotiation.agent
    try:
        bargain = negotiator.bargain(agent=agent, guidance=negotiation.guidance, intent=negotiation.intent)
    except negotiator.NegotiatorError:
        term, currency, _unit = negotiator.numeric_term(agent)
        bargain = negotiator.Bargain(term, currency, None)
    limit = bargain.limit
    aspiration = None
    if limit is not None:
        aspiration = limit.opening if agent.model == OFFLINE else limit.aspiration
    counted = len(turns) if turns is not None else negotiation.turns_recorded
    return Score(
        term=bargain.term,
        currency=bargain.currency,
        limit=limit,
        aspiration=aspiration,
        agreed=agreed_value(negotiation, term=bargain.term, turns=turns),
        turns=counted,
        input_tokens=negotiation.input_tokens,
        output_tokens=negotiation.output_tokens,
        cost=negotiation.cost,
    )


def agreed_value(negotiation: Negotiation, *, term: str, turns: list[Turn] | None = None) -> float | None:
    """The value ``negotiation`` settled on for the numeric ``term``; None unless it closed as a deal
    (``Settlement.DEALS``) on a value.

    The agreed terms' number on ``term``; for a deal without one (prose moves, docs/wire-format.md
    #prose-fallback), the value the closing move names, else the one the move before it named, the
    offer it took (:func:`negotiations.offline.move_value`). ``turns`` as in :func:`negotiation_score`.
    """
    settlement = getattr(negotiation, "settlement", None)
    if settlement is None or settlement.outcome not in Settlement.DEALS:
        return None
    agreed = (settlement.terms or {}).get(term)
    if offline.is_number(agreed):
        return float(agreed)
    moves = [m for t in (negotiation_turns(negotiation) if turns is None else turns) if (m := move_of(t))]
    for move in reversed(moves[-2:]):
        value = offline.move_value(move, term)
        if value is not None:
            return value
    return None


def negotiation_offers(turns: list[Turn], *, term: str) -> list[chart.Offer]:
    """The value each move of ``turns`` named on ``term`` (:func:`negotiations.offline.move_value`), by
    side, in order; moves that name none are left out."""
    offers = []
    for turn in turns:
        move = move_of(turn)
        value = offline.move_value(move, term) if move is not None else None
        if value is not None:
            side: chart.Side = "ours" if turn.side == Turn.Side.OURS else "theirs"
            offers.append(chart.Offer(turn.seq, side, value))
    return offers


def negotiation_chart(negotiation: Negotiation, *, turns: list[Turn], score: Score) -> chart.Chart | None:
    """The chart of ``negotiation``'s exchange (:func:`negotiations.chart.draw`): each side's offers in
    ``turns`` (all of them, in order), our limit and aspiration from ``score`` (its
    :func:`negotiation_score`), and the settlement at the move that closed the deal, on the agreed
    value. None with nothing to draw."""
    closing = next((t.seq for t in reversed(turns) if t.action), None)
    return chart.draw(
        negotiation_offers(turns, term=score.term),
        limit=score.limit.value if score.limit is not None else None,
        aspiration=score.aspiration,
        settlement=(closing, score.agreed) if closing is not None and score.agreed is not None else None,
    )


def board_sorted(rows: QuerySet[Negotiation], sort: str) -> QuerySet[Negotiation]:
    """:func:`board`'s ``rows`` in the order ``sort`` names (a key of :data:`BOARD_ORDERS`; "" leaves
    them newest first), the newest first among equals.

    Each reads a column, from the tenant's index on it: ``turns`` (moves recorded, both sides'),
    ``cost`` (of deciding our moves), and ``surplus`` and ``share`` (:class:`negotiations.score.Score`
    of the deal, stored as it settled: :func:`negotiations.services.recording.score_save`), rows
    without one last either way. Raises ``ValueError`` for any other ``sort``.
    """
    if not sort:
        return rows
    if sort not in BOARD_ORDERS:
        raise ValueError(f"{sort!r} is not one of the board's orders ({', '.join(BOARD_ORDERS)})")
    key = sort.removeprefix("-")
    descending = sort.startswith("-")
    column = F("turns_recorded" if key == "turns" else key)
    # NULLS LAST spelled out only where a column has nulls: the indexes of the others are plain.
    nulls_last = True if key in ("surplus", "share") else None
    by = column.desc(nulls_last=nulls_last) if descending else column.asc(nulls_last=nulls_last)
    return rows.order_by(by, "-created_at", "-pk")
