"""Dashboard pages of the tenant itself, under ``/t/<tenant>/``: its members, API keys and webhooks."""

from django.urls import path

from parley import views, webhook_views

app_name = "tenant"
urlpatterns = [
    path("members/", views.MembersView.as_view(), name="members"),
    path("members/invitations/", views.InvitationCreateView.as_view(), name="invitation-create"),
    path(
        "members/invitations/<int:pk>/revoke/", views.InvitationRevokeView.as_view(), name="invitation-revoke"
    ),
    path("members/<int:pk>/role/", views.MemberRoleView.as_view(), name="member-role"),
    path("members/<int:pk>/remove/", views.MemberRemoveView.as_view(), name="member-remove"),
    path("members/<int:pk>/hand-over/", views.MemberHandOverView.as_view(), name="member-hand-over"),
    path("api-keys/", views.ApiKeysView.as_view(), name="api-keys"),
    path("api-keys/<int:pk>/revoke/", views.ApiKeyRevokeView.as_view(), name="api-key-revoke"),
    path("webhooks/", webhook_views.WebhooksView.as_view(), name="webhooks"),
    path("webhooks/<uuid:pk>/active/", webhook_views.WebhookActiveView.as_view(), name="webhook-active"),
    path(
        "webhooks/<uuid:pk>/rotate-secret/", webhook_views.WebhookRotateView.as_view(), name="webhook-rotate"
    ),
    path("webhooks/<uuid:pk>/delete/", webhook_views.WebhookDeleteView.as_view(), name="webhook-delete"),
    path("webhooks/deliveries/", webhook_views.WebhookDeliveriesView.as_view(), name="webhook-deliveries"),
    path(
        "webhooks/deliveries/<uuid:pk>/", webhook_views.WebhookDeliveryView.as_view(), name="webhook-delivery"
    ),
    path(
        "webhooks/deliveries/<uuid:pk>/resend/",
        webhook_views.WebhookResendView.as_view(),
        name="webhook-resend",
    ),
]
