"""What the agents' work came to, read through the API: negotiations with their turns and
settlements, settlements on their own, and the intake requests visitors left.

``/api/v1/negotiations`` (and ``/{id}/prompt``, the prompt of a negotiation's next decision),
``/api/v1/settlements`` and ``/api/v1/intake-requests``: reads (the ``read`` scope), and the
party's answer to an inbound negotiation waiting on it (``write``). What a
counterparty wrote (turn messages, terms, names) is their data, returned as JSON values as it was
recorded, never interpreted.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from agents.forms import MAX_TEXT
from agents.models import Agent, Intent
from agents.selectors import agent_currency
from api.base import TenantViewSet
from api.errors import Conflict
from api.fields import of_tenant
from api.receipts import ReceiptSerializer
from api.runs import LIMIT_KINDS, UnderstoodSerializer, understood_data
from api.schema import ERROR_SCHEMA
from negotiations import negotiator, selectors
from negotiations.models import Negotiation, Settlement, Turn
from negotiations.services import parking, signatures
from representative.models import IntakeRequest

# Longest counterparty name or URL part the filter searches for, as on the dashboard's board.
MAX_COUNTERPARTY = 200


class SettlementSerializer(serializers.ModelSerializer[Settlement]):
    """The verdict on a closed negotiation: ``outcome``, on what ``basis`` it rests (``prose`` <
    ``state`` < ``terms`` < ``reference``), the agreed ``terms``, who ended it (``ours`` or
    ``theirs``, "" for neither) and, on a ``conflict``, the ``disputed`` terms."""

    ended_by = serializers.ChoiceField(choices=Turn.Side.choices, allow_blank=True, read_only=True)
    signature = serializers.ChoiceField(
        choices=Settlement.Signature.choices,
        allow_blank=True,
        read_only=True,
        help_text="whether both sides signed an agreed settlement: `countersigned`, or why not "
        '(`signature_reason`); "" for any other outcome (docs/settlement-signatures.md)',
    )

    class Meta:
        model = Settlement
        fields = [
            "id",
            "negotiation",
            "outcome",
            "basis",
            "terms",
            "reason",
            "ended_by",
            "disputed",
            "signature",
            "signature_reason",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class SettlementListSerializer(SettlementSerializer):
    """A settlement with its negotiation's agent and counterparty."""

    agent = serializers.UUIDField(source="negotiation.agent_id", read_only=True)
    counterparty_name = serializers.CharField(source="negotiation.counterparty_name", read_only=True)
    counterparty_url = serializers.CharField(source="negotiation.counterparty_url", read_only=True)

    class Meta(SettlementSerializer.Meta):
        fields = [*SettlementSerializer.Meta.fields, "agent", "counterparty_name", "counterparty_url"]
        read_only_fields = fields


class TurnSerializer(serializers.ModelSerializer[Turn]):
    """One move, in order: ``side`` ``ours`` or ``theirs``, its ``action``, ``message`` and structured
    ``terms``, the ``offer_id`` it made and the ``accepts_offer_id`` it accepted, and the Task state
    stamped with it. On our moves, what deciding it cost: the ``model`` that answered last, its
    tokens and ``cost`` (a decimal string in the negotiation's ``currency``); "" and zeros on theirs
    and on moves the ``offline`` strategy decided."""

    class Meta:
        model = Turn
        fields = [
            "seq",
            "side",
            "action",
            "message",
            "terms",
            "offer_id",
            "accepts_offer_id",
            "task_state",
            "model",
            "input_tokens",
            "output_tokens",
            "cost",
            "created_at",
        ]
        read_only_fields = fields


class NegotiationUsageSerializer(serializers.ModelSerializer[Negotiation]):
    """What the agent's model spent deciding our moves in the negotiation, failed decisions
    included; ``cost`` is a decimal string in the currency of the agent's model endpoint."""

    class Meta:
        model = Negotiation
        fields = ["input_tokens", "output_tokens", "cost"]
        read_only_fields = fields


class ScoreSerializer(serializers.Serializer[Any]):
    """The negotiation scored for its own side (:class:`negotiations.score.Score`): on the numeric
    ``term`` (in ``currency``, "" for none), our ``limit`` (``limit_kind`` ``ceiling``: the most we
    pay, ``floor``: the least we take), our ``aspiration`` and the ``agreed`` value, each null when
    not known; the ``surplus`` of the deal inside our limit, in the term's units, and its ``share``
    of the way from our limit to our aspiration (0 at the limit, 1 at the aspiration), null without
    a deal on a value, a limit, or (``share``) an aspiration inside the limit; the ``turns``
    recorded, both sides'; and what deciding our moves cost (``cost`` a decimal string in the
    negotiation's model currency). Our limit is our own: it is in nothing the counterparty receives."""

    term = serializers.CharField()
    currency = serializers.CharField()
    limit = serializers.FloatField(source="limit.value", allow_null=True, default=None)
    limit_kind = serializers.ChoiceField(
        choices=LIMIT_KINDS,
        source="limit.kind",
        allow_null=True,
        default=None,
    )
    aspiration = serializers.FloatField(allow_null=True)
    agreed = serializers.FloatField(allow_null=True)
    surplus = serializers.FloatField(allow_null=True)
    share = serializers.FloatField(allow_null=True)
    turns = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=14, decimal_places=6)


class NegotiationSerializer(serializers.ModelSerializer[Negotiation]):
    """A negotiation, its settlement (null while it has none), how many turns are recorded, its
    latest turn's side, action and time (null before any), the ``usage`` of deciding our moves and
    its ``score`` for our side."""

    settlement = SettlementSerializer(read_only=True, allow_null=True)
    score = serializers.SerializerMethodField()
    usage = NegotiationUsageSerializer(source="*", read_only=True)
    turns_recorded = serializers.IntegerField(read_only=True)
    last_side = serializers.ChoiceField(choices=Turn.Side.choices, read_only=True, allow_null=True)
    last_action = serializers.CharField(read_only=True, allow_null=True)
    last_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = Negotiation
        fields = [
            "id",
            "agent",
            "intent",
            "direction",
            "counterparty_url",
            "counterparty_name",
            "context_id",
            "task_id",
            "status",
            "task_state",
            "turn_count",
            "max_turns",
            "objective",
            "guidance",
            "parked_question",
            "error",
            "settlement",
            "turns_recorded",
            "last_side",
            "last_action",
            "last_at",
            "usage",
            "score",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @cached_property
    def score_serializer(self) -> ScoreSerializer:
        """One for every row of a list: a serializer copies all its fields as it is made."""
        return ScoreSerializer()

    @extend_schema_field(ScoreSerializer)
    def get_score(self, negotiation: Negotiation) -> dict[str, Any]:
        return dict(self.score_serializer.to_representation(selectors.negotiation_score(negotiation)))


class NegotiationDetailSerializer(NegotiationSerializer):
    """A negotiation with every turn, in order, and ``currency``, that of its costs and its turns'
    ("" when the agent's model has no priced endpoint, as ``offline``)."""

    currency = serializers.SerializerMethodField()
    turns = serializers.SerializerMethodField()

    class Meta(NegotiationSerializer.Meta):
        fields = [*NegotiationSerializer.Meta.fields, "currency", "turns"]
        read_only_fields = fields

    def get_currency(self, negotiation: Negotiation) -> str:
        return agent_currency(agent=negotiation.agent)

    @extend_schema_field(TurnSerializer(many=True))
    def get_turns(self, negotiation: Negotiation) -> Any:
        return TurnSerializer(selectors.negotiation_turns(negotiation), many=True).data


class AnsweredNegotiationSerializer(NegotiationDetailSerializer):
    """An inbound negotiation as its party's answer left it, with ``understood``: what its agent
    understood of the answer, or null where nothing reads it before the agent's model does."""

    understood = serializers.SerializerMethodField()

    class Meta(NegotiationDetailSerializer.Meta):
        fields = [*NegotiationDetailSerializer.Meta.fields, "understood"]
        read_only_fields = fields

    @extend_schema_field(UnderstoodSerializer(allow_null=True))
    def get_understood(self, negotiation: Negotiation) -> dict[str, Any] | None:
        return understood_data(self.context.get("understood"))


class PromptMessageSerializer(serializers.Serializer[Any]):
    """One chat message of the prompt, as sent to the chat-completions endpoint."""

    role = serializers.ChoiceField(choices=[("system", "system"), ("user", "user")])
    content = serializers.CharField()


class PromptToolSerializer(serializers.Serializer[Any]):
    """The one tool the model answers with; ``parameters`` is its JSON Schema, built from the
    agent's vocabulary."""

    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField(help_text="JSON Schema of the move: action, message, terms, …")


class DecisionPromptSerializer(serializers.Serializer[Any]):
    """The prompt of a negotiation's next decision, exactly as the negotiator builds it for the
    agent's chat model: ``messages`` (the system message, then the record so far as one user
    message) and ``tool``. ``model`` is the agent's model; ``sent`` is false on ``offline``, whose
    concession strategy decides without any prompt (this is then what a chat model would be shown).
    Inbound, the next decision comes with the counterparty's next message, added to the record as
    its last line."""

    model = serializers.CharField()
    sent = serializers.BooleanField()
    messages = PromptMessageSerializer(many=True)
    tool = PromptToolSerializer()


class NegotiationFilter(django_filters.FilterSet):
    """The dashboard board's filters (:func:`negotiations.selectors.board`)."""

    status = django_filters.ChoiceFilter(choices=Negotiation.Status.choices, help_text="In this status.")
    agent = django_filters.ModelChoiceFilter(queryset=of_tenant(Agent), help_text="Of this agent (its id).")
    intent = django_filters.ModelChoiceFilter(
        queryset=of_tenant(Intent), help_text="Under this intent (its id)."
    )
    counterparty = django_filters.CharFilter(
        method="filter_counterparty",
        max_length=MAX_COUNTERPARTY,
        help_text="Part of the counterparty's name or URL, in any case.",
    )
    direction = django_filters.ChoiceFilter(
        choices=Negotiation.Direction.choices,
        help_text="`outbound`: the agent contacted them; `inbound`: they contacted the agent.",
    )

    class Meta:
        model = Negotiation
        fields = ["status", "agent", "intent", "counterparty", "direction"]

    def filter_counterparty(
        self, queryset: QuerySet[Negotiation], name: str, value: str
    ) -> QuerySet[Negotiation]:
        return queryset.filter(selectors.counterparty_matches(value))


class GuidanceSerializer(serializers.Serializer[Any]):
    answer = serializers.CharField(
        max_length=MAX_TEXT,
        help_text="The party's answer to `parked_question`: it becomes the negotiation's standing guidance.",
    )


@extend_schema_view(
    list=extend_schema(summary="List negotiations, newest first"),
    retrieve=extend_schema(
        summary="Read a negotiation with its turns", responses=NegotiationDetailSerializer
    ),
)
class NegotiationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """The tenant's negotiations, both directions, as the dashboard's board lists them."""

    queryset = Negotiation.objects.none()
    filterset_class = NegotiationFilter

    def get_queryset(self) -> QuerySet[Negotiation]:
        return selectors.board(tenant=self.tenant)

    def get_serializer_class(self) -> type[serializers.BaseSerializer[Any]]:
        return NegotiationSerializer if self.action == "list" else NegotiationDetailSerializer

    @extend_schema(
        summary="Preview the prompt of a negotiation's next decision",
        responses={
            200: DecisionPromptSerializer,
            409: OpenApiResponse(
                ERROR_SCHEMA, description="the negotiator cannot build it (a malformed term guard, …)"
            ),
        },
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def prompt(self, request: Request, pk: Any = None) -> Response:
        try:
            prompt = selectors.decision_prompt(self.get_object())
        except negotiator.NegotiatorError as exc:
            raise Conflict(f"The prompt cannot be built: {exc}") from exc
        return Response(DecisionPromptSerializer(prompt).data)

    @extend_schema(
        summary="Download our receipt of a negotiation's signed settlement",
        responses={
            200: ReceiptSerializer,
            404: OpenApiResponse(
                ERROR_SCHEMA, description="no such negotiation, or its settlement is unsigned"
            ),
        },
        description="The canonical settlement and each side's signature, for anyone to check with "
        "`POST /receipts/verify` or `manage.py verify_receipt`. Only an agreed settlement our side signed "
        "has one; `signature` on the settlement says whether theirs holds too.",
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def receipt(self, request: Request, pk: Any = None) -> Response:
        receipt = signatures.receipt_for(self.get_object())
        if receipt is None:
            raise NotFound("This negotiation has no signed settlement.")
        return Response(receipt)

    @extend_schema(
        summary="Answer an inbound negotiation waiting on its party",
        request=GuidanceSerializer,
        responses=AnsweredNegotiationSerializer,
        description="An inbound negotiation whose agent asked its party (status `waiting`, the question "
        "in `parked_question`) takes the answer as standing guidance and is open again; the counterparty "
        "has been told the party is being consulted. Its next message is answered with the guidance — at "
        "once, when it registered a push notification config on the A2A Task. `understood` says what the "
        "agent understood of the answer: the limit it read (an agent on the `offline` model that asked "
        "for one), or why the answer gives no usable limit, in which case it asks again when it next "
        "decides; null where its model reads the answer itself. A 409 names why it is refused: "
        "`outbound` (its run asks the party), `not_waiting`, or `already_answered`.",
    )
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        body = GuidanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        negotiation = parking.negotiation_guidance_give(
            negotiation=self.get_object(), answer=body.validated_data["answer"], user=None
        )
        context = {"understood": selectors.last_answer_understood(negotiation)}
        answered = self.get_queryset().get(pk=negotiation.pk)
        return Response(AnsweredNegotiationSerializer(answered, context=context).data)


class SettlementFilter(django_filters.FilterSet):
    agent = django_filters.ModelChoiceFilter(
        field_name="negotiation__agent", queryset=of_tenant(Agent), help_text="Of this agent (its id)."
    )
    outcome = django_filters.ChoiceFilter(choices=Settlement.Outcome.choices, help_text="With this outcome.")
    negotiation = django_filters.ModelChoiceFilter(
        queryset=of_tenant(Negotiation), help_text="Of this negotiation (its id)."
    )

    class Meta:
        model = Settlement
        fields = ["agent", "outcome", "negotiation"]


@extend_schema_view(
    list=extend_schema(summary="List settlements, newest first"),
    retrieve=extend_schema(summary="Read a settlement"),
)
class SettlementViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """The verdicts on the tenant's closed negotiations."""

    queryset = Settlement.objects.none()
    serializer_class = SettlementListSerializer
    filterset_class = SettlementFilter

    def get_queryset(self) -> QuerySet[Settlement]:
        return Settlement.objects.for_tenant(self.tenant).select_related("negotiation")


class IntakeRequestSerializer(serializers.ModelSerializer[IntakeRequest]):
    """A request a visitor left with an agent's intake tool: ``caller`` is the task owner that left
    it, ``recipient`` the member it is for (null once removed), and whether they were notified."""

    recipient = serializers.CharField(source="recipient.username", allow_null=True, read_only=True)

    class Meta:
        model = IntakeRequest
        fields = [
            "id",
            "agent",
            "caller",
            "summary",
            "details",
            "recipient",
            "notified_at",
            "notify_error",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class IntakeRequestFilter(django_filters.FilterSet):
    agent = django_filters.ModelChoiceFilter(
        queryset=of_tenant(Agent), help_text="Left with this agent (its id)."
    )

    class Meta:
        model = IntakeRequest
        fields = ["agent"]


@extend_schema_view(
    list=extend_schema(summary="List intake requests, newest first"),
    retrieve=extend_schema(summary="Read an intake request"),
)
class IntakeRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """What visitors asked the tenant's agents to pass on."""

    queryset = IntakeRequest.objects.none()
    serializer_class = IntakeRequestSerializer
    filterset_class = IntakeRequestFilter

    def get_queryset(self) -> QuerySet[IntakeRequest]:
        return IntakeRequest.objects.for_tenant(self.tenant).select_related("recipient")
