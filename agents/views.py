"""Dashboard pages of the agent loop: the party's inbox, answering, runs and agents. Thin."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views import View
from django.views.generic import DetailView, TemplateView

from agents import selectors, services
from agents.models import Agent, Question, Run
from parley.models import Membership
from parley.views import TenantMixin

ANSWERING_ROLES = (Membership.Role.OWNER, Membership.Role.OPERATOR, Membership.Role.PRINCIPAL)


class AnswerForm(forms.Form):
    answer = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=4000, strip=True)


class InboxView(TenantMixin, TemplateView):
    """The party's open questions (kept live by the socket) and their latest runs."""

    template_name = "agents/inbox.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["questions"] = selectors.open_questions_for(tenant=self.tenant, user=self.request.user)
        context["runs"] = selectors.runs_for(tenant=self.tenant, user=self.request.user)
        context["form"] = AnswerForm()
        return context


class QuestionListView(InboxView):
    """The inbox's live fragments alone, re-rendered when an event arrives."""

    template_name = "agents/_live.html"


class QuestionAnswerView(TenantMixin, View):
    """POST an answer: resumes the run in a worker."""

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        question = get_object_or_404(Question.objects.for_tenant(self.tenant).select_related("run"), pk=pk)
        if self.membership.role not in ANSWERING_ROLES:
            messages.error(request, "Your role cannot answer questions.")
            return redirect("agents:inbox", tenant=tenant)
        form = AnswerForm(request.POST)
        if not form.is_valid():
            messages.error(request, "The answer is empty.")
            return redirect("agents:inbox", tenant=tenant)
        try:
            services.question_answer(question=question, answer=form.cleaned_data["answer"], user=request.user)
        except services.RunError as exc:
            messages.error(request, str(exc))
            return redirect("agents:inbox", tenant=tenant)
        return redirect("agents:run", tenant=tenant, pk=question.run_id)


class RunDetailView(TenantMixin, DetailView):
    """A run with its status and every message of its steps."""

    template_name = "agents/run.html"
    fragment_template_name = "agents/_run.html"
    context_object_name = "run"

    def get_queryset(self) -> QuerySet[Run]:
        return Run.objects.for_tenant(self.tenant).select_related("agent", "intent")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["messages_"] = self.object.messages.order_by("seq")
        context["questions"] = self.object.questions.order_by("created_at")
        return context


class AgentDetailView(TenantMixin, DetailView):
    """An agent's identity and configuration."""

    template_name = "agents/agent.html"
    context_object_name = "agent"

    def get_queryset(self) -> QuerySet[Agent]:
        return Agent.objects.for_tenant(self.tenant)
