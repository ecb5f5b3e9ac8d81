"""The tenant's configuration through the API, but for the agents themselves (:mod:`api.agents`):
intents, tools, model endpoints, grounding documents and counterparty credentials; and the
serializer fields both share.

``/api/v1/intents``, ``/api/v1/tools``, ``/api/v1/model-endpoints``,
``/api/v1/grounding-documents`` and ``/api/v1/counterparty-credentials``. GETs need the ``read``
scope, every write ``admin``. Writes go through :mod:`agents.configuration`,
:mod:`representative.documents` and :mod:`negotiations.credentials`, which judge them as the
dashboard's forms do: a refused write is a 400 naming the field, and writes nothing. Secrets
(a tool's ``secret``, an endpoint's ``api_key``) are write-only: responses say only whether one
is set; a counterparty credential's ``secret`` is not shown at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import django_filters
from django.contrib.auth import get_user_model
from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents import configuration
from agents.config_forms import tenant_members
from agents.models import Agent, Intent, ModelEndpoint, Tool
from api.base import TenantViewSet
from api.fields import TenantRowField, of_tenant
from negotiations import credentials
from negotiations.models import CounterpartyCredential
from parley.models import ApiKey
from representative import documents
from representative.models import GroundingDocument

# --- Fields -----------------------------------------------------------------------------------------


def messages_of(detail: Any) -> list[str]:
    """Every message in a DRF error ``detail`` (a string, list or dict, nested), as flat strings; a
    nested field's messages start with its name."""
    if isinstance(detail, Mapping):
        return [
            message if key == "non_field_errors" else f"{key}: {message}"
            for key, value in detail.items()
            for message in messages_of(value)
        ]
    if isinstance(detail, list):
        return [message for item in detail for message in messages_of(item)]
    return [str(detail)]


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """A JSON object (its shape is the configuration's to judge)."""


@extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": True}})
class JSONObjectListField(serializers.JSONField):
    """A JSON list of objects (their shape is the configuration's to judge)."""


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class JSONStringListField(serializers.JSONField):
    """A JSON list of strings (what they must be is the configuration's to judge)."""


class TermGuardSerializer(serializers.Serializer[Any]):
    """One term guard, for the schema: a hard limit checked in code on every outgoing move."""

    term = serializers.CharField(help_text="the term it limits, e.g. `amount`")
    op = serializers.ChoiceField(choices=["<=", ">=", "==", "in"])
    value = serializers.JSONField(help_text="a number or ISO date (for <=, >=), one value (==), a list (in)")
    currency = serializers.CharField(required=False, help_text="the currency the value is in")
    aspiration = serializers.FloatField(
        required=False, allow_null=True, help_text="the offline negotiator's opening value"
    )


@extend_schema_field(TermGuardSerializer(many=True))
class TermGuardsField(serializers.JSONField):
    """Term guards: a list of ``{term, op, value, currency?, aspiration?}``, checked as the negotiator
    reads them (by the configuration's checks; the message names the offending guard by its position)."""


class FlatListField(serializers.ListField):
    """A list whose items' errors are flat messages naming the item ("2: This field may not be
    blank."), as the error body's ``fields`` holds lists of strings."""

    def run_child_validation(self, data: list[Any]) -> list[Any]:
        result, errors = [], []
        for index, item in enumerate(data, start=1):
            try:
                result.append(self.child.run_validation(item))
            except serializers.ValidationError as exc:
                errors += [f"{index}: {message}" for message in messages_of(exc.detail)]
        if errors:
            raise serializers.ValidationError(errors)
        return result


class MemberField(serializers.SlugRelatedField):
    """A member of the API key's tenant, by username; null for nobody. A user of another tenant (or
    none) is refused at this field."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(
            slug_field="username",
            queryset=get_user_model().objects.all(),
            allow_null=True,
            error_messages={"does_not_exist": "No member of this tenant has the username {value}."},
            **kwargs,
        )

    def get_queryset(self) -> QuerySet[Any]:
        return tenant_members(self.context["view"].tenant)


class ConfigurationViewSet(TenantViewSet):
    """A viewset of one kind of configuration row: reads for the ``read`` scope, writes for
    ``admin``; rows are the tenant's (``model``), newest first."""

    write_scope = ApiKey.Scope.ADMIN
    model: type[Model]

    def get_queryset(self) -> QuerySet[Any]:
        return self.model.objects.for_tenant(self.tenant)  # type: ignore[attr-defined]

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # The filters narrow lists; a row named by its id is found whatever the query string says.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def answer(self, row: Model, status_code: int = status.HTTP_200_OK) -> Response:
        """``row`` as the view's serializer shows it."""
        return Response(self.get_serializer(row).data, status=status_code)

    def valid(self, serializer_class: type[serializers.Serializer[Any]] | None = None, **kwargs: Any) -> Any:
        """The request body, validated by the view's serializer (or ``serializer_class``)."""
        cls = serializer_class or self.get_serializer_class()
        serializer = cls(data=self.request.data, context=self.get_serializer_context(), **kwargs)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data


# --- Intents ----------------------------------------------------------------------------------------


class IntentSerializer(serializers.ModelSerializer[Intent]):
    """An intent: what an agent works on. Its runs and messages form one thread."""

    agent = TenantRowField(model=Agent, help_text="the id of the agent it is for")
    term_guards = TermGuardsField(
        required=False, help_text="hard limits for this intent, checked with the agent's on every move"
    )

    class Meta:
        model = Intent
        fields = ["id", "agent", "statement", "external_id", "term_guards", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]
        extra_kwargs = {
            "statement": {"help_text": "what the agent works on, in the party's words"},
            "external_id": {"help_text": "the host's own id for it; unique per agent when given"},
        }
        validators: list[Any] = []  # the service says which field a clash is at


class IntentUpdateSerializer(IntentSerializer):
    """An intent's statement, external id and term guards; it stays with its agent."""

    agent: serializers.PrimaryKeyRelatedField[Agent] = serializers.PrimaryKeyRelatedField(  # type: ignore[assignment]
        read_only=True, pk_field=serializers.UUIDField()
    )

    class Meta(IntentSerializer.Meta):
        read_only_fields = ["id", "agent", "created_at", "updated_at"]


class IntentFilter(django_filters.FilterSet):
    agent = django_filters.ModelChoiceFilter(queryset=of_tenant(Agent), help_text="the id of their agent")
    external_id = django_filters.CharFilter(help_text="the host's id for it")

    class Meta:
        model = Intent
        fields = ["agent", "external_id"]


@extend_schema_view(
    list=extend_schema(summary="List intents"),
    retrieve=extend_schema(summary="Read an intent"),
    create=extend_schema(summary="Add an intent to an agent"),
    partial_update=extend_schema(summary="Change an intent", request=IntentUpdateSerializer),
)
class IntentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ConfigurationViewSet):
    """Intents of the tenant's agents. A change applies from the next step of a run of it."""

    model = Intent
    queryset = Intent.objects.none()
    filterset_class = IntentFilter

    def get_serializer_class(self) -> type[serializers.Serializer[Any]]:
        return IntentUpdateSerializer if self.action == "partial_update" else IntentSerializer

    def create(self, request: Request) -> Response:
        data = self.valid()
        intent = configuration.intent_add(
            agent=data["agent"],
            statement=data["statement"],
            external_id=data.get("external_id", ""),
            term_guards=data.get("term_guards"),
        )
        return self.answer(intent, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: Any = None) -> Response:
        intent = self.get_object()
        data = self.valid(partial=True)
        return self.answer(configuration.intent_update(intent=intent, values=data))


# --- Tools ------------------------------------------------------------------------------------------


class ToolSerializer(serializers.ModelSerializer[Tool]):
    """A tool agents may offer their model. ``secret`` (a host operation's signing key) is write-only:
    ``has_secret`` says whether one is set."""

    parameters = JSONObjectField(required=False, help_text="the JSON Schema of its arguments")
    url = serializers.URLField(
        max_length=500, required=False, allow_blank=True, help_text="a host operation's HTTPS endpoint"
    )
    secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=200,
        trim_whitespace=False,
        help_text="HMAC-SHA256 key a host operation signs its calls with; write-only",
    )
    has_secret = serializers.SerializerMethodField()
    target_agent = TenantRowField(
        model=Agent,
        required=False,
        allow_null=True,
        help_text="for an agent tool: the id of the agent it runs",
    )
    agents: serializers.PrimaryKeyRelatedField[Agent] = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True, pk_field=serializers.UUIDField(), help_text="the agents that offer it"
    )

    class Meta:
        model = Tool
        fields = [
            "id",
            "name",
            "kind",
            "description",
            "parameters",
            "url",
            "secret",
            "has_secret",
            "timeout",
            "target_agent",
            "suspends",
            "requires_approval",
            "agents",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        validators: list[Any] = []

    def get_has_secret(self, tool: Tool) -> bool:
        return bool(tool.secret)


@extend_schema_view(
    list=extend_schema(summary="List tools"),
    retrieve=extend_schema(summary="Read a tool"),
    create=extend_schema(summary="Create a tool"),
    partial_update=extend_schema(summary="Change a tool"),
    destroy=extend_schema(summary="Delete a tool no agent offers", responses={204: None}),
)
class ToolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ConfigurationViewSet):
    """The tenant's tools. One that agents offer cannot be deleted (409) until it is taken off them."""

    model = Tool
    queryset = Tool.objects.none()
    serializer_class = ToolSerializer
    filterset_fields = ["name", "kind"]

    def get_queryset(self) -> QuerySet[Tool]:
        return Tool.objects.for_tenant(self.tenant).prefetch_related("agents")

    def create(self, request: Request) -> Response:
        tool = configuration.tool_create(tenant=self.tenant, values=self.valid())
        return self.answer(tool, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: Any = None) -> Response:
        tool = self.get_object()
        return self.answer(configuration.tool_update(tool=tool, values=self.valid(partial=True)))

    def destroy(self, request: Request, pk: Any = None) -> Response:
        configuration.tool_delete(tool=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Model endpoints --------------------------------------------------------------------------------


class ModelEndpointSerializer(serializers.ModelSerializer[ModelEndpoint]):
    """An OpenAI-compatible chat-completions model agents may name (``Agent.model``). ``api_key`` is
    write-only (``""`` removes it): ``has_api_key`` says whether one is set. Prices are per million
    tokens, in ``currency`` (taken in capitals)."""

    base_url = serializers.URLField(max_length=500, help_text=ModelEndpoint.base_url.field.help_text)
    api_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=500,
        help_text="the key sent as a bearer token; write-only",
    )
    has_api_key = serializers.SerializerMethodField()
    currency = serializers.CharField(
        max_length=3, required=False, help_text="ISO 4217 code; an agent's models share one currency"
    )

    class Meta:
        model = ModelEndpoint
        fields = [
            "id",
            "name",
            "base_url",
            "api_key",
            "has_api_key",
            "upstream_model",
            "input_price",
            "output_price",
            "currency",
            "timeout",
            "attempts",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]
        validators: list[Any] = []

    def get_has_api_key(self, endpoint: ModelEndpoint) -> bool:
        return bool(endpoint.api_key)

    def validate_currency(self, currency: str) -> str:
        return currency.upper()


@extend_schema_view(
    list=extend_schema(summary="List model endpoints"),
    retrieve=extend_schema(summary="Read a model endpoint"),
    create=extend_schema(summary="Create a model endpoint"),
    partial_update=extend_schema(summary="Change a model endpoint"),
    destroy=extend_schema(summary="Delete a model endpoint no agent names", responses={204: None}),
)
class ModelEndpointViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ConfigurationViewSet):
    """The tenant's model endpoints. One that agents name cannot be renamed (400) or deleted (409)."""

    model = ModelEndpoint
    queryset = ModelEndpoint.objects.none()
    serializer_class = ModelEndpointSerializer
    filterset_fields = ["name"]

    def create(self, request: Request) -> Response:
        endpoint = configuration.model_endpoint_create(tenant=self.tenant, values=self.valid())
        return self.answer(endpoint, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: Any = None) -> Response:
        endpoint = self.get_object()
        values = self.valid(partial=True)
        return self.answer(configuration.model_endpoint_update(endpoint=endpoint, values=values))

    def destroy(self, request: Request, pk: Any = None) -> Response:
        configuration.model_endpoint_delete(endpoint=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Grounding documents ----------------------------------------------------------------------------


class GroundingDocumentSerializer(serializers.ModelSerializer[GroundingDocument]):
    """Public text about an agent's party that its representative may answer visitors from."""

    agent = TenantRowField(model=Agent, help_text="the id of the agent it grounds")

    class Meta:
        model = GroundingDocument
        fields = ["id", "agent", "title", "text", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]
        extra_kwargs = {"text": {"help_text": "public text only: visitors may be told anything in it"}}


class GroundingDocumentUpdateSerializer(GroundingDocumentSerializer):
    """A grounding document's title and text; it stays with its agent."""

    agent: serializers.PrimaryKeyRelatedField[Agent] = serializers.PrimaryKeyRelatedField(  # type: ignore[assignment]
        read_only=True, pk_field=serializers.UUIDField()
    )

    class Meta(GroundingDocumentSerializer.Meta):
        read_only_fields = ["id", "agent", "created_at", "updated_at"]


class GroundingDocumentFilter(django_filters.FilterSet):
    agent = django_filters.ModelChoiceFilter(queryset=of_tenant(Agent), help_text="the id of their agent")

    class Meta:
        model = GroundingDocument
        fields = ["agent"]


@extend_schema_view(
    list=extend_schema(summary="List grounding documents"),
    retrieve=extend_schema(summary="Read a grounding document"),
    create=extend_schema(summary="Add a grounding document to an agent"),
    partial_update=extend_schema(
        summary="Change a grounding document", request=GroundingDocumentUpdateSerializer
    ),
    destroy=extend_schema(summary="Delete a grounding document", responses={204: None}),
)
class GroundingDocumentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ConfigurationViewSet):
    """The grounding documents of the tenant's agents."""

    model = GroundingDocument
    queryset = GroundingDocument.objects.none()
    filterset_class = GroundingDocumentFilter

    def get_serializer_class(self) -> type[serializers.Serializer[Any]]:
        if self.action == "partial_update":
            return GroundingDocumentUpdateSerializer
        return GroundingDocumentSerializer

    def create(self, request: Request) -> Response:
        data = self.valid()
        document = documents.grounding_document_create(
            agent=data["agent"], title=data["title"], text=data["text"]
        )
        return self.answer(document, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: Any = None) -> Response:
        document = self.get_object()
        values = self.valid(partial=True)
        return self.answer(documents.grounding_document_update(document=document, values=values))

    def destroy(self, request: Request, pk: Any = None) -> Response:
        documents.grounding_document_delete(document=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Counterparty credentials -----------------------------------------------------------------------


class CounterpartyCredentialSerializer(serializers.ModelSerializer[CounterpartyCredential]):
    """What an agent presents when it calls a counterparty whose URL starts with ``url_prefix``
    (negotiations and Agent Exchange alike; the longest prefix wins, an agent's own over the
    tenant's). The secret is taken, never shown."""

    agent = TenantRowField(
        model=Agent,
        allow_null=True,
        required=False,
        help_text="the id of the agent that presents it; null: every agent of the tenant",
    )

    class Meta:
        model = CounterpartyCredential
        fields = ["id", "agent", "url_prefix", "scheme", "header", "secret", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]
        extra_kwargs = {
            "url_prefix": {"help_text": "the counterparty URLs it is for, e.g. its A2A URL"},
            "scheme": {"help_text": "`bearer`: Authorization: Bearer <secret>; `api_key`: <header>"},
            "header": {"help_text": "the header an `api_key` secret goes in"},
            "secret": {"write_only": True, "help_text": "the key or token the counterparty issued"},
        }


class CounterpartyCredentialFilter(django_filters.FilterSet):
    agent = django_filters.ModelChoiceFilter(queryset=of_tenant(Agent), help_text="the id of their agent")

    class Meta:
        model = CounterpartyCredential
        fields = ["agent"]


@extend_schema_view(
    list=extend_schema(summary="List counterparty credentials"),
    retrieve=extend_schema(summary="Read a counterparty credential"),
    create=extend_schema(summary="Add a credential an agent presents to a counterparty"),
    partial_update=extend_schema(summary="Change a counterparty credential"),
    destroy=extend_schema(summary="Delete a counterparty credential", responses={204: None}),
)
class CounterpartyCredentialViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ConfigurationViewSet):
    """The credentials the tenant's agents present to counterparties (the keys other platforms issued)."""

    model = CounterpartyCredential
    queryset = CounterpartyCredential.objects.none()
    serializer_class = CounterpartyCredentialSerializer
    filterset_class = CounterpartyCredentialFilter

    def create(self, request: Request) -> Response:
        created = credentials.credential_create(tenant=self.tenant, values=self.valid())
        return self.answer(created, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: Any = None) -> Response:
        values = self.valid(partial=True)
        return self.answer(credentials.credential_update(credential=self.get_object(), values=values))

    def destroy(self, request: Request, pk: Any = None) -> Response:
        credentials.credential_delete(credential=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
