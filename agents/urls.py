from django.urls import path

from agents import config_views, views

app_name = "agents"
urlpatterns = [
    path("", views.InboxView.as_view(), name="inbox"),
    path("start/", views.StartWorkView.as_view(), name="start"),
    path("questions/<uuid:pk>/answer/", views.QuestionAnswerView.as_view(), name="question-answer"),
    path("questions/<uuid:pk>/decide/", views.ApprovalDecideView.as_view(), name="approval-decide"),
    path("runs/", views.RunListView.as_view(), name="run-list"),
    path("runs/<uuid:pk>/", views.RunDetailView.as_view(), name="run"),
    path("runs/<uuid:pk>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("agents/<uuid:pk>/", views.AgentDetailView.as_view(), name="agent"),
    path("agents/<uuid:pk>/runs/", views.RunStartView.as_view(), name="run-start"),
    path("agents/<uuid:pk>/system-message/", views.SystemMessagePreviewView.as_view(), name="system-message"),
    # Operator configuration pages (agents/config_views.py).
    path("agents/", config_views.AgentListView.as_view(), name="agent-list"),
    path("agents/new/", config_views.AgentCreateView.as_view(), name="agent-create"),
    path("agents/<uuid:pk>/edit/", config_views.AgentUpdateView.as_view(), name="agent-edit"),
    path(
        "agents/<uuid:pk>/host-name/verify/",
        config_views.AgentHostNameVerifyView.as_view(),
        name="agent-host-name-verify",
    ),
    path("tools/", config_views.ToolListView.as_view(), name="tool-list"),
    path("tools/new/", config_views.ToolCreateView.as_view(), name="tool-create"),
    path("tools/<int:pk>/edit/", config_views.ToolUpdateView.as_view(), name="tool-edit"),
    path("models/", config_views.ModelEndpointListView.as_view(), name="model-list"),
    path("models/new/", config_views.ModelEndpointCreateView.as_view(), name="model-create"),
    path("models/<int:pk>/edit/", config_views.ModelEndpointUpdateView.as_view(), name="model-edit"),
]
