from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path("", views.InboxView.as_view(), name="inbox"),
    path("questions/<uuid:pk>/answer/", views.QuestionAnswerView.as_view(), name="question-answer"),
    path("questions/<uuid:pk>/decide/", views.ApprovalDecideView.as_view(), name="approval-decide"),
    path("runs/<uuid:pk>/", views.RunDetailView.as_view(), name="run"),
    path("runs/<uuid:pk>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("agents/<uuid:pk>/", views.AgentDetailView.as_view(), name="agent"),
    path("agents/<uuid:pk>/runs/", views.RunStartView.as_view(), name="run-start"),
    path("agents/<uuid:pk>/system-message/", views.SystemMessagePreviewView.as_view(), name="system-message"),
]
