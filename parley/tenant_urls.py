"""Dashboard pages of the tenant itself, under ``/t/<tenant>/``: its members and its API keys."""

from django.urls import path

from parley import views

app_name = "tenant"
urlpatterns = [
    path("members/", views.MembersView.as_view(), name="members"),
    path("members/add/", views.MemberAddView.as_view(), name="member-add"),
    path("members/new/", views.MemberCreateView.as_view(), name="member-create"),
    path("members/<int:pk>/role/", views.MemberRoleView.as_view(), name="member-role"),
    path("members/<int:pk>/remove/", views.MemberRemoveView.as_view(), name="member-remove"),
    path("api-keys/", views.ApiKeysView.as_view(), name="api-keys"),
    path("api-keys/<int:pk>/revoke/", views.ApiKeyRevokeView.as_view(), name="api-key-revoke"),
]
