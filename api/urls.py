"""``/api/v1/``: the host REST API, its OpenAPI schema and its documentation page."""

from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView
from rest_framework.routers import SimpleRouter

from api.agents import AgentViewSet
from api.configuration import (
    CounterpartyCredentialViewSet,
    GroundingDocumentViewSet,
    IntentViewSet,
    ModelEndpointViewSet,
    ToolViewSet,
)
from api.errors import not_found
from api.exchanges import ExchangeProfileViewSet, OutboundExchangeViewSet
from api.negotiations import IntakeRequestViewSet, NegotiationViewSet, SettlementViewSet
from api.receipts import ReceiptVerifyView
from api.runs import ApprovalViewSet, QuestionViewSet, RunViewSet
from api.tenant import TenantView
from api.webhooks import WebhookDeliveryViewSet, WebhookEndpointViewSet

app_name = "api"

router = SimpleRouter(trailing_slash=False)
router.register("agents", AgentViewSet, basename="agent")
router.register("intents", IntentViewSet, basename="intent")
router.register("tools", ToolViewSet, basename="tool")
router.register("model-endpoints", ModelEndpointViewSet, basename="model-endpoint")
router.register("grounding-documents", GroundingDocumentViewSet, basename="grounding-document")
router.register("counterparty-credentials", CounterpartyCredentialViewSet, basename="counterparty-credential")
router.register("runs", RunViewSet, basename="run")
router.register("questions", QuestionViewSet, basename="question")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("negotiations", NegotiationViewSet, basename="negotiation")
router.register("settlements", SettlementViewSet, basename="settlement")
router.register("intake-requests", IntakeRequestViewSet, basename="intake-request")
router.register("webhook-endpoints", WebhookEndpointViewSet, basename="webhook-endpoint")
router.register("webhook-deliveries", WebhookDeliveryViewSet, basename="webhook-delivery")

# Agent Exchange under an agent (api.exchanges): {pk} is the agent's id.
exchange_profile = ExchangeProfileViewSet.as_view({"get": "retrieve", "put": "update", "delete": "destroy"})
exchanges = OutboundExchangeViewSet.as_view({"get": "list", "post": "create"})
exchange = OutboundExchangeViewSet.as_view({"get": "retrieve"})

urlpatterns = [
    path("tenant", TenantView.as_view(), name="tenant"),
    path("receipts/verify", ReceiptVerifyView.as_view(), name="receipt-verify"),
    path("agents/<uuid:pk>/exchange-profile", exchange_profile, name="agent-exchange-profile"),
    path("agents/<uuid:pk>/exchanges", exchanges, name="agent-exchange-list"),
    path("agents/<uuid:pk>/exchanges/<int:exchange_pk>", exchange, name="agent-exchange-detail"),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    # Redoc styles its page with styled-components, which writes <style> elements as it renders, and
    # searches in a worker it makes from a blob: URL. The one page whose policy allows those (still no
    # inline script, nothing from other origins: its fonts are the browser's own, see
    # templates/drf_spectacular/redoc.html, and Redocly's logo from their CDN stays out).
    path(
        "docs",
        csp_update({"style-src": [UNSAFE_INLINE], "worker-src": ["blob:"]})(
            SpectacularRedocView.as_view(url_name="api:schema")
        ),
        name="docs",
    ),
    path("", include(router.urls)),
    # Last: any other path under the API is a 404 with the error body (api.errors.not_found).
    re_path(r"", not_found),
]
