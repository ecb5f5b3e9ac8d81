"""Operator pages that configure a tenant's agents, tools and model endpoints. Thin.

Every page but the agents list is for the tenant's owners and operators
(:data:`agents.selectors.OPERATE`; anyone else gets a 403); a row of another
tenant is a 404. The agents list shows each member the agents they see
(:func:`agents.selectors.visible_agents`). A form is saved in one transaction or not at all; saved, the
page redirects with a message, refused, it is shown again with each error at
its field. A new secret is the one thing shown on the response to the POST
itself (never stored where the page could show it again).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import messages
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.generic import CreateView, ListView, UpdateView

from agents import selectors
from agents.config_forms import AgentForm, ModelEndpointForm, TenantModelForm, ToolForm
from agents.configuration import RACED, is_unique_violation
from agents.models import SYSTEM_PROMPT_MAX_LENGTH, Agent, ModelEndpoint, Tool
from parley.views import TenantMixin, TooLargeFormMixin


class OperatorFormMixin(TooLargeFormMixin, TenantMixin):
    """Create or edit one row of the tenant with a :class:`TenantModelForm`, atomically.

    Subclasses say ``saved`` (the success message, formatted with the row) and where to go, and
    may say what to ``shorten`` when a form was too large to send: it is answered (413) with the
    page as a GET shows it and a message at the form (:class:`parley.views.TooLargeFormMixin`).
    """

    allowed_roles = selectors.OPERATE
    saved = "Saved {}."

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_form_kwargs()  # type: ignore[misc]
        kwargs["tenant"] = self.tenant
        return kwargs

    def form_valid(self, form: TenantModelForm) -> HttpResponse:
        try:
            with transaction.atomic():
                self.object = form.save()
        except IntegrityError as exc:
            if not is_unique_violation(exc):
                raise  # the forms check every other constraint: this one is a bug, not a race
            form.add_error(None, RACED)
            return self.form_invalid(form)  # type: ignore[attr-defined]
        messages.success(self.request, self.saved.format(self.object))
        return self.saved_response(form)

    def saved_response(self, form: TenantModelForm) -> HttpResponse:
        return redirect(self.get_success_url())  # type: ignore[attr-defined]


class AgentPageMixin(TenantMixin):
    """A page about one agent of the tenant, for its operators (the gateway's and the representative
    face's pages too): the agent is the URL's ``pk``, or the agent of the row the URL names (a
    subclass overrides :attr:`agent`)."""

    allowed_roles = selectors.OPERATE
    kwargs: dict[str, Any]

    @cached_property
    def agent(self) -> Agent:
        """The agent; another tenant's (or none) is a 404."""
        return get_object_or_404(Agent.objects.for_tenant(self.tenant), pk=self.kwargs["pk"])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["agent"] = self.agent
        return context


# --- Agents -----------------------------------------------------------------------------------------


class AgentListView(TenantMixin, ListView):
    """The agents of the tenant the member sees (:func:`agents.selectors.visible_agents`: a principal's
    own, every one for anyone else), by name; owners and operators also get the links to change them."""

    template_name = "agents/config/agent_list.html"
    context_object_name = "agents"

    def get_queryset(self) -> QuerySet[Agent]:
        agents = selectors.visible_agents(membership=self.membership)
        return agents.select_related("principal").order_by("name", "slug")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["can_operate"] = self.membership.role in selectors.OPERATE
        return context


class AgentFormView(OperatorFormMixin):
    """What creating and editing an agent share: the form with its actions formset, and the way back."""

    model = Agent
    form_class: type[Any] | None = AgentForm
    template_name: str | None = "agents/config/agent_form.html"
    saved = "Saved {.name}."
    shorten = (
        f"Shorten the longest text (a system prompt has at most {SYSTEM_PROMPT_MAX_LENGTH} characters) "
        "and save again."
    )

    def get_queryset(self) -> QuerySet[Agent]:
        return Agent.objects.for_tenant(self.tenant)

    def get_success_url(self) -> str:
        return reverse("agents:agent", kwargs={"tenant": self.tenant.slug, "pk": self.object.pk})


class AgentCreateView(AgentFormView, CreateView):
    """``agents/new/``: a new agent of the tenant."""


class AgentUpdateView(AgentFormView, UpdateView):
    """``agents/<pk>/edit/``: every setting of one agent."""


# --- Tools ------------------------------------------------------------------------------------------


class ToolListView(TenantMixin, ListView):
    """The tenant's tools, by name, with the agents that offer each."""

    allowed_roles = selectors.OPERATE
    template_name = "agents/config/tool_list.html"
    context_object_name = "tools"

    def get_queryset(self) -> QuerySet[Tool]:
        return (
            Tool.objects.for_tenant(self.tenant)
            .select_related("target_agent")
            .prefetch_related("agents")
            .order_by("name")
        )


class ToolFormView(OperatorFormMixin):
    """Create or edit a tool; a secret generated on saving is shown on this response only."""

    model = Tool
    form_class: type[Any] | None = ToolForm
    template_name: str | None = "agents/config/tool_form.html"
    saved = "Saved the tool {.name}."

    def get_queryset(self) -> QuerySet[Tool]:
        return Tool.objects.for_tenant(self.tenant)

    def get_success_url(self) -> str:
        return reverse("agents:tool-list", kwargs={"tenant": self.tenant.slug})

    def saved_response(self, form: TenantModelForm) -> HttpResponse:
        assert isinstance(form, ToolForm)
        if not form.new_secret:
            return super().saved_response(form)
        context = {"tenant": self.tenant, "membership": self.membership, "tool": self.object}
        context.update(secret=form.new_secret, back=self.get_success_url())
        response = TemplateResponse(self.request, "agents/config/secret_shown.html", context)
        response["Cache-Control"] = "no-store"
        return response


class ToolCreateView(ToolFormView, CreateView):
    """``tools/new/``: a new tool of the tenant."""


class ToolUpdateView(ToolFormView, UpdateView):
    """``tools/<pk>/edit/``: one tool of the tenant."""


# --- Model endpoints --------------------------------------------------------------------------------


class ModelEndpointListView(TenantMixin, ListView):
    """The tenant's model endpoints, by name."""

    allowed_roles = selectors.OPERATE
    template_name = "agents/config/model_list.html"
    context_object_name = "endpoints"

    def get_queryset(self) -> QuerySet[ModelEndpoint]:
        return ModelEndpoint.objects.for_tenant(self.tenant).order_by("name")


class ModelEndpointFormView(OperatorFormMixin):
    """Create or edit a model endpoint (its API key write-only)."""

    model = ModelEndpoint
    form_class: type[Any] | None = ModelEndpointForm
    template_name: str | None = "agents/config/model_form.html"
    saved = "Saved the model endpoint {.name}."

    def get_queryset(self) -> QuerySet[ModelEndpoint]:
        return ModelEndpoint.objects.for_tenant(self.tenant)

    def get_success_url(self) -> str:
        return reverse("agents:model-list", kwargs={"tenant": self.tenant.slug})


class ModelEndpointCreateView(ModelEndpointFormView, CreateView):
    """``models/new/``: a new model endpoint of the tenant."""


class ModelEndpointUpdateView(ModelEndpointFormView, UpdateView):
    """``models/<pk>/edit/``: one model endpoint of the tenant."""
