"""Dashboard pages of the representative face, under ``/t/<tenant>/``."""

from django.urls import path

from representative import views

app_name = "representative"
urlpatterns = [
    path("intake/", views.IntakeRequestListView.as_view(), name="intake"),
    # An agent's grounding documents, for its operators.
    path("agents/<uuid:pk>/documents/", views.GroundingDocumentsView.as_view(), name="documents"),
    path("documents/<int:pk>/edit/", views.GroundingDocumentEditView.as_view(), name="document-edit"),
    path("documents/<int:pk>/delete/", views.GroundingDocumentDeleteView.as_view(), name="document-delete"),
]
