"""``/api/v1/``: the host REST API, its OpenAPI schema and its documentation page."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView
from rest_framework.routers import SimpleRouter

from api.tenant import TenantView

app_name = "api"

router = SimpleRouter(trailing_slash=False)

urlpatterns = [
    path("tenant", TenantView.as_view(), name="tenant"),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path("docs", SpectacularRedocView.as_view(url_name="api:schema"), name="docs"),
    path("", include(router.urls)),
]
