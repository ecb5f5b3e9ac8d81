"""Dashboard pages of negotiations: the board, one negotiation with its turns, and the party's answer
to an inbound one parked on it. Thin."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django.views.generic import DetailView

from agents.forms import AnswerForm
from agents.pages import form_errors, inbox_context, page_asked, pretty_json, region_response, term_pairs
from agents.selectors import Understood, agent_currency, visible_agents
from agents.services import runs
from negotiations import negotiator, receipts, selectors
from negotiations.forms import BoardFilterForm, ReceiptForm
from negotiations.models import Negotiation, Turn
from negotiations.score import Score
from negotiations.services import parking, signatures
from negotiations.throttles import ReceiptCheckThrottle
from parley.models import Membership
from parley.pages import CountedPaginator, FilteredListView, TenantMixin, is_htmx, url_of_each
from parley.roles import OPERATE


@dataclass(frozen=True)
class TurnView:
    """A turn, its terms as :func:`term_pairs`, and the ``seq`` of the turn whose offer it accepts
    (None when it accepts none, or an offer id no turn of the negotiation made)."""

    turn: Turn
    terms: list[tuple[str, str]]
    accepts_seq: int | None


@dataclass(frozen=True)
class BoardRow:
    """A row of the board: the negotiation, its :class:`Score` and the ``href`` of its page."""

    negotiation: Negotiation
    score: Score
    href: str


@dataclass(frozen=True)
class SortLink:
    """A sortable column's heading: the ``href`` that sorts by it (descending first, then flipping
    what is shown) and its ``aria_sort`` ("ascending", "descending", or "none" when another order is)."""

    href: str
    aria_sort: str


class NegotiationListView(FilteredListView):
    """The board: the tenant's negotiations, both directions, newest first, 50 a page, each scored
    (:func:`selectors.negotiation_score`).

    GET filters (all optional, see :class:`BoardFilterForm`): ``agent`` and
    ``intent`` (ids of the tenant's own), ``status``, ``direction`` and
    ``counterparty`` (part of a name or URL); ``sort`` orders the rows by surplus,
    share, turns or cost (:func:`selectors.board_sorted`), and the columns'
    headings link to it. ``?fragment=1`` renders the live region alone.
    """

    template_name = "negotiations/list.html"
    fragment_template_name = "negotiations/_list.html"
    context_object_name = "negotiations"

    def filter_form(self) -> BoardFilterForm:
        return BoardFilterForm(
            self.request.GET, tenant=self.tenant, agents=visible_agents(membership=self.membership)
        )

    def rows(self, sort: str = "", **filters: Any) -> QuerySet[Negotiation]:
        # The order is no filter: get_queryset applies it to what the filters select.
        return selectors.board(tenant=self.tenant, **filters).filter(
            agent__in=visible_agents(membership=self.membership)
        )

    def get_queryset(self) -> Any:
        selected = super().get_queryset()
        sort = self.filters.cleaned_data.get("sort", "") if self.filters.is_valid() else ""
        return selectors.board_sorted(selected, sort)

    def get_paginator(
        self,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
        **kwargs: Any,
    ) -> Paginator[Any]:
        # The rows counted once with the settled among them, for the caption and the live announcement.
        self.counts = selectors.board_counts(self.selected)
        return CountedPaginator(
            queryset,
            per_page,
            count=self.counts.total,
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
            **kwargs,
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        query = self.filters.query()
        sort = query.pop("sort", "") if self.filters.is_valid() else ""
        links = {}
        for key in ("surplus", "share", "turns", "cost"):
            shown = {f"-{key}": "descending", key: "ascending"}.get(sort, "none")
            href = f"?{urlencode({**query, 'sort': key if sort == f'-{key}' else f'-{key}'})}"
            links[key] = SortLink(href, shown)
        detail = url_of_each("negotiations:detail", tenant=self.tenant.slug)
        context.update(
            settled_count=self.counts.settled,
            filtered=bool(query),
            rows=[BoardRow(n, selectors.negotiation_score(n), detail(n.pk)) for n in context["negotiations"]],
            board_url=reverse("negotiations:list", kwargs={"tenant": self.tenant.slug}),
            sort_links=links,
            order=selectors.BOARD_ORDERS.get(sort, "newest first").lower(),
        )
        return context


def visible_negotiations(membership: Membership) -> QuerySet[Negotiation]:
    """The negotiations of the agents the member sees (:func:`agents.selectors.visible_agents`): another
    tenant's, or another party's, are a 404."""
    return Negotiation.objects.for_tenant(membership.tenant_id).filter(
        agent__in=visible_agents(membership=membership)
    )


class NegotiationPageMixin(TenantMixin):
    """One negotiation of the tenant, if the member sees its agent; else a 404."""

    context_object_name: str | None = "negotiation"

    def get_queryset(self) -> QuerySet[Negotiation]:
        return visible_negotiations(self.membership).select_related("agent", "intent", "settlement", "batch")


class NegotiationDetailView(NegotiationPageMixin, DetailView):
    """One negotiation: its header with what deciding our moves cost in all, the chart of the offers
    over the turns (:func:`selectors.negotiation_chart`, with our limit and aspiration: every member
    who sees the page is our side, see :func:`visible_negotiations`) and the table of them, every
    turn in order (ours with what deciding it cost, in the agent's model's currency), the
    settlement, if it has one, and the score (:func:`selectors.negotiation_score`). Owners and
    operators get a link to the decision prompt."""

    template_name = "negotiations/detail.html"
    fragment_template_name = "negotiations/_detail.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        settlement = getattr(self.object, "settlement", None)
        turns = list(selectors.negotiation_turns(self.object))
        # The first turn to make an offer id is the one an accept binds to (docs/wire-format.md#offers).
        offers: dict[str, int] = {}
        for t in turns:
            if t.offer_id:
                offers.setdefault(t.offer_id, t.seq)
        score = selectors.negotiation_score(self.object, turns=turns)
        chart = selectors.negotiation_chart(self.object, turns=turns, score=score)
        context.update(
            turns=[TurnView(t, term_pairs(t.terms), offers.get(t.accepts_offer_id)) for t in turns],
            score=score,
            chart=chart,
            chart_description=chart.description(
                us=self.object.agent.name,
                them=self.object.counterparty_name or "The counterparty",
                unit=score.currency,
            )
            if chart is not None
            else "",
            offers=selectors.negotiation_offers(turns, term=score.term),
            settlement=settlement,
            settlement_terms=term_pairs(settlement.terms) if settlement else [],
            disputed=term_pairs(settlement.disputed) if settlement else [],
            currency=agent_currency(agent=self.object.agent),
            can_operate=self.membership.role in OPERATE,
            has_receipt=settlement is not None and settlement.signed_settlement is not None,
        )
        return context


class ReceiptDownloadView(NegotiationPageMixin, View):
    """GET: our receipt of the negotiation's signed settlement, as a JSON file to hand to anyone
    (:func:`signatures.receipt_of`); a 404 when it has none, or is another tenant's or party's."""

    def get(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        negotiation = get_object_or_404(self.get_queryset(), pk=pk)
        receipt = signatures.receipt_for(negotiation)
        if receipt is None:
            raise Http404("This negotiation has no signed settlement.")
        response = JsonResponse(receipt, json_dumps_params={"indent": 2, "ensure_ascii": False})
        response["Content-Disposition"] = f'attachment; filename="receipt-{negotiation.pk}.json"'
        return response


class DecisionPromptView(NegotiationPageMixin, DetailView):
    """The prompt of the negotiation's next decision as its agent's chat model would get it: the
    system message, the record message and the move tool's JSON Schema
    (:func:`negotiations.selectors.decision_prompt`). Reads only. For owners and operators, as the
    system-message preview; others get a 403, and another tenant's negotiation is a 404.
    """

    allowed_roles = OPERATE
    template_name = "negotiations/prompt.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        try:
            prompt = selectors.decision_prompt(self.object)
        except negotiator.NegotiatorError as exc:
            context["error"] = str(exc)
            return context
        context.update(prompt=prompt, parameters_json=pretty_json(prompt.tool.parameters))
        return context


# When an inbound negotiation's next move is decided: at their next message, or, where they
# registered a push notification config on the Task, at once (the answered hooks).
WHEN_THEY_WRITE = "when they next write, or at once if they asked to be notified"


def guidance_kept(understood: Understood | None) -> str:
    """What the party is told once its answer to an inbound negotiation is kept as standing guidance:
    what was understood of it (:func:`selectors.last_answer_understood`), and when it is acted on.
    Nothing has reached the counterparty yet."""
    if understood is None:
        return f"Answer saved. Your agent answers them with it {WHEN_THEY_WRITE}."
    if understood.limit is None:
        return f"{understood.message} Your agent will ask you again {WHEN_THEY_WRITE}."
    return f"{understood.message} Your agent answers them with it {WHEN_THEY_WRITE}."


class NegotiationAnswerView(TenantMixin, View):
    """POST ``answer`` to an inbound negotiation waiting on its party: it becomes the negotiation's
    standing guidance (:func:`parking.negotiation_guidance_give`).

    An htmx request gets the inbox's questions region freshly rendered, the
    outcome in a ``role="status"`` element (:func:`guidance_kept`: what was
    understood, and when it is acted on); a plain one is redirected to the
    negotiation's page, which says what happened. Refused with nothing changed,
    saying why: empty, not waiting, answered before. Another tenant's or
    another party's negotiation is a 404; a member who may not answer for the
    agent (a viewer) gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        negotiation = get_object_or_404(visible_negotiations(self.membership), pk=pk)
        form = AnswerForm(request.POST)
        if not form.is_valid():
            messages.error(request, form_errors(form))
        else:
            try:
                answered = parking.negotiation_guidance_give(
                    negotiation=negotiation, answer=form.cleaned_data["answer"], user=self.membership.user
                )
            except runs.NotAllowed as exc:
                raise PermissionDenied(str(exc)) from exc
            except parking.GuidanceRefused as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, guidance_kept(selectors.last_answer_understood(answered)))
        if not is_htmx(request):
            return redirect("negotiations:detail", tenant=self.tenant.slug, pk=negotiation.pk)
        context = inbox_context(tenant=self.tenant, membership=self.membership, page=page_asked(request))
        return region_response(
            request, "agents/_questions.html", context, tenant=self.tenant, membership=self.membership
        )


class ReceiptVerifyView(View):
    """The page anyone may use to check a settlement receipt: paste it, and it says whether both
    signatures hold and, for each side, why not (:func:`signatures.receipt_check`, which fetches the
    key sets the receipt's parties name). No login: a third party holds no account here."""

    template_name = "negotiations/receipt_verify.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, {"form": ReceiptForm()})

    def post(self, request: HttpRequest) -> HttpResponse:
        form = ReceiptForm(request.POST)
        context: dict[str, Any] = {"form": form}
        throttle = ReceiptCheckThrottle()
        if not throttle.allow_page(request):
            wait = math.ceil(throttle.wait() or 1)
            form.add_error("receipt", f"Too many receipt checks from your address: try again in {wait} s.")
            response = render(request, self.template_name, context, status=429)
            response["Retry-After"] = str(wait)
            return response
        if form.is_valid():
            try:
                context["check"] = signatures.receipt_check(form.cleaned_data["receipt"])
            except receipts.ReceiptError as exc:
                form.add_error("receipt", str(exc))
        return render(request, self.template_name, context, status=200 if form.is_valid() else 400)
