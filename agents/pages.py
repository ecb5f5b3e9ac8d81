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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string

from agents import selectors
from agents.forms import AnswerForm, ApprovalForm
from agents.models import Agent, Question
from parley.models import Membership, Tenant
from parley.pages import TenantMixin
from parley.roles import OPERATE

# How many of the latest runs the inbox lists; the runs page lists them all, a page at a time.
INBOX_RUNS = 20


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON, for a ``<pre>``."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def with_arguments_shown(questions: QuerySet[Question]) -> list[Question]:
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
    """One open question or approval in the inbox, whether the member may answer it, and the
    negotiations it came from."""

    question: Question
    can_answer: bool
    waiting: list[Waiting]


def inbox_items(*, tenant: Tenant, membership: Membership) -> list[InboxItem]:
    """The member's open questions (:func:`selectors.open_questions_for`), newest first, each with the
    negotiations waiting on the party under its run's thread; a fixed number of queries."""
    questions = with_arguments_shown(selectors.open_questions_for(tenant=tenant, membership=membership))
    waiting = selectors.waiting_on_party(
        tenant=tenant, pairs={(q.run.agent_id, q.run.intent_id) for q in questions}
    )
    return [
        InboxItem(
            question=q,
            can_answer=selectors.can_answer_as(membership=membership, principal_id=q.run.agent.principal_id),
            waiting=[
                Waiting(n, move, term_pairs(move.terms if move is not None else None))
                for n, move in waiting.get((q.run.agent_id, q.run.intent_id), [])
            ],
        )
        for q in questions
    ]


@dataclass(frozen=True)
class ParkedItem:
    """Something waiting on the party with a question of its own, outside any run (an inbound
    negotiation parked for guidance), and whether the member may answer it."""

    waiting: Waiting
    can_answer: bool


def parked_items(*, membership: Membership) -> list[ParkedItem]:
    """What waits on the parties the member sees with a question of its own
    (:func:`selectors.parked_for`), each with the counterparty's last move."""
    return [
        ParkedItem(
            waiting=Waiting(n, move, term_pairs(move.terms if move is not None else None)),
            can_answer=selectors.can_answer_as(membership=membership, principal_id=n.agent.principal_id),
        )
        for n, move in selectors.parked_for(membership=membership)
    ]


def inbox_context(*, tenant: Tenant, membership: Membership) -> dict[str, Any]:
    """What the inbox's live regions show the member: their open questions (those of runs, then those
    parked on their own) and latest runs."""
    items = inbox_items(tenant=tenant, membership=membership)
    parked = parked_items(membership=membership)
    return {
        "items": items,
        "parked": parked,
        "open_count": len(items) + len(parked),
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
