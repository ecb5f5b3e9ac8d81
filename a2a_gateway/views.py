"""Dashboard pages of the public endpoint, for an agent's operators (:data:`parley.roles.OPERATE`;
anyone else gets a 403, another tenant's agent or key is a 404). Thin.

Its AgentCard as counterparties fetch it, its inbound keys (a new key is shown
once, on the response that issues it), and its Agent Exchange profile with the
requests prepared for it (never the requests themselves: they hold tokens). The
representative face's pages (grounding documents, intake) are :mod:`representative.views`.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views import View
from django.views.generic import TemplateView

from a2a_gateway import cards
from a2a_gateway.auth import inbound_key_create, inbound_key_revoke
from a2a_gateway.forms import ExchangeProfileForm, InboundKeyForm
from a2a_gateway.models import InboundKey
from agents import addresses
from agents.models import Agent
from agents.pages import AgentPageMixin
from exchange import services as exchange_services
from exchange import wire
from exchange.models import PreparedExchange
from parley.pages import TenantMixin, errors_at_fields
from parley.roles import OPERATE

# Prepared Agent Exchange requests the profile page lists, newest first.
PREPARED_SHOWN = 50


def card_text(agent: Agent, *, host_name: str | None = None) -> str:
    """The card exactly as the gateway serves it (:func:`a2a_gateway.app.card_endpoint`), indented:
    ``json.dumps(json.loads(text))`` gives the served bytes (but for a signed card's signatures,
    which are randomised and differ on every fetch)."""
    return json.dumps(cards.card_document(agent, host_name=host_name), indent=2)


class CardPreviewView(AgentPageMixin, TemplateView):
    """The agent's public AgentCard as counterparties fetch it, and where: built and signed as the
    gateway builds and signs it; again as served on its own host name, when it has one."""

    template_name = "a2a_gateway/card.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        agent = self.agent
        text = card_text(agent)
        context.update(card_url=addresses.card_url(addresses.agent_url(agent)), card_json=text)
        context["signed"] = "signatures" in json.loads(text)
        if agent.host_name:
            endpoint = addresses.endpoint_url(agent, host_name=agent.host_name)
            context.update(
                host_card_url=addresses.card_url(endpoint),
                host_card_json=card_text(agent, host_name=agent.host_name),
            )
        return context


class InboundKeysView(AgentPageMixin, TemplateView):
    """The agent's inbound keys, newest first (prefix, holder, issued, last used, revoked); POST
    ``name`` to issue one, which this response shows once (never stored readable, never cached)."""

    template_name = "a2a_gateway/keys.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.setdefault("form", InboundKeyForm())
        keys = InboundKey.objects.for_tenant(self.tenant).filter(agent=self.agent)
        context["keys"] = keys.order_by("-created_at", "-pk")
        context["endpoint"] = addresses.agent_url(self.agent)
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        form = InboundKeyForm(request.POST)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(form=form))
        key, shown = inbound_key_create(agent=self.agent, name=form.cleaned_data["name"])
        context = self.get_context_data(form=InboundKeyForm(), new_key=key, shown=shown)
        response = self.render_to_response(context)
        response["Cache-Control"] = "no-store"
        return response


class InboundKeyRevokeView(TenantMixin, View):
    """POST: revoke one inbound key of the tenant (the URL's ``pk``) from now on, then back to its
    agent's keys; another tenant's key is a 404."""

    allowed_roles = OPERATE

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        keys = InboundKey.objects.for_tenant(self.tenant).select_related("agent")
        key = inbound_key_revoke(key=get_object_or_404(keys, pk=kwargs["pk"]))
        messages.success(request, f"Revoked the key {key.prefix} of {key.name}: it no longer works.")
        return redirect("a2a_gateway:keys", tenant=self.tenant.slug, pk=key.agent_id)


class ExchangeProfileView(AgentPageMixin, TemplateView):
    """The agent's Agent Exchange profile (docs/agent-exchange.md): whether it is on, its settings,
    where callers prepare requests, and the :data:`PREPARED_SHOWN` requests prepared last (id,
    caller, when, the run each started; never the request, which holds the delegation token and
    protected values until it runs). POST the settings to turn it on or change it."""

    template_name = "a2a_gateway/exchange.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        profile = exchange_services.profile_of(self.agent)
        context.setdefault("form", ExchangeProfileForm(profile=profile))
        # Only the columns shown: the request (tokens, protected values) never leaves the database here.
        prepared = (
            PreparedExchange.objects.for_tenant(self.tenant)
            .filter(agent=self.agent)
            .only("exchange_id", "caller", "created_at", "expires_at", "executed_at", "run_id")
            .order_by("-created_at", "-pk")
        )
        context.update(
            profile=profile,
            preparation_url=f"{addresses.agent_url(self.agent).rstrip('/')}{wire.PREPARATION_PATH}",
            extension_uri=wire.EXTENSION_URI,
            prepared=prepared[:PREPARED_SHOWN],
            prepared_shown=PREPARED_SHOWN,
            now=timezone.now(),
        )
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        form = ExchangeProfileForm(request.POST)
        if form.is_valid():
            try:
                profile = exchange_services.profile_save(agent=self.agent, values=form.cleaned_data)
            except ValidationError as exc:
                errors_at_fields(form, exc)
            else:
                messages.success(
                    request,
                    f"Saved the Agent Exchange profile of {self.agent.name}: it takes Agent Exchange "
                    f"requests ({profile.get_mode_display().lower()}).",
                )
                return redirect("a2a_gateway:exchange", tenant=self.tenant.slug, pk=self.agent.pk)
        return self.render_to_response(self.get_context_data(form=form))


class ExchangeProfileOffView(AgentPageMixin, View):
    """POST: the agent stops taking Agent Exchange requests (its profile is deleted; the requests
    prepared already stay listed but cannot run), then back to its Agent Exchange page."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        exchange_services.profile_delete(agent=self.agent)
        messages.success(
            request, f"Agent Exchange is off for {self.agent.name}: its card no longer lists the extension."
        )
        return redirect("a2a_gateway:exchange", tenant=self.tenant.slug, pk=self.agent.pk)
