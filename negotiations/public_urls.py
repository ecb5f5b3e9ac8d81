"""Pages of negotiations for anyone, outside every organisation: checking a settlement receipt."""

from django.urls import path

from negotiations import views

app_name = "receipts"
urlpatterns = [
    path("verify/", views.ReceiptVerifyView.as_view(), name="verify"),
]
