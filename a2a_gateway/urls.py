"""Dashboard pages of the public face, under ``/t/<tenant>/``."""

from django.urls import path

from a2a_gateway import views

app_name = "a2a_gateway"
urlpatterns = [
    path("intake/", views.IntakeRequestListView.as_view(), name="intake"),
]
