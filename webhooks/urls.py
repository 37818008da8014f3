"""The account's webhook pages (/<language>/account/webhooks/)."""

from django.urls import path

from webhooks import views

app_name = "webhooks"

urlpatterns = [
    path("", views.endpoints, name="endpoints"),
    path("<str:endpoint_id>/", views.endpoint, name="endpoint"),
    path("<str:endpoint_id>/rotate-secret/", views.rotate, name="rotate"),
    path("<str:endpoint_id>/test/", views.send_test, name="test"),
    path("<str:endpoint_id>/delete/", views.delete, name="delete"),
    path(
        "<str:endpoint_id>/deliveries/<int:delivery_id>/redeliver/",
        views.redeliver,
        name="redeliver",
    ),
]
