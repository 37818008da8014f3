"""/api/v1/webhooks/ (included by config.urls before the API's own addresses)."""

from django.urls import path

from webhooks import api

app_name = "webhooks_api"

urlpatterns = [
    path("", api.EndpointsView.as_view(), name="endpoints"),
    path("event-types/", api.EventTypesView.as_view(), name="event_types"),
    path("<str:endpoint_id>/", api.EndpointView.as_view(), name="endpoint"),
    path("<str:endpoint_id>/rotate-secret/", api.RotateView.as_view(), name="rotate"),
    path("<str:endpoint_id>/test/", api.TestEventView.as_view(), name="test"),
    path("<str:endpoint_id>/deliveries/", api.DeliveriesView.as_view(), name="deliveries"),
    path(
        "<str:endpoint_id>/deliveries/<int:delivery_id>/redeliver/",
        api.RedeliverView.as_view(),
        name="redeliver",
    ),
]
