"""Dashboard pages of the agent loop: the party's inbox, questions and approvals, runs and agents. Thin."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views import View
from django.views.generic import DetailView, TemplateView

from agents import selectors, services, tools
from agents.forms import AnswerForm, ApprovalForm, RunStartForm, SystemMessagePreviewForm
from agents.instructions import system_message
from agents.models import Agent, Intent, Question, Run
from parley.views import TenantMixin

# What the preview calls an intent when the agent has none and nothing was typed.
PLACEHOLDER_INTENT = "(the intent of the run goes here)"


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


class InboxView(TenantMixin, TemplateView):
    """The party's open questions and approvals and their latest runs; ``?fragment=1`` gives the live
    regions alone."""

    template_name = "agents/inbox.html"
    fragment_template_name = "agents/_inbox.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["questions"] = with_arguments_shown(
            selectors.open_questions_for(tenant=self.tenant, user=self.request.user)
        )
        context["runs"] = selectors.runs_for(tenant=self.tenant, user=self.request.user)
        # Every question listed is of one of the user's own agents: they ask for this user.
        context["can_answer"] = selectors.can_answer_as(
            membership=self.membership, principal_id=self.request.user.pk
        )
        return context


class QuestionAnswerView(TenantMixin, View):
    """POST ``answer`` to a question: records it and resumes the run in a worker.

    Redirects to the run's page, which says what happened: the answer sent, or
    why it was refused (answered before, empty, the run stopped) with nothing
    changed. Another tenant's question is a 404; a member who may not answer
    for the agent (a viewer, another party) gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        question = get_object_or_404(selectors.questions_of(tenant=self.tenant), pk=pk)
        form = AnswerForm(request.POST)
        if not form.is_valid():
            messages.error(request, form_errors(form))
        else:
            try:
                services.question_answer(
                    question=question, answer=form.cleaned_data["answer"], user=self.membership.user
                )
            except services.NotAllowed as exc:
                raise PermissionDenied(str(exc)) from exc
            except services.RunError as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, "Answer sent. Your agent carries on.")
        return redirect("agents:run", tenant=tenant, pk=question.run_id)


class ApprovalDecideView(TenantMixin, View):
    """POST ``decision`` (``approve`` or ``reject``) and an optional ``reason`` on an approval.

    Approving runs the tool with the arguments shown, in a worker; rejecting
    gives the model ``rejected: <reason>``. Redirects to the run's page, which
    says what happened or why nothing did (decided before, the run stopped).
    Another tenant's approval is a 404; a member who may not act for the agent
    gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        question = get_object_or_404(selectors.questions_of(tenant=self.tenant), pk=pk)
        form = ApprovalForm(request.POST)
        if not form.is_valid():
            messages.error(request, form_errors(form))
        else:
            approve = form.cleaned_data["decision"] == "approve"
            try:
                services.approval_decide(
                    question=question,
                    approve=approve,
                    reason=form.cleaned_data["reason"],
                    user=self.membership.user,
                )
            except services.NotAllowed as exc:
                raise PermissionDenied(str(exc)) from exc
            except services.RunError as exc:
                messages.error(request, str(exc))
            else:
                if approve:
                    messages.success(request, f"Approved. Your agent calls {question.tool_name}.")
                else:
                    messages.success(request, "Rejected. Your agent carries on without it.")
        return redirect("agents:run", tenant=tenant, pk=question.run_id)


class RunDetailView(TenantMixin, DetailView):
    """A run: status, usage and limits, its questions and approvals (with their forms while open),
    its result, the runs it called, its model retries and fallbacks, and its steps."""

    template_name = "agents/run.html"
    fragment_template_name = "agents/_run.html"
    context_object_name = "run"

    def get_queryset(self) -> QuerySet[Run]:
        return Run.objects.for_tenant(self.tenant).select_related("agent", "intent", "parent__agent")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        run: Run = self.object
        can_answer = selectors.can_answer_for(membership=self.membership, agent=run.agent)
        context.update(
            run_messages=selectors.run_messages(run=run),
            questions=with_arguments_shown(selectors.run_questions(run=run)),
            can_answer=can_answer,
            ended=run.status in Run.ENDED,
            can_cancel=can_answer and run.status not in Run.ENDED,
            children=selectors.run_children(run=run),
            timeline=selectors.run_timeline(run=run),
            currency=selectors.run_currency(run=run),
            output_schema_json=None if run.output_schema is None else pretty_json(run.output_schema),
            output_data_json=None if run.output_data is None else pretty_json(run.output_data),
        )
        return context


class RunCancelView(TenantMixin, View):
    """POST: cancel an active run, then back to its page, which says it was cancelled or why not.

    Another tenant's run is a 404; a member who may not act for the agent gets a 403.
    """

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        run = get_object_or_404(Run.objects.for_tenant(self.tenant), pk=pk)
        try:
            services.run_cancel(run=run, user=self.membership.user)
        except services.NotAllowed as exc:
            raise PermissionDenied(str(exc)) from exc
        except services.RunError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Run cancelled.")
        return redirect("agents:run", tenant=tenant, pk=run.pk)


class AgentDetailView(TenantMixin, DetailView):
    """An agent's identity and configuration, read-only, and the form to start a run of it."""

    template_name = "agents/agent.html"
    context_object_name = "agent"

    def get_queryset(self) -> QuerySet[Agent]:
        return Agent.objects.for_tenant(self.tenant).select_related("principal")

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
        if not selectors.can_answer_for(membership=self.membership, agent=agent):
            raise PermissionDenied("Only the agent's party, an owner or an operator can start its runs.")
        form = RunStartForm(request.POST, agent=agent)
        if form.is_valid():
            try:
                data = form.cleaned_data
                run = services.run_start(
                    agent=agent,
                    intent=data["intent"],
                    statement=data["statement"],
                    task=data["task"],
                    output_schema=data["output_schema"],
                    max_tokens=data["max_tokens"],
                    max_cost=data["max_cost"],
                    deadline=data["deadline"],
                )
            except services.RunError as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, "Run started.")
                return redirect("agents:run", tenant=tenant, pk=run.pk)
        return self.render_to_response(self.get_context_data(form=form))


class SystemMessagePreviewView(TenantMixin, DetailView):
    """The exact system message a run of the agent gets, for a chosen intent at a chosen time.

    GET ``intent`` (one of the agent's; default its latest), ``statement``
    (used when the agent has no intent yet) and ``at`` (ISO 8601; default now).
    Reads only. For the tenant's owners and operators; others get a 403, and
    another tenant's agent is a 404.
    """

    template_name = "agents/system_message.html"
    context_object_name = "agent"

    def get_queryset(self) -> QuerySet[Agent]:
        return Agent.objects.for_tenant(self.tenant)

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
