"""Operator pages that configure a tenant's agents, tools and model endpoints. Thin.

Every page but the agents list is for the tenant's owners and operators
(:data:`parley.roles.OPERATE`; anyone else gets a 403); a row of another
tenant is a 404. The agents list shows each member the agents they see
(:func:`agents.selectors.visible_agents`). A valid form is saved by the configuration service
(:mod:`agents.configuration`, as the host API saves), in one transaction or not at all; saved, the
page redirects with a message, refused, it is shown again with each error at
its field. A new secret is the one thing shown on the response to the POST
itself (never stored where the page could show it again).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views import View
from django.views.generic import CreateView, ListView, UpdateView

from agents import configuration, selectors
from agents.config_forms import AgentForm, ModelEndpointForm, TenantModelForm, ToolForm
from agents.models import SYSTEM_PROMPT_MAX_LENGTH, Agent, ModelEndpoint, Tool
from agents.services import host_names
from parley.pages import TenantMixin, TooLargeFormMixin
from parley.roles import OPERATE


class OperatorFormMixin(TooLargeFormMixin, TenantMixin):
    """Create or edit one row of the tenant with a :class:`TenantModelForm`, saved by the
    configuration service (:meth:`write`).

    Subclasses say how to ``write`` the form's values, ``saved`` (the success message, formatted
    with the row) and where to go, and may say what to ``shorten`` when a form was too large to
    send: it is answered (413) with the page as a GET shows it and a message at the form
    (:class:`parley.pages.TooLargeFormMixin`).
    """

    allowed_roles = OPERATE
    saved = "Saved {}."
    object: Any

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_form_kwargs()  # type: ignore[misc]
        kwargs["tenant"] = self.tenant
        return kwargs

    def form_valid(self, form: TenantModelForm) -> HttpResponse:
        try:
            self.object = self.write(form)
        except ValidationError as exc:
            # What changed since the form was judged (a name taken meanwhile): shown as the form's own.
            form.refused(exc)
            return self.form_invalid(form)  # type: ignore[attr-defined]
        messages.success(self.request, self.saved.format(self.object))
        return self.saved_response(form)

    def write(self, form: TenantModelForm) -> Model:
        """Create the row (``self.object`` is None) or change ``self.object`` with the values of the
        valid ``form``, through :mod:`agents.configuration`; raises its ``ValidationError``."""
        raise NotImplementedError

    def saved_response(self, form: TenantModelForm) -> HttpResponse:
        return redirect(self.get_success_url())  # type: ignore[attr-defined]


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
        context["can_operate"] = self.membership.role in OPERATE
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

    def write(self, form: TenantModelForm) -> Agent:
        assert isinstance(form, AgentForm)
        tools = form.cleaned_data["tools"]
        if self.object is None:
            return configuration.agent_create(tenant=self.tenant, values=form.values(), tools=tools)
        return configuration.agent_update(agent=self.object, values=form.values(), tools=tools)


class AgentCreateView(AgentFormView, CreateView):
    """``agents/new/``: a new agent of the tenant."""


class AgentUpdateView(AgentFormView, UpdateView):
    """``agents/<pk>/edit/``: every setting of one agent, and the proof of its host name as stored
    (the form's instance takes the values posted)."""

    def get_object(self, queryset: QuerySet[Agent] | None = None) -> Agent:
        agent: Agent = super().get_object(queryset)
        self.host_name_challenge = host_names.challenge(agent)
        self.host_name_verified_at = agent.host_name_verified_at
        return agent

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(
            host_name_challenge=self.host_name_challenge, host_name_verified_at=self.host_name_verified_at
        )
        return context


class AgentHostNameVerifyView(TenantMixin, View):
    """POST ``agents/<pk>/host-name/verify/``: prove the agent's host name now
    (:func:`agents.services.host_names.verify`), then back to its edit page, which says that it is
    proved or each thing found wrong. Another tenant's agent is a 404; a member who is not an owner or
    an operator gets a 403."""

    allowed_roles = OPERATE

    def post(self, request: HttpRequest, tenant: str, pk: Any) -> HttpResponse:
        agent = get_object_or_404(Agent.objects.for_tenant(self.tenant), pk=pk)
        try:
            agent = host_names.verify(agent=agent)
        except ValidationError as exc:
            for problem in exc.message_dict["host_name"]:
                messages.error(request, problem)
        else:
            messages.success(request, f"{agent.host_name} is proved: the agent is served there in seconds.")
        return redirect("agents:agent-edit", tenant=tenant, pk=agent.pk)


# --- Tools ------------------------------------------------------------------------------------------


class ToolListView(TenantMixin, ListView):
    """The tenant's tools, by name, with the agents that offer each."""

    allowed_roles = OPERATE
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

    def write(self, form: TenantModelForm) -> Tool:
        if self.object is None:
            return configuration.tool_create(tenant=self.tenant, values=form.values())
        return configuration.tool_update(tool=self.object, values=form.values())

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

    allowed_roles = OPERATE
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

    def write(self, form: TenantModelForm) -> ModelEndpoint:
        if self.object is None:
            return configuration.model_endpoint_create(tenant=self.tenant, values=form.values())
        return configuration.model_endpoint_update(endpoint=self.object, values=form.values())


class ModelEndpointCreateView(ModelEndpointFormView, CreateView):
    """``models/new/``: a new model endpoint of the tenant."""


class ModelEndpointUpdateView(ModelEndpointFormView, UpdateView):
    """``models/<pk>/edit/``: one model endpoint of the tenant."""
