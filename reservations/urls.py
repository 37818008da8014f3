from django.urls import path

from reservations import campaign_views, self_service, views

app_name = "reservations"

urlpatterns = [
    path("", views.landing, name="landing"),
    path("book/", views.book_plan, name="book_plan"),
    path("book/quote/", views.book_quote, name="book_quote"),
    path("book/contact/", views.book_contact, name="book_contact"),
    path("book/review/", views.book_review, name="book_review"),
    path("book/next-start/", views.book_next_start, name="book_next_start"),
    path("orders/<str:reference>/<str:secret>/", views.order_detail, name="order"),
    path("orders/<str:reference>/<str:secret>/cancel/", self_service.cancel, name="order_cancel"),
    path(
        "orders/<str:reference>/<str:secret>/ssh-keys/",
        self_service.change_keys,
        name="order_ssh_keys",
    ),
    path(
        "orders/<str:reference>/<str:secret>/checkpoints/<int:position>/outcome/",
        campaign_views.record_outcome,
        name="checkpoint_outcome",
    ),
    path(
        "orders/<str:reference>/<str:secret>/early-end/",
        campaign_views.request_early_end,
        name="early_end",
    ),
    path(
        "orders/<str:reference>/<str:secret>/confirm/<str:token>/",
        views.confirm_contact,
        name="confirm_contact",
    ),
]
