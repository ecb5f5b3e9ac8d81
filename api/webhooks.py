"""The host's webhooks through the API: endpoints (with their signing secret, shown once) and the
deliveries made to them (read, resend).

``/api/v1/webhook-endpoints`` and ``/api/v1/webhook-deliveries``. GETs need the ``read`` scope;
everything else ``admin``: endpoints are configuration, and a resend acts on the host's own server.
What is sent and how it is signed: :mod:`parley.webhooks.signing`.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import TenantViewSet
from api.errors import Conflict
from api.fields import of_tenant
from parley.models import ApiKey, WebhookDelivery, WebhookEndpoint, WebhookEventType
from parley.webhooks import endpoints, resend

SIGNING = (
    "Each delivery is a POST of `{type, timestamp, data}` signed as Standard Webhooks "
    "(https://www.standardwebhooks.com): headers `webhook-id`, `webhook-timestamp` and "
    '`webhook-signature` (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, keyed with the '
    "base64-decoded part of the secret after `whsec_`)."
)


class EventTypesField(serializers.ListField):
    """A list of webhook event types; an unknown one is an error of the whole field (``events``),
    not of a position in it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.ChoiceField(choices=WebhookEventType.choices), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not isinstance(exc.detail, dict):
                raise
            messages = [str(m) for problems in exc.detail.values() for m in problems]
            raise serializers.ValidationError(messages) from None


class WebhookEndpointSerializer(serializers.ModelSerializer[WebhookEndpoint]):
    """An endpoint, without its secret. ``disabled_reason`` says why Parley made it inactive (its
    receiver answered 410 Gone); it is blank otherwise, and once the host sets ``active``."""

    events = EventTypesField(read_only=True)

    class Meta:
        model = WebhookEndpoint
        fields = [
            "id",
            "url",
            "description",
            "events",
            "active",
            "disabled_reason",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class WebhookEndpointWithSecretSerializer(WebhookEndpointSerializer):
    """An endpoint with its secret: answered once, when the endpoint is made or its secret rotated."""

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields
        extra_kwargs = {
            "secret": {
                "help_text": "`whsec_` + base64 of 32 random bytes; shown only now. Verify deliveries "
                "with it. Null when the answer is the replay of an Idempotency-Key.",
                "allow_null": True,
            }
        }


class WebhookEndpointCreateSerializer(serializers.Serializer[Any]):
    """What `POST /webhook-endpoints` takes. Whether the URL may receive webhooks is the service's
    call (a 400 at ``url``)."""

    url = serializers.URLField(
        max_length=2000,
        help_text="Where deliveries are POSTed: https, on a host that resolves to public addresses only.",
    )
    events = EventTypesField(allow_empty=False, help_text="The event types to send; at least one.")
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    active = serializers.BooleanField(
        required=False, default=True, help_text="Inactive endpoints get nothing."
    )


class WebhookEndpointUpdateSerializer(serializers.Serializer[Any]):
    """What `PATCH /webhook-endpoints/{id}` takes: any of the fields, each replacing the old value."""

    url = serializers.URLField(max_length=2000, required=False)
    events = EventTypesField(allow_empty=False, required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    active = serializers.BooleanField(required=False)


class WebhookAttemptSerializer(serializers.Serializer[Any]):
    """One attempt of a delivery: when it started, the status answered (null: no answer, or refused
    before sending), the error, and the wait before the next attempt (null: none followed)."""

    attempt = serializers.IntegerField(help_text="1 for the first attempt of the delivery, counting resends.")
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    retry_in = serializers.FloatField(allow_null=True, help_text="Seconds until the next attempt.")


class WebhookDeliverySerializer(serializers.ModelSerializer[WebhookDelivery]):
    """A delivery of one event to one endpoint. ``status``: ``pending`` (an attempt is due at
    ``next_attempt_at``), ``succeeded`` (answered 2xx) or ``failed`` (no 2xx within the retry
    window, or answered 410 Gone, which also makes its endpoint inactive). ``webhook_id`` is the
    ``webhook-id`` header, the same on every attempt and resend."""

    webhook_id = serializers.CharField(read_only=True)
    type = serializers.ChoiceField(source="event_type", choices=WebhookEventType.choices, read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "webhook_id",
            "endpoint",
            "type",
            "status",
            "attempts",
            "last_status_code",
            "last_error",
            "last_attempt_at",
            "next_attempt_at",
            "delivered_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class WebhookDeliveryDetailSerializer(WebhookDeliverySerializer):
    """A delivery with the body it sends (``payload``), its latest attempts (``attempt_log``, oldest
    first, at most 50) and the start of the last response's body (``last_response``)."""

    payload = serializers.JSONField(read_only=True, help_text="`{type, timestamp, data}`, as POSTed.")
    attempt_log = WebhookAttemptSerializer(many=True, read_only=True)

    class Meta(WebhookDeliverySerializer.Meta):
        fields = [*WebhookDeliverySerializer.Meta.fields, "payload", "attempt_log", "last_response"]
        read_only_fields = fields


class WebhookDeliveryFilter(django_filters.FilterSet):
    endpoint = django_filters.ModelChoiceFilter(
        queryset=of_tenant(WebhookEndpoint), help_text="Deliveries to this endpoint (its id)."
    )
    status = django_filters.ChoiceFilter(
        choices=WebhookDelivery.Status.choices, help_text="Deliveries in this status."
    )
    type = django_filters.ChoiceFilter(
        field_name="event_type", choices=WebhookEventType.choices, help_text="Deliveries of this event type."
    )

    class Meta:
        model = WebhookDelivery
        fields = ["endpoint", "status", "type"]


@extend_schema_view(
    list=extend_schema(summary="List webhook endpoints, newest first"),
    retrieve=extend_schema(summary="Read a webhook endpoint"),
    destroy=extend_schema(summary="Delete a webhook endpoint and its deliveries"),
)
class WebhookEndpointViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TenantViewSet
):
    """The tenant's webhook endpoints. The secret is answered only by create and rotate-secret."""

    queryset = WebhookEndpoint.objects.none()
    serializer_class = WebhookEndpointSerializer
    write_scope = ApiKey.Scope.ADMIN
    shown_once = ("secret",)

    def get_queryset(self) -> QuerySet[WebhookEndpoint]:
        return WebhookEndpoint.objects.for_tenant(self.tenant)

    @extend_schema(
        summary="Make a webhook endpoint",
        request=WebhookEndpointCreateSerializer,
        responses={status.HTTP_201_CREATED: WebhookEndpointWithSecretSerializer},
        description="Makes an endpoint receiving `events`, with a new secret, answered only now. "
        "A URL that is not https, or whose host resolves to a private, loopback or link-local "
        "address, is a 400 at `url`. " + SIGNING,
    )
    def create(self, request: Request) -> Response:
        given = WebhookEndpointCreateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        endpoint = endpoints.webhook_endpoint_create(tenant=self.tenant, **given.validated_data)
        return Response(WebhookEndpointWithSecretSerializer(endpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a webhook endpoint",
        request=WebhookEndpointUpdateSerializer,
        responses=WebhookEndpointSerializer,
        description="Changes the fields given. A new URL is checked as at creation. Pending deliveries "
        "go to the endpoint as it is at each attempt; an inactive endpoint gets none. Giving `active` "
        "clears `disabled_reason`.",
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        endpoint = self.get_object()
        given = WebhookEndpointUpdateSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        endpoint = endpoints.webhook_endpoint_update(endpoint=endpoint, **given.validated_data)
        return Response(WebhookEndpointSerializer(endpoint).data)

    def perform_destroy(self, instance: WebhookEndpoint) -> None:
        endpoints.webhook_endpoint_delete(endpoint=instance)

    @extend_schema(
        summary="Rotate a webhook endpoint's secret",
        request=None,
        responses=WebhookEndpointWithSecretSerializer,
        description="Gives the endpoint a new secret, answered only now; the old one signs nothing "
        "from now on.",
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str | None = None) -> Response:
        endpoint = endpoints.webhook_endpoint_rotate_secret(endpoint=self.get_object())
        return Response(WebhookEndpointWithSecretSerializer(endpoint).data)


@extend_schema_view(
    list=extend_schema(summary="List webhook deliveries, newest first"),
    retrieve=extend_schema(
        summary="Read a webhook delivery with its body and attempts",
        responses=WebhookDeliveryDetailSerializer,
    ),
)
class WebhookDeliveryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """What was sent to the tenant's webhook endpoints, and how it went."""

    queryset = WebhookDelivery.objects.none()
    serializer_class = WebhookDeliverySerializer
    filterset_class = WebhookDeliveryFilter
    write_scope = ApiKey.Scope.ADMIN

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        return WebhookDelivery.objects.for_tenant(self.tenant)

    def get_serializer_class(self) -> type[serializers.BaseSerializer[Any]]:
        return WebhookDeliverySerializer if self.action == "list" else WebhookDeliveryDetailSerializer

    @extend_schema(
        summary="Resend a webhook delivery",
        request=None,
        responses=WebhookDeliveryDetailSerializer,
        description="Sends the delivery again now, whatever its status, with the same `webhook-id` and "
        "body; it is `pending` again with a new retry window. A delivery with an attempt under way, "
        "or whose endpoint is inactive, is a 409.",
    )
    @action(detail=True, methods=["post"])
    def resend(self, request: Request, pk: str | None = None) -> Response:
        try:
            delivery = resend.delivery_resend(delivery=self.get_object())
        except resend.ResendRefused as exc:
            raise Conflict(str(exc)) from None
        return Response(WebhookDeliveryDetailSerializer(delivery).data)
