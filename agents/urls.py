from django.urls import path

from agents import views

app_name = "agents"
urlpatterns = [
    path("", views.InboxView.as_view(), name="inbox"),
    path("questions/<uuid:pk>/answer/", views.QuestionAnswerView.as_view(), name="question-answer"),
    path("runs/<uuid:pk>/", views.RunDetailView.as_view(), name="run"),
    path("agents/<uuid:pk>/", views.AgentDetailView.as_view(), name="agent"),
]
