"""Dashboard pages of the agent loop: the party's inbox, questions and approvals, runs and agents. Thin."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.generic import DetailView, TemplateView

from agents import selectors, tools
from agents.forms import (
    AgentChoiceForm,
    AnswerForm,
    ApprovalForm,
    RunFilterForm,
    RunStartForm,
    SystemMessagePreviewForm,
)
from agents.instructions import PLACEHOLDER_INTENT, system_message
from agents.models import Agent, Intent, Question, Run
from agents.pages import (
    form_errors,
    inbox_context,
    page_asked,
    pretty_json,
    region_response,
    with_arguments_shown,
)
from agents.services import questions, runs
from parley import roles
from parley.models import Membership
from parley.pages import FilteredListView, TenantMixin

# The id of a run page's region: an answer whose htmx form targets it gets that region back
# (any other target is the inbox's questions region).
RUN_REGION = "run"
# The fields of the start form that keep what was typed when the member only switches agents.
TYPED_FIELDS = ("statement", "task", "output_schema", "max_tokens", "max_cost", "deadline")


def run_context(*, run: Run, membership: Membership) -> dict[str, Any]:
    """What a run's page shows the member (``run`` with its agent, intent and parent's agent loaded)."""
    can_answer = selectors.can_answer_for(membership=membership, agent=run.agent)
    asked = with_arguments_shown(selectors.run_questions(run=run))
    return {
        "run": run,
        "open_questions": [q for q in asked if q.is_open],
        "steps": selectors.run_steps(run=run),
        "can_answer": can_answer,
        "ended": run.status in Run.ENDED,
        "can_cancel": can_answer and run.status not in Run.ENDED,
        "children": selectors.run_children(run=run),
        "currency": selectors.agent_currency(agent=run.agent),
        "output_schema_json": None if run.output_schema is None else pretty_json(run.output_schema),
        "output_data_json": None if run.output_data is None else pretty_json(run.output_data),
    }


def run_of(membership: Membership, pk: Any) -> Run:
    """The run ``pk``, if the member sees it (:func:`selectors.visible_runs`), with what its page shows
    loaded; another tenant's, or another party's, is a 404."""
    visible = selectors.visible_runs(membership=membership)
    return get_object_or_404(visible.select_related("agent", "intent", "parent__agent"), pk=pk)


def already_decided(refused: questions.QuestionAlreadyAnswered, *, agent: Agent) -> str:
    """Why a question takes no answer (:meth:`questions.QuestionAlreadyAnswered.said`), when in
    ``agent``'s timezone."""
    zone = agent.timezone
    when = f"{timezone.localtime(refused.question.answered_at, ZoneInfo(zone)):%Y-%m-%d %H:%M} ({zone})"
    return refused.said(when=when)


def answer_sent(understood: selectors.Understood | None) -> str:
    """What the party is told once its answer to a run's question is recorded: that the run goes on,
    and what was understood of the answer (:func:`selectors.answer_understood`) — a limit is asked
    for again at once when the answer gave no usable one."""
    said = "Answer sent. Your agent carries on."
    if understood is None:
        return said
    again = "" if understood.limit is not None else " Your agent will ask you again."
    return f"{said} {understood.message}{again}"


class InboxView(TenantMixin, TemplateView):
    """The open questions and approvals of the parties the member answers for, with the negotiations
    they came from, and the latest runs; ``?fragment=1`` gives the live regions alone.

    A principal sees their own agents'; owners and operators every party's (they
    may answer on its behalf); viewers every party's, read-only.
    """

    template_name = "agents/inbox.html"
    fragment_template_name = "agents/_inbox.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(
            inbox_context(tenant=self.tenant, membership=self.membership, page=page_asked(self.request))
        )
        page = context["page_obj"].number
        context["live_src"] = f"{self.request.path}?fragment=1" + (f"&page={page}" if page > 1 else "")
        return context


class QuestionActionView(TenantMixin, View):
    """Base of the views that answer or decide a question: what the member sees afterwards.

    An htmx request gets the region its form swaps, freshly rendered (the
    inbox's questions, or the run's page when its ``hx-target`` is the run),
    with the outcome in a ``role="status"`` element; a plain one is redirected
    to the run's page, which says what happened.
    """

    def done(self, question: Question) -> HttpResponse:
        request = self.request
        if not request.htmx:  # type: ignore[attr-defined]
            return redirect("agents:run", tenant=self.tenant.slug, pk=question.run_id)
        if request.htmx.target == RUN_REGION:  # type: ignore[attr-defined]
            run = run_of(self.membership, question.run_id)
            context = run_context(run=run, membership=self.membership)
            template = "agents/_run.html"
        else:
            context = inbox_context(tenant=self.tenant, membership=self.membership, page=page_asked(request))
            template = "agents/_questions.html"
        return region_response(request, template, context, tenant=self.tenant, membership=self.membership)


class QuestionAnswerView(QuestionActionView):
    """POST ``answer`` to a question: records it and resumes the run in a worker.

    Then see :class:`QuestionActionView`: the answer sent and what was
    understood of it (:func:`answer_sent`), or why it was refused with nothing
    changed (answered before — by whom and when —, empty, the run stopped).
    Another tenant's or another party's question is a 404; a member who may not
    answer for the agent (a viewer) gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        question = get_object_or_404(selectors.questions_of(membership=self.membership), pk=pk)
        form = AnswerForm(request.POST)
        if not form.is_valid():
            messages.error(request, form_errors(form))
        else:
            try:
                answered = questions.question_answer(
                    question=question, answer=form.cleaned_data["answer"], user=self.membership.user
                )
            except runs.NotAllowed as exc:
                raise PermissionDenied(str(exc)) from exc
            except questions.QuestionAlreadyAnswered as exc:
                messages.error(request, already_decided(exc, agent=question.run.agent))
            except runs.RunError as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, answer_sent(answered.understood))
        return self.done(question)


class ApprovalDecideView(QuestionActionView):
    """POST ``decision`` (``approve`` or ``reject``) and an optional ``reason`` on an approval.

    Approving runs the tool with the arguments shown, in a worker; rejecting
    gives the model ``rejected: <reason>``. Then see :class:`QuestionActionView`:
    what happened, or why nothing did (decided before — by whom and when —,
    the run stopped). Another tenant's or another party's approval is a 404;
    a viewer gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        question = get_object_or_404(selectors.questions_of(membership=self.membership), pk=pk)
        form = ApprovalForm(request.POST)
        if not form.is_valid():
            messages.error(request, form_errors(form))
        else:
            approve = form.cleaned_data["decision"] == "approve"
            try:
                questions.approval_decide(
                    question=question,
                    approve=approve,
                    reason=form.cleaned_data["reason"],
                    user=self.membership.user,
                )
            except runs.NotAllowed as exc:
                raise PermissionDenied(str(exc)) from exc
            except questions.QuestionAlreadyAnswered as exc:
                messages.error(request, already_decided(exc, agent=question.run.agent))
            except runs.RunError as exc:
                messages.error(request, str(exc))
            else:
                if approve:
                    messages.success(request, f"Approved. Your agent calls {question.tool_name}.")
                else:
                    messages.success(request, "Rejected. Your agent carries on without it.")
        return self.done(question)


class RunListView(FilteredListView):
    """The runs the member sees, newest first, 50 a page: every party's for owners, operators and
    viewers; a principal's own agents' (and the runs those called) for a principal.

    GET filters (all optional, see :class:`RunFilterForm`): ``agent``, ``intent``
    and ``status``. ``?fragment=1`` renders the live region alone.
    """

    template_name = "agents/run_list.html"
    fragment_template_name = "agents/_run_list.html"
    context_object_name = "runs"

    def filter_form(self) -> RunFilterForm:
        return RunFilterForm(
            self.request.GET, tenant=self.tenant, agents=selectors.visible_agents(membership=self.membership)
        )

    def rows(self, **filters: Any) -> QuerySet[Run]:
        return selectors.runs_list(membership=self.membership, **filters)


class RunDetailView(TenantMixin, DetailView):
    """A run: status, usage and limits, the questions waiting on the party (with their forms), its
    result, the runs it called, and its timeline step by step (see :func:`selectors.run_steps`)."""

    template_name = "agents/run.html"
    fragment_template_name = "agents/_run.html"
    context_object_name = "run"

    def get_object(self, queryset: QuerySet[Run] | None = None) -> Run:
        return run_of(self.membership, self.kwargs["pk"])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(run_context(run=self.object, membership=self.membership))
        return context


class RunCancelView(TenantMixin, View):
    """POST: cancel an active run. An htmx request gets the run's region freshly rendered with the
    outcome in a ``role="status"`` element; a plain one goes back to the run's page, which says it
    was cancelled or why not.

    Another tenant's or another party's run is a 404; a viewer gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        run = run_of(self.membership, pk)
        try:
            runs.run_cancel(run=run, user=self.membership.user)
        except runs.NotAllowed as exc:
            raise PermissionDenied(str(exc)) from exc
        except runs.RunError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Run cancelled.")
        if not request.htmx:  # type: ignore[attr-defined]
            return redirect("agents:run", tenant=tenant, pk=run.pk)
        context = run_context(run=run_of(self.membership, pk), membership=self.membership)
        return region_response(
            request, "agents/_run.html", context, tenant=self.tenant, membership=self.membership
        )


class AgentDetailView(TenantMixin, DetailView):
    """An agent's identity and configuration, read-only, and the form to start a run of it."""

    template_name = "agents/agent.html"
    context_object_name = "agent"

    def get_queryset(self) -> QuerySet[Agent]:
        return selectors.visible_agents(membership=self.membership).select_related("principal")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        agent: Agent = self.object
        can_start = selectors.can_answer_for(membership=self.membership, agent=agent)
        context.update(
            can_start=can_start,
            can_operate=selectors.can_operate(membership=self.membership, agent=agent),
            models=selectors.agent_models(agent=agent),
            agent_tools=selectors.agent_tools(agent=agent),
            default_tools=tools.DEFAULT_TOOLS,
        )
        if can_start:
            context.setdefault("form", RunStartForm(agent=agent))
        return context


def start_run(*, agent: Agent, form: RunStartForm, membership: Membership) -> Run:
    """Start a run of ``agent`` for the member from a valid :class:`RunStartForm`. Raises what
    :func:`runs.run_start` raises (:class:`runs.NotAllowed` for a member who may not start
    it; :class:`runs.RunError`: busy thread, unusable limit)."""
    data = form.cleaned_data
    return runs.run_start(
        user=membership.user,
        agent=agent,
        intent=data["intent"],
        statement=data["statement"],
        task=data["task"],
        output_schema=data["output_schema"],
        max_tokens=data["max_tokens"],
        max_cost=data["max_cost"],
        deadline=data["deadline"],
    )


class RunStartView(AgentDetailView):
    """POST the start form: a run of the agent on a chosen or new intent, then its page.

    Invalid input re-renders the agent page with each error at its field; a
    refused start (the thread is busy, a limit is unusable) re-renders it with
    the service's message and nothing created. Another tenant's agent is a
    404; a member who may not act for the agent gets a 403.
    """

    http_method_names = ["post"]

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        self.object = agent = self.get_object()
        form = RunStartForm(request.POST, agent=agent)
        try:
            # Asked first: a member who may not start gets the 403 whatever they posted.
            runs.require_may_start(agent=agent, user=self.membership.user)
            if form.is_valid():
                run = start_run(agent=agent, form=form, membership=self.membership)
                messages.success(request, "Run started.")
                return redirect("agents:run", tenant=tenant, pk=run.pk)
        except runs.NotAllowed as exc:
            raise PermissionDenied(str(exc)) from exc
        except runs.RunError as exc:
            messages.error(request, str(exc))
        return self.render_to_response(self.get_context_data(form=form))


class StartWorkView(TenantMixin, TemplateView):
    """Start work: choose one of the agents the member may act for, an intent of it (or write a new
    one), the task and optional limits, and start a run (:func:`runs.run_start`), then its page.

    GET ``agent`` preselects an agent (default: the first by name); asked by
    htmx, it answers the chosen agent's intent choices alone (the select reloads
    them when the agent changes). POST ``agent`` and the fields of
    :class:`RunStartForm`; ``action=choose-agent`` (the no-JS way to switch
    agents) re-renders the page for that agent keeping what was typed and
    starts nothing. Invalid input shows each error at its field; a refused start
    (a busy thread, an unusable limit) the service's message; in both, nothing
    is created. Viewers get a 403.
    """

    template_name = "agents/start.html"
    allowed_roles = roles.ANSWER

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        choice = self.choice_form(request.GET if "agent" in request.GET else None)
        agent = self.chosen(choice)
        form = None if agent is None else RunStartForm(agent=agent)
        if request.htmx and form is not None:  # type: ignore[attr-defined]
            return render(request, "agents/_start_agent_fields.html", {"form": form, "oob": True})
        return self.render_to_response(self.get_context_data(choice=choice, form=form, agent=agent))

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        choice = self.choice_form(request.POST)
        agent = self.chosen(choice)
        if agent is None:
            form = None
        elif not choice.is_valid() or request.POST.get("action") == "choose-agent":
            form = RunStartForm(initial={f: request.POST.get(f, "") for f in TYPED_FIELDS}, agent=agent)
        else:
            form = RunStartForm(request.POST, agent=agent)
            if form.is_valid():
                try:
                    run = start_run(agent=agent, form=form, membership=self.membership)
                except runs.NotAllowed as exc:
                    raise PermissionDenied(str(exc)) from exc
                except runs.RunError as exc:
                    messages.error(request, str(exc))
                else:
                    messages.success(request, "Run started.")
                    return redirect("agents:run", tenant=self.tenant.slug, pk=run.pk)
        return self.render_to_response(self.get_context_data(choice=choice, form=form, agent=agent))

    def choice_form(self, data: Any) -> AgentChoiceForm:
        """The agent select, offering the agents the member may start; it reloads the intents by htmx."""
        choice = AgentChoiceForm(data, agents=selectors.startable_agents(membership=self.membership))
        choice.fields["agent"].widget.attrs.update(
            {
                "hx-get": reverse("agents:start", kwargs={"tenant": self.tenant.slug}),
                "hx-target": "#intent-choice",
                "hx-swap": "outerHTML",
            }
        )
        return choice

    def chosen(self, choice: AgentChoiceForm) -> Agent | None:
        """The agent chosen, else the first the member may start (then shown as chosen); None when
        there is none."""
        if choice.is_bound and choice.is_valid():
            agent: Agent = choice.cleaned_data["agent"]
            return agent
        first = choice.agents.first()
        if first is not None and not choice.is_bound:
            choice.initial["agent"] = first.pk
        return first


class SystemMessagePreviewView(TenantMixin, DetailView):
    """The exact system message a run of the agent gets, for a chosen intent at a chosen time.

    GET ``intent`` (one of the agent's; default its latest), ``statement``
    (used when the agent has no intent yet) and ``at`` (ISO 8601; default now).
    Reads only. For the tenant's owners and operators; others get a 403, and
    another tenant's agent (or, to a principal, another party's) is a 404.
    """

    template_name = "agents/system_message.html"
    context_object_name = "agent"

    def get_queryset(self) -> QuerySet[Agent]:
        return selectors.visible_agents(membership=self.membership)

    def get_object(self, queryset: QuerySet[Agent] | None = None) -> Agent:
        agent: Agent = super().get_object(queryset)
        if not selectors.can_operate(membership=self.membership, agent=agent):
            raise PermissionDenied("Only an owner or an operator can see an agent's system message.")
        return agent

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        agent: Agent = self.object
        latest = selectors.latest_intent(agent=agent)
        data = self.request.GET.copy()
        if latest is not None:
            # Bound to what is shown: the select names the intent the message is built for.
            data.setdefault("intent", str(latest.pk))
        form = SystemMessagePreviewForm(data, agent=agent)
        if form.is_valid():
            intent = form.cleaned_data["intent"] or latest
            context["unsaved_intent"] = intent is None
            if intent is None:
                # Never saved: the preview writes nothing.
                intent = Intent(
                    tenant_id=agent.tenant_id,
                    agent=agent,
                    statement=form.cleaned_data["statement"] or PLACEHOLDER_INTENT,
                )
            at: datetime = form.cleaned_data["at"] or timezone.now()
            context.update(intent=intent, at=at, message=system_message(agent=agent, intent=intent, now=at))
        context.update(form=form, has_intents=latest is not None)
        return context
