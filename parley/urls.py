"""Root URLs: auth, the dashboard, the host REST API, the web process's health.

The A2A gateway is routed in ``parley.asgi``."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from parley.health import health
from parley.views import home

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", health, name="health"),
    path("api/v1/", include("api.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("t/<slug:tenant>/", include("agents.urls")),
    path("t/<slug:tenant>/", include("negotiations.urls")),
    path("t/<slug:tenant>/", include("a2a_gateway.urls")),
    path("t/<slug:tenant>/", include("parley.tenant_urls")),
    path("", home, name="home"),
]
