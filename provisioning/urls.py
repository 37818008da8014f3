from django.urls import path

from provisioning import views

app_name = "provisioning"

urlpatterns = [
    path("orders/<str:reference>/<str:secret>/live/", views.live, name="live"),
    path("orders/<str:reference>/<str:secret>/report/<int:job_id>/", views.report, name="report"),
    path(
        "orders/<str:reference>/<str:secret>/report/<int:job_id>/json/",
        views.report_json,
        name="report_json",
    ),
    path(
        "orders/<str:reference>/<str:secret>/split-tests/<int:split_test_id>/json/",
        views.split_test_json,
        name="split_test_json",
    ),
]
