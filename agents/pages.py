"""What the agent loop's pages show, built for the views of ``agents`` and of the apps above it.

A view imports no other app's views (docs/layers.md): what two apps' pages
share lives here — the inbox's live regions (the member's open questions with
the negotiations waiting under them, what is parked on the party, the latest
runs), an htmx region answered with the request's messages, and the small
renderings every page of the loop uses (JSON, a move's terms, a one-line
form's errors), and the base of every page about one agent (:class:`AgentPageMixin`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string

from agents import selectors
from agents.forms import AnswerForm, ApprovalForm
from agents.models import Agent, Question
from parley.models import Membership, Tenant
from parley.pages import TenantMixin, url_of_each
from parley.roles import OPERATE

# How many of the latest runs the inbox lists; the runs page lists them all, a page at a time.
INBOX_RUNS = 20
# How many open questions a page of the inbox lists.
INBOX_PAGE = 50


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON, for a ``<pre>``."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def with_arguments_shown(questions: Iterable[Question]) -> list[Question]:
    """The questions, each with ``arguments_json``: what an approval's tool would run with, as JSON."""
    shown = list(questions)
    for q in shown:
        q.arguments_json = pretty_json(q.arguments)  # type: ignore[attr-defined]
    return shown


def form_errors(form: AnswerForm | ApprovalForm) -> str:
    """Every error of a one-line form, as one message (these forms are posted from lists, not re-shown)."""
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


def term_pairs(terms: object) -> list[tuple[str, str]]:
    """``terms`` (a move's or settlement's JSON) as (key, value) pairs sorted by key, for reading.

    Strings show as they are; any other value (number, boolean, null, a nested
    object a peer sent) as compact JSON, so ``true`` and ``450`` read as sent.
    Anything but an object is one pair under the key ``value``; None is no pairs.
    Sorted, as the verdict's canonical form sorts them: Postgres keeps no key order.
    """

    def compact(value: object) -> str:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    if terms is None:
        return []
    if not isinstance(terms, Mapping):
        return [("value", compact(terms))]
    return [(str(k), v if isinstance(v, str) else compact(v)) for k, v in sorted(terms.items())]


@dataclass(frozen=True)
class Waiting:
    """A negotiation parked on the party for guidance — under a question's thread, or with a question
    of its own (:class:`ParkedItem`) — with the counterparty's last move (None before they moved) and
    its terms as pairs."""

    negotiation: Any
    last_move: Any
    terms: list[tuple[str, str]]


@dataclass(frozen=True)
class InboxItem:
    """One open question or approval in the inbox, whether the member may answer it, the negotiations
    it came from, and the ``run_href`` of its run's page."""

    question: Question
    can_answer: bool
    waiting: list[Waiting]
    run_href: str


def inbox_items(*, tenant: Tenant, membership: Membership, questions: list[Question]) -> list[InboxItem]:
    """The member's open ``questions`` (a page of :func:`selectors.open_questions_for`), each with the
    negotiations waiting on the party under its run's thread; a fixed number of queries."""
    questions = with_arguments_shown(questions)
    waiting = selectors.waiting_on_party(
        tenant=tenant, pairs={(q.run.agent_id, q.run.intent_id) for q in questions}
    )
    run_href = url_of_each("agents:run", tenant=tenant.slug)
    return [
        InboxItem(
            question=q,
            can_answer=selectors.can_answer_as(membership=membership, principal_id=q.run.agent.principal_id),
            waiting=[
                Waiting(n, move, term_pairs(move.terms if move is not None else None))
                for n, move in waiting.get((q.run.agent_id, q.run.intent_id), [])
            ],
            run_href=run_href(q.run_id),
        )
        for q in questions
    ]


@dataclass(frozen=True)
class ParkedItem:
    """Something waiting on the party with a question of its own, outside any run (an inbound
    negotiation parked for guidance), and whether the member may answer it."""

    waiting: Waiting
    can_answer: bool


def parked_items(*, membership: Membership, parked: list[tuple[Any, Any]]) -> list[ParkedItem]:
    """What waits on the parties the member sees with a question of its own (a page of
    :func:`selectors.parked_for`'s (negotiation, the counterparty's last move) pairs)."""
    return [
        ParkedItem(
            waiting=Waiting(n, move, term_pairs(move.terms if move is not None else None)),
            can_answer=selectors.can_answer_as(membership=membership, principal_id=n.agent.principal_id),
        )
        for n, move in parked
    ]


class Chained:
    """Lazy lists (:class:`selectors.Pageable`: query sets among them) one after another, as one lazy
    list a :class:`~django.core.paginator.Paginator` cuts: each part counted once (one query), and a
    slice reads only the parts it covers."""

    def __init__(self, parts: Sequence[selectors.Pageable]) -> None:
        self.parts = parts

    @cached_property
    def counts(self) -> list[int]:
        return [part.count() for part in self.parts]

    def count(self) -> int:
        """How many rows all the parts hold."""
        return sum(self.counts)

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, cut: slice) -> list[Any]:
        start, stop = cut.start or 0, self.count() if cut.stop is None else cut.stop
        rows: list[Any] = []
        offset = 0
        for part, size in zip(self.parts, self.counts, strict=True):
            low, high = max(start - offset, 0), min(stop - offset, size)
            if low < high:
                rows.extend(part[low:high])
            offset += size
        return rows


def page_asked(request: HttpRequest) -> str | None:
    """The inbox page ``request`` asks for: its ``page`` parameter, or, for an htmx form posted from
    the inbox, that of the page it was posted from (so the region comes back at the same page)."""
    if request.method == "GET":
        return request.GET.get("page")
    current = getattr(getattr(request, "htmx", None), "current_url", None)
    if not current:
        return None
    return parse_qs(urlsplit(current).query).get("page", [None])[0]


def inbox_context(*, tenant: Tenant, membership: Membership, page: Any = None) -> dict[str, Any]:
    """What the inbox's live regions show the member: their open questions, those of runs (newest
    first) then those parked on their own (oldest first), :data:`INBOX_PAGE` a page (``page``: its
    number as asked, ``page_obj``; an invalid one is the first, one past the end the last), and
    latest runs. A fixed number of queries however many there are."""
    open_items = Chained(
        [
            selectors.open_questions_for(tenant=tenant, membership=membership),
            *selectors.parked_for(membership=membership),
        ]
    )
    # A Paginator asks only count() and slices of what it cuts, which Chained answers.
    shown: Page[Any] = Paginator(cast(Any, open_items), INBOX_PAGE).get_page(page)
    questions = [row for row in shown if isinstance(row, Question)]
    parked = [row for row in shown if not isinstance(row, Question)]
    return {
        "items": inbox_items(tenant=tenant, membership=membership, questions=questions),
        "parked": parked_items(membership=membership, parked=parked),
        "open_count": shown.paginator.count,
        "page_obj": shown,
        "runs": selectors.runs_list(membership=membership)[:INBOX_RUNS],
        "sees_every_party": selectors.sees_every_party(membership),
        "is_viewer": membership.role == Membership.Role.VIEWER,
    }


def region_response(
    request: HttpRequest, template: str, context: dict[str, Any], *, tenant: Tenant, membership: Membership
) -> HttpResponse:
    """An htmx answer: the region ``template`` freshly rendered, and the request's messages swapped
    out of band into the page's ``#action-status`` (outside the live regions, so a live refresh
    right after does not wipe them before they are read)."""
    context = {**context, "tenant": tenant, "membership": membership}
    html = render_to_string(template, context, request) + render_to_string(
        "agents/_action_status.html", {}, request
    )
    return HttpResponse(html)


class AgentPageMixin(TenantMixin):
    """A page about one agent of the tenant, for its operators (the gateway's and the representative
    face's pages too): the agent is the URL's ``pk``, or the agent of the row the URL names (a
    subclass overrides :attr:`agent`)."""

    allowed_roles = OPERATE
    kwargs: dict[str, Any]

    @cached_property
    def agent(self) -> Agent:
        """The agent; another tenant's (or none) is a 404."""
        return get_object_or_404(Agent.objects.for_tenant(self.tenant), pk=self.kwargs["pk"])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["agent"] = self.agent
        return context
