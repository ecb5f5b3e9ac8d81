"""The tenant's agents through the API, with ALL their configuration, and what an operator previews.

``/api/v1/agents`` (list, create), ``/api/v1/agents/{id}`` (read, change any setting, delete),
``/api/v1/agents/{id}/term-guards`` (read, replace), ``/api/v1/agents/{id}/card`` (the AgentCard
counterparties fetch), ``/api/v1/agents/{id}/host-name`` (how to prove its host name) with
``…/host-name/verify`` (prove it now: :mod:`agents.services.host_names`) and
``/api/v1/agents/{id}/instructions`` (the system message a run gets).
GETs need the ``read`` scope, every write ``admin``. Writes go through :mod:`agents.configuration`,
as the operator's pages' do, judged by its :func:`~agents.configuration.full_clean` (with the checks
other apps register): a refused write is a 400 naming the field, and writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import django_filters
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents import addresses, configuration, selectors
from agents.config_forms import END_STATES, ActionForm, tenant_members
from agents.forms import SystemMessagePreviewForm
from agents.instructions import PLACEHOLDER_INTENT, system_message
from agents.models import AGENT_SETTINGS, Agent, Intent, Tool
from agents.services import host_names
from api.configuration import (
    ConfigurationViewSet,
    FlatListField,
    JSONObjectField,
    JSONObjectListField,
    JSONStringListField,
    MemberField,
    TermGuardSerializer,
    TermGuardsField,
    messages_of,
)
from api.fields import TenantRowField
from api.schema import ERROR_SCHEMA


class ActionSpecSerializer(serializers.Serializer[Any]):
    """One allowed action (ActionSpec). A terminal action ends the negotiation and leaves the A2A task
    in its ``state``; an open one has none."""

    name = serializers.CharField(help_text="the action's name on the wire, e.g. `propose`")
    description = serializers.CharField(allow_blank=True, default="", help_text="what it means")
    terminal = serializers.BooleanField(default=False, help_text="whether it ends the negotiation")
    state = serializers.ChoiceField(
        choices=["", *END_STATES], default="", help_text="the task state a terminal action ends in"
    )


@extend_schema_field(ActionSpecSerializer(many=True))
class ActionsField(serializers.JSONField):
    """The allowed actions, in order, judged one by one as the operator's page judges each row
    (:class:`agents.config_forms.ActionForm`); messages name the action by position ("Action 2: …").
    Whether the list can be played is the configuration's check."""

    def to_internal_value(self, data: Any) -> list[dict[str, object]]:
        value = super().to_internal_value(data)
        if not isinstance(value, list):
            raise serializers.ValidationError("Give a list of actions, each an object with a name.")
        if not value:
            raise serializers.ValidationError("The agent needs at least one action.")
        actions: list[dict[str, object]] = []
        errors: list[str] = []
        for index, item in enumerate(value, start=1):
            spec = ActionSpecSerializer(data=item)
            if not spec.is_valid():
                errors += [f"Action {index}: {message}" for message in messages_of(spec.errors)]
                continue
            row = ActionForm(data=spec.validated_data)
            if not row.is_valid():
                errors += [
                    f"Action {index}: {message}" for problems in row.errors.values() for message in problems
                ]
                continue
            actions.append(row.entry())
        if errors:
            raise serializers.ValidationError(errors)
        return actions


class AgentSerializer(serializers.ModelSerializer[Agent]):
    """Everything an operator configures of an agent. ``url`` and ``card_url`` are derived from its
    tenant and slug; members are named by username; tools by id (none: the defaults ``ask_user``,
    ``negotiate``, ``answer``)."""

    url = serializers.SerializerMethodField(help_text="its public A2A endpoint (JSON-RPC)")
    card_url = serializers.SerializerMethodField(help_text="where counterparties fetch its AgentCard")
    allowed_actions = ActionsField(required=False, help_text="the actions it negotiates with, in order")
    term_guards = TermGuardsField(required=False, help_text="hard limits checked on every outgoing move")
    fallback_models = FlatListField(
        child=serializers.CharField(max_length=200),
        required=False,
        help_text="names of models tried in order once the model's attempts are spent: `offline` or the "
        "tenant's model endpoints",
    )
    tools = TenantRowField(
        model=Tool,
        many=True,
        required=False,
        help_text="ids of the tenant's tools it offers; none: the defaults (ask_user, negotiate, answer)",
    )
    guardrails = JSONObjectListField(required=False, help_text=Agent.guardrails.field.help_text)
    card_skills = JSONObjectListField(required=False, help_text=Agent.card_skills.field.help_text)
    card_fields = JSONObjectField(required=False, help_text=Agent.card_fields.field.help_text)
    cors_origins = JSONStringListField(
        required=False,
        help_text='browser origins allowed to call, e.g. "https://app.example.com"; "*" is any',
    )
    host_name = serializers.CharField(
        max_length=253,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text=f"{Agent.host_name.field.help_text}; null or empty: none",
    )
    evaluation_url = serializers.URLField(
        max_length=500, required=False, allow_blank=True, help_text=Agent.evaluation_url.field.help_text
    )
    principal = MemberField(help_text="the username of the member who answers its questions (not a viewer)")
    intake_owner = MemberField(help_text=Agent.intake_owner.field.help_text)

    class Meta:
        model = Agent
        fields = [
            "id",
            "url",
            "card_url",
            *AGENT_SETTINGS,
            "host_name_verified_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "host_name_verified_at", "created_at", "updated_at"]
        extra_kwargs = {
            "model": {"help_text": "what its loop calls: `offline` (built in) or a model endpoint's name"},
            "terms": {
                "help_text": 'the structured terms it negotiates over, as "name (type, unit), name", e.g. '
                '"amount (number, EUR per day), currency": published on its card and checked on every '
                'inbound move (docs/move-rules.md); prose declares none; "": prose only'
            },
            "timezone": {"help_text": "an IANA time zone: its today and its clock in the system message"},
        }
        validators: list[Any] = []  # the service names the field of a clash

    def get_url(self, agent: Agent) -> str:
        return addresses.agent_url(agent)

    def get_card_url(self, agent: Agent) -> str:
        return addresses.card_url(addresses.agent_url(agent))

    def validate_host_name(self, host_name: str | None) -> str | None:
        return host_name or None  # "" is none: two agents without one must not clash on it


class CardSerializer(serializers.Serializer[Any]):
    url = serializers.URLField(help_text="where counterparties fetch it")
    card = JSONObjectField(help_text="the AgentCard as served: A2A 1.0 JSON with the 0.3 fields")


class CardPreviewSerializer(CardSerializer):
    """The agent's AgentCard as counterparties fetch it, built and signed as the gateway builds and
    signs it (a signed card's signatures are randomised: they differ on every fetch)."""

    signed = serializers.BooleanField(help_text="whether the tenant's active signing key signed it")
    host_name = CardSerializer(
        allow_null=True, help_text="the card as served at the root of the agent's own host name; null: none"
    )


class DnsRecordSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="the record's name, `_parley-challenge.<host name>`")
    type = serializers.CharField(help_text="`TXT`")
    value = serializers.CharField(help_text="`parley-verification=<token>`")


class HttpTokenSerializer(serializers.Serializer[Any]):
    url = serializers.CharField(help_text="`http://<host name>/.well-known/parley-verification/<token>`")
    body = serializers.CharField(help_text="what it answers, with 200: `parley-verification=<token>`")


class HostNameSerializer(serializers.Serializer[Any]):
    """The agent's host name and its proof. It serves the agent only once proved: by the DNS TXT
    record ``dns_record``, or by ``http_token`` answered at the host (served by what answers the host
    now: before it points at Parley, or the tenant's own proxy). A new host name gets a new token and
    must be proved again."""

    host_name = serializers.CharField()
    verified_at = serializers.DateTimeField(allow_null=True, help_text="when it was proved; null: not yet")
    dns_record = DnsRecordSerializer()
    http_token = HttpTokenSerializer()


def host_name_claim(agent: Agent) -> dict[str, Any]:
    """What :class:`HostNameSerializer` shows of ``agent``; raises ``Http404`` when it has no host name."""
    challenge = host_names.challenge(agent)
    if challenge is None:
        raise Http404(host_names.NO_HOST_NAME)
    return {
        "host_name": challenge.host_name,
        "verified_at": agent.host_name_verified_at,
        "dns_record": {"name": challenge.dns_name, "type": "TXT", "value": challenge.value},
        "http_token": {"url": challenge.http_url, "body": challenge.value},
    }


class InstructionsSerializer(serializers.Serializer[Any]):
    """The system message a run of the agent gets, for an intent at a moment."""

    intent = serializers.UUIDField(
        allow_null=True, help_text="the intent it is built for; null when the agent has none yet"
    )
    statement = serializers.CharField(help_text="the intent's statement (or what stands in for it)")
    at = serializers.DateTimeField(help_text="the moment it is built for")
    system_message = serializers.CharField()


def card_preview(agent: Agent) -> dict[str, Any]:
    """What the dashboard's card preview shows (:class:`a2a_gateway.views.CardPreviewView`), as data."""
    card = addresses.card_document(agent)
    hosted = None
    if agent.host_name:
        endpoint = addresses.endpoint_url(agent, host_name=agent.host_name)
        hosted = {
            "url": addresses.card_url(endpoint),
            "card": addresses.card_document(agent, host_name=agent.host_name),
        }
    return {
        "url": addresses.card_url(addresses.agent_url(agent)),
        "signed": "signatures" in card,
        "card": card,
        "host_name": hosted,
    }


def instructions_preview(agent: Agent, query: Any) -> dict[str, Any]:
    """What the dashboard's system-message preview shows (:class:`agents.views.SystemMessagePreviewView`):
    for ``intent`` (default the agent's latest; with none, an unsaved one of ``statement``) at ``at``
    (ISO 8601; without an offset, in the agent's timezone; default now). Raises a validation error
    naming the parameter that is not valid."""
    latest = selectors.latest_intent(agent=agent)
    data = query.copy()
    if latest is not None:
        data.setdefault("intent", str(latest.pk))
    form = SystemMessagePreviewForm(data, agent=agent)
    if not form.is_valid():
        raise serializers.ValidationError(
            {name: [str(m) for m in problems] for name, problems in form.errors.items()}
        )
    intent: Intent | None = form.cleaned_data["intent"] or latest
    saved = intent is not None
    if intent is None:
        # Never saved: the preview writes nothing.
        statement = form.cleaned_data["statement"] or PLACEHOLDER_INTENT
        intent = Intent(tenant_id=agent.tenant_id, agent=agent, statement=statement)
    at: datetime = form.cleaned_data["at"] or timezone.now()
    return {
        "intent": intent.pk if saved else None,
        "statement": intent.statement,
        "at": at,
        "system_message": system_message(agent=agent, intent=intent, now=at),
    }


class AgentFilter(django_filters.FilterSet):
    slug = django_filters.CharFilter(help_text="its slug")
    principal = django_filters.ModelChoiceFilter(
        queryset=lambda request: tenant_members(request.user.tenant),
        to_field_name="username",
        help_text="the username of its principal",
    )

    class Meta:
        model = Agent
        fields = ["slug", "principal"]


@extend_schema_view(
    list=extend_schema(summary="List agents"),
    retrieve=extend_schema(summary="Read an agent's configuration"),
    create=extend_schema(summary="Create an agent"),
    partial_update=extend_schema(summary="Change any of an agent's settings"),
    destroy=extend_schema(
        summary="Delete an agent",
        description="Deletes the agent with its intents, runs, negotiations and settlements, grounding "
        "documents and inbound keys. Refused (409) while one of its runs has not ended (cancel it "
        "first) or while a tool runs the agent.",
        responses={204: None},
    ),
)
class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ConfigurationViewSet):
    """The tenant's agents and every setting of each."""

    model = Agent
    queryset = Agent.objects.none()
    serializer_class = AgentSerializer
    filterset_class = AgentFilter

    def get_queryset(self) -> QuerySet[Agent]:
        return (
            Agent.objects.for_tenant(self.tenant)
            .select_related("tenant", "principal", "intake_owner")
            .prefetch_related("tools")
        )

    def create(self, request: Request) -> Response:
        values = dict(self.valid())
        tools = values.pop("tools", None)
        agent = configuration.agent_create(tenant=self.tenant, values=values, tools=tools)
        return self.answer(agent, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: Any = None) -> Response:
        agent = self.get_object()
        values = dict(self.valid(partial=True))
        tools = values.pop("tools", None)
        return self.answer(configuration.agent_update(agent=agent, values=values, tools=tools))

    def destroy(self, request: Request, pk: Any = None) -> Response:
        configuration.agent_delete(agent=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        methods=["GET"], summary="Read an agent's term guards", responses=TermGuardSerializer(many=True)
    )
    @extend_schema(
        methods=["PUT"],
        summary="Replace an agent's term guards",
        description="The body is the whole list. A malformed guard is refused naming it by position.",
        request=TermGuardSerializer(many=True),
        responses=TermGuardSerializer(many=True),
    )
    @action(
        detail=True, methods=["get", "put"], url_path="term-guards", filter_backends=[], pagination_class=None
    )
    def term_guards(self, request: Request, pk: Any = None) -> Response:
        agent = self.get_object()
        if request.method == "PUT":
            try:
                guards = TermGuardsField().run_validation(request.data)
            except serializers.ValidationError as exc:
                raise serializers.ValidationError({"term_guards": messages_of(exc.detail)}) from exc
            agent = configuration.agent_update(agent=agent, values={"term_guards": guards})
        return Response(agent.term_guards)

    @extend_schema(summary="Preview an agent's AgentCard", responses=CardPreviewSerializer)
    @action(detail=True, methods=["get"])
    def card(self, request: Request, pk: Any = None) -> Response:
        return Response(CardPreviewSerializer(card_preview(self.get_object())).data)

    @extend_schema(
        summary="Read how to prove an agent's host name",
        description="404 when the agent has no host name.",
        responses=HostNameSerializer,
    )
    @action(detail=True, methods=["get"], url_path="host-name", filter_backends=[], pagination_class=None)
    def host_name(self, request: Request, pk: Any = None) -> Response:
        return Response(HostNameSerializer(host_name_claim(self.get_object())).data)

    @extend_schema(
        summary="Prove an agent's host name now",
        description="Checks the DNS TXT record, then the HTTP token, now; the first that holds proves the "
        "host name, which then serves the agent within seconds. Refused (400, at `host_name`) with what "
        "was wrong with each: no TXT record, another value, the HTTP status, no answer in time; or no "
        "host name, or another agent already serving it. One proved already is answered as it is.",
        request=None,
        responses=HostNameSerializer,
    )
    @action(
        detail=True,
        methods=["post"],
        url_path="host-name/verify",
        filter_backends=[],
        pagination_class=None,
    )
    def host_name_verify(self, request: Request, pk: Any = None) -> Response:
        agent = host_names.verify(agent=self.get_object())
        return Response(HostNameSerializer(host_name_claim(agent)).data)

    @extend_schema(
        summary="Preview the system message a run of an agent gets",
        parameters=[
            OpenApiParameter(
                "intent", OpenApiTypes.UUID, description="one of the agent's intents; default: its latest"
            ),
            OpenApiParameter(
                "at",
                OpenApiTypes.DATETIME,
                description="ISO 8601; without an offset, in the agent's timezone; default: now",
            ),
            OpenApiParameter(
                "statement", OpenApiTypes.STR, description="stands in for the intent when the agent has none"
            ),
        ],
        responses={
            200: InstructionsSerializer,
            400: OpenApiResponse(ERROR_SCHEMA, description="a parameter is not valid; `fields` names which"),
        },
    )
    @action(detail=True, methods=["get"])
    def instructions(self, request: Request, pk: Any = None) -> Response:
        preview = instructions_preview(self.get_object(), request.query_params)
        return Response(InstructionsSerializer(preview).data)
