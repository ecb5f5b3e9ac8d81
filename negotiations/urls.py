from django.urls import path

from negotiations import views

app_name = "negotiations"
urlpatterns = [
    path("negotiations/", views.NegotiationListView.as_view(), name="list"),
    path("negotiations/<uuid:pk>/", views.NegotiationDetailView.as_view(), name="detail"),
    path("negotiations/<uuid:pk>/prompt/", views.DecisionPromptView.as_view(), name="prompt"),
    path("negotiations/<uuid:pk>/answer/", views.NegotiationAnswerView.as_view(), name="answer"),
    path("negotiations/<uuid:pk>/receipt/", views.ReceiptDownloadView.as_view(), name="receipt"),
]
