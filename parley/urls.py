"""Root URLs: accounts, organisations and invitations, the dashboard, the host REST API, the web
process's health.

The A2A gateway is routed in ``parley.asgi``."""

from allauth.account import views as account_views
from django.contrib import admin
from django.urls import include, path

from parley import accounts, organisation_views
from parley.health import health
from parley.views import home

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", health, name="health"),
    path("api/v1/", include("api.urls")),
    # django-allauth's pages (sign-up, e-mail confirmation, password reset…) at the root; its login and
    # logout are also named login and logout, as Django's own were.
    path("login/", account_views.login, name="login"),
    path("logout/", account_views.logout, name="logout"),
    # allauth's sign-up, handed the invitation its visitor opened (parley.accounts).
    path("signup/", accounts.SignupView.as_view(), name="account_signup"),
    path("", include("allauth.account.urls")),
    path("organisations/", organisation_views.OrganisationsView.as_view(), name="organisations"),
    path("organisations/new/", organisation_views.TenantCreateView.as_view(), name="tenant-create"),
    path(
        "organisations/invitations/<int:pk>/accept/",
        organisation_views.InvitationToMeAcceptView.as_view(),
        name="invitation-to-me-accept",
    ),
    path("invitations/<str:token>/", organisation_views.InvitationView.as_view(), name="invitation"),
    # A third party checks a settlement receipt here, with no account.
    path("receipts/", include("negotiations.public_urls")),
    path("t/<slug:tenant>/", include("agents.urls")),
    path("t/<slug:tenant>/", include("negotiations.urls")),
    path("t/<slug:tenant>/", include("representative.urls")),
    path("t/<slug:tenant>/", include("a2a_gateway.urls")),
    path("t/<slug:tenant>/", include("parley.tenant_urls")),
    path("", home, name="home"),
]
