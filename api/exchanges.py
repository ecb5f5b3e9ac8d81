"""Agent Exchange through the API: an agent's profile as a recipient, and the requests it sends.

``/api/v1/agents/{id}/exchange-profile`` (read, replace, delete: the profile's keys and rules, so
writes need ``admin``) and ``/api/v1/agents/{id}/exchanges`` (send one — ``write`` — list them, read
one). docs/agent-exchange.md is the profile. A request is taken once and never shown again: the
API answers with its reference, status and receipt, never the request, its tokens or its
protected values. Another tenant's agent is a 404 on every route.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import URLValidator
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import Agent
from api.base import TenantViewSet
from api.configuration import JSONObjectField
from exchange import outbound, services, wire
from exchange.models import ExchangeProfile, OutboundExchange
from parley.models import ApiKey

NO_PROFILE = "This agent has no Agent Exchange profile: it takes no Agent Exchange requests."


class AgentRoute(TenantViewSet):
    """A view under ``/agents/{id}/`` (the URL's ``pk``): the agent is the tenant's, or the request
    is a 404, before anything else is looked at."""

    queryset: QuerySet[Any] = Agent.objects.none()

    def agent(self) -> Agent:
        return get_object_or_404(Agent.objects.for_tenant(self.tenant), pk=self.kwargs["pk"])


# --- The profile ------------------------------------------------------------------------------------


class ExchangeProfileSerializer(serializers.ModelSerializer[ExchangeProfile]):
    """How the agent takes Agent Exchange requests. A PUT replaces the whole profile: a field left
    out takes its default."""

    mode = serializers.ChoiceField(
        choices=ExchangeProfile.Mode.choices,
        default=ExchangeProfile.Mode.OPTIONAL,
        help_text="`required`: the agent is dedicated to Agent Exchange (its card requires the extension); "
        "`optional`: it negotiates too",
    )
    audience = serializers.CharField(
        max_length=500,
        allow_blank=True,
        default="",
        help_text="the `aud` tokens must have; blank: the agent's A2A URL",
    )
    scope = serializers.CharField(
        max_length=200, default="agent-exchange", help_text="a scope every delegation token must carry"
    )
    jwks = JSONObjectField(
        help_text='the JSON Web Key Set ({"keys": [...]}, public asymmetric keys only) that signs the '
        "delegation tokens and standing mandates it accepts"
    )

    class Meta:
        model = ExchangeProfile
        fields = ["agent", "mode", "issuer", "audience", "scope", "jwks", "created_at", "updated_at"]
        read_only_fields = ["agent", "created_at", "updated_at"]
        extra_kwargs = {"issuer": {"help_text": "the `iss` of the delegation tokens it accepts"}}


@extend_schema_view(
    retrieve=extend_schema(
        summary="Read an agent's Agent Exchange profile", description="404 when the agent has none."
    ),
    update=extend_schema(
        summary="Set an agent's Agent Exchange profile",
        description="Creates or replaces it; the agent's card then advertises the extension. A key set "
        "holding private or symmetric keys is refused at `jwks`.",
    ),
    destroy=extend_schema(
        summary="Delete an agent's Agent Exchange profile",
        description="The agent stops taking Agent Exchange requests; requests prepared with it can no "
        "longer be executed.",
        responses={204: None},
    ),
)
class ExchangeProfileViewSet(AgentRoute):
    """An agent's Agent Exchange profile."""

    serializer_class = ExchangeProfileSerializer
    write_scope = ApiKey.Scope.ADMIN
    pagination_class = None
    filter_backends: list[Any] = []

    def retrieve(self, request: Request, pk: Any = None) -> Response:
        profile = services.profile_of(self.agent())
        if profile is None:
            raise NotFound(NO_PROFILE)
        return Response(self.get_serializer(profile).data)

    def update(self, request: Request, pk: Any = None) -> Response:
        agent = self.agent()
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        profile = services.profile_save(agent=agent, values=dict(body.validated_data))
        return Response(self.get_serializer(profile).data)

    def destroy(self, request: Request, pk: Any = None) -> Response:
        services.profile_delete(agent=self.agent())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- The exchanges it sends -------------------------------------------------------------------------


@extend_schema_field(wire.REQUEST_SCHEMA)
class ExchangeRequestField(serializers.JSONField):
    """An Agent Exchange request; the profile judges it (:func:`exchange.wire.check_request`)."""


class ExchangeSendSerializer(serializers.Serializer[Any]):
    """What ``POST /agents/{id}/exchanges`` takes."""

    url = serializers.CharField(
        max_length=500,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="the recipient agent's A2A URL; its card is read from `<url>/.well-known/agent-card.json`",
    )
    request = ExchangeRequestField(
        help_text="the complete request: sent only to the recipient's preparation endpoint (on the "
        "recipient's origin), never over A2A, and never shown again"
    )
    prepared_by_host = serializers.BooleanField(
        default=False,
        help_text="the host delivered the request to the recipient through a trusted channel of its own: "
        "no preparation endpoint is called",
    )


class OutboundExchangeSerializer(serializers.ModelSerializer[OutboundExchange]):
    """One request the agent sent: ``queued`` until a worker has sent it, then ``completed`` with
    the recipient's ``receipt`` or ``failed`` with the ``error`` saying why. The request itself is
    never shown; ``reference`` is its digest (``sha256:…``), the only part of it A2A carries."""

    receipt = JSONObjectField(
        allow_null=True, read_only=True, help_text="the recipient's receipt once completed, else null"
    )

    class Meta:
        model = OutboundExchange
        fields = [
            "id",
            "url",
            "exchange_id",
            "reference",
            "prepared_by_host",
            "status",
            "receipt",
            "error",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "exchange_id": {"help_text": "the request's exchangeId"},
            "error": {"help_text": "why it failed; blank otherwise"},
        }


@extend_schema_view(
    list=extend_schema(summary="List the Agent Exchange requests an agent sent, newest first"),
    retrieve=extend_schema(summary="Read an Agent Exchange request an agent sent"),
)
class OutboundExchangeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, AgentRoute):
    """The Agent Exchange requests one agent sent."""

    queryset = OutboundExchange.objects.none()
    serializer_class = OutboundExchangeSerializer
    lookup_url_kwarg = "exchange_pk"
    filterset_fields = ["status", "exchange_id"]

    def get_queryset(self) -> QuerySet[OutboundExchange]:
        return OutboundExchange.objects.for_tenant(self.tenant).filter(agent=self.agent())

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # The filters narrow lists; a row named by its id is found whatever the query string says.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    @extend_schema(
        summary="Send an Agent Exchange request",
        request=ExchangeSendSerializer,
        responses={status.HTTP_202_ACCEPTED: OutboundExchangeSerializer},
        description="Queues `request` for the agent at `url` and answers 202 with it `queued`; a worker "
        "then prepares it with the recipient (unless `prepared_by_host`) and sends its reference over "
        "A2A. Read it again for the outcome (or receive the `exchange.completed` / `exchange.failed` "
        "events). A request that is not valid, names another `recipient` than `url`, or whose "
        "`exchangeId` this agent already sent, is a 400 at `request`.",
    )
    def create(self, request: Request, pk: Any = None) -> Response:
        agent = self.agent()
        body = ExchangeSendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        exchange = outbound.exchange_send_start(agent=agent, **body.validated_data)
        return Response(OutboundExchangeSerializer(exchange).data, status=status.HTTP_202_ACCEPTED)
