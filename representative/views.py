"""Dashboard pages of the representative face. Thin.

* the requests visitors left with the intake tool;
* for an agent's operators (:data:`parley.roles.OPERATE`; anyone else gets a 403, another
  tenant's agent or document is a 404): its grounding documents.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views import View
from django.views.generic import ListView, TemplateView, UpdateView

from agents.models import Agent
from agents.pages import AgentPageMixin
from parley.pages import TenantMixin, TooLargeFormMixin
from representative import documents, selectors
from representative.forms import GroundingDocumentForm
from representative.models import GroundingDocument, IntakeRequest


class IntakeRequestListView(TenantMixin, ListView):
    """The tenant's intake requests, newest first, 50 a page; live (``intake.received``).

    Owners and operators see all of them, and which agents cannot take
    requests (their intake owner is not set); an agent's intake owner sees the
    requests addressed to them. Anyone else gets a 403; another tenant is a 404.
    """

    template_name = "representative/intake_list.html"
    fragment_template_name = "representative/_intake_list.html"
    context_object_name = "intake_requests"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[IntakeRequest]:
        rows = selectors.intake_requests_for(membership=self.membership)
        if rows is None:
            raise PermissionDenied("Only an intake owner, an owner or an operator can see intake requests.")
        return rows

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["unconfigured"] = selectors.agents_without_intake(membership=self.membership)
        return context


class GroundingDocumentsView(TooLargeFormMixin, AgentPageMixin, TemplateView):
    """The agent's grounding documents, by title; POST a new one (title, text). A document too large
    to send is refused at its form (:class:`parley.pages.TooLargeFormMixin`)."""

    template_name = "representative/documents.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.setdefault("form", GroundingDocumentForm(agent=self.agent))
        context["documents"] = GroundingDocument.objects.for_tenant(self.tenant).filter(agent=self.agent)
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        form = GroundingDocumentForm(request.POST, agent=self.agent)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form))
        document = documents.grounding_document_create(agent=self.agent, **form.cleaned_data)
        messages.success(request, f"Added the document “{document.title}”.")
        return redirect("representative:documents", tenant=self.tenant.slug, pk=self.agent.pk)


class GroundingDocumentMixin(AgentPageMixin):
    """A page about one grounding document of the tenant, the URL's ``pk``; its agent is the page's."""

    @cached_property
    def document(self) -> GroundingDocument:
        """The document; another tenant's (or none) is a 404."""
        rows = GroundingDocument.objects.for_tenant(self.tenant).select_related("agent")
        return get_object_or_404(rows, pk=self.kwargs["pk"])

    @cached_property
    def agent(self) -> Agent:
        return self.document.agent


class GroundingDocumentEditView(TooLargeFormMixin, GroundingDocumentMixin, UpdateView):
    """Change one grounding document's title or text (too large to send: refused at the form)."""

    template_name = "representative/document_form.html"
    form_class = GroundingDocumentForm
    context_object_name = "document"

    def get_object(self, queryset: QuerySet[GroundingDocument] | None = None) -> GroundingDocument:
        return self.document

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "agent": self.agent}

    def form_valid(self, form: GroundingDocumentForm) -> HttpResponse:
        document = documents.grounding_document_update(document=self.document, values=form.cleaned_data)
        messages.success(self.request, f"Saved the document “{document.title}”.")
        return redirect(self.get_success_url())

    def get_success_url(self) -> str:
        return reverse("representative:documents", kwargs={"tenant": self.tenant.slug, "pk": self.agent.pk})


class GroundingDocumentDeleteView(GroundingDocumentMixin, View):
    """POST: delete one grounding document, then back to its agent's documents."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        document = self.document
        documents.grounding_document_delete(document=document)
        messages.success(request, f"Deleted the document “{document.title}”.")
        return redirect("representative:documents", tenant=self.tenant.slug, pk=self.agent.pk)
