"""Dashboard pages of the public endpoint, under ``/t/<tenant>/``."""

from django.urls import path

from a2a_gateway import views

app_name = "a2a_gateway"
urlpatterns = [
    # An agent's public face, for its operators.
    path("agents/<uuid:pk>/card/", views.CardPreviewView.as_view(), name="card"),
    path("agents/<uuid:pk>/inbound-keys/", views.InboundKeysView.as_view(), name="keys"),
    path("inbound-keys/<int:pk>/revoke/", views.InboundKeyRevokeView.as_view(), name="key-revoke"),
    path("agents/<uuid:pk>/agent-exchange/", views.ExchangeProfileView.as_view(), name="exchange"),
    path("agents/<uuid:pk>/agent-exchange/off/", views.ExchangeProfileOffView.as_view(), name="exchange-off"),
]
