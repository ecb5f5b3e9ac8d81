"""Dashboard pages of the agent loop: the party's inbox, answering, runs and agents. Thin."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views import View
from django.views.generic import DetailView, TemplateView

from agents import selectors, services
from agents.models import Agent, Run
from parley.views import TenantMixin


class AnswerForm(forms.Form):
    answer = forms.CharField(
        max_length=4000,
        strip=True,
        error_messages={"required": "The answer is empty."},
    )


class InboxView(TenantMixin, TemplateView):
    """The party's open questions and their latest runs; ``?fragment=1`` gives the live regions alone."""

    template_name = "agents/inbox.html"
    fragment_template_name = "agents/_inbox.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["questions"] = selectors.open_questions_for(tenant=self.tenant, user=self.request.user)
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
            messages.error(request, " ".join(str(e) for e in form.errors["answer"]))
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


class RunDetailView(TenantMixin, DetailView):
    """A run: its status, its questions (with the answer form while open), its result and its steps."""

    template_name = "agents/run.html"
    fragment_template_name = "agents/_run.html"
    context_object_name = "run"

    def get_queryset(self) -> QuerySet[Run]:
        return Run.objects.for_tenant(self.tenant).select_related("agent", "intent")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["run_messages"] = selectors.run_messages(run=self.object)
        context["questions"] = selectors.run_questions(run=self.object)
        context["can_answer"] = selectors.can_answer_for(membership=self.membership, agent=self.object.agent)
        return context


class AgentDetailView(TenantMixin, DetailView):
    """An agent's identity and configuration."""

    template_name = "agents/agent.html"
    context_object_name = "agent"

    def get_queryset(self) -> QuerySet[Agent]:
        return Agent.objects.for_tenant(self.tenant).select_related("principal")
