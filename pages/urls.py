"""The researcher's pages: the landing page, booking, the order page and its forms."""

from django.urls import path

from pages import booking, campaign, credits, extend, order, self_service

app_name = "pages"

ORDER = "orders/<str:reference>/<str:secret>/"

urlpatterns = [
    path("", booking.landing, name="landing"),
    path("book/", booking.book_plan, name="book_plan"),
    path("book/quote/", booking.book_quote, name="book_quote"),
    path("book/contact/", booking.book_contact, name="book_contact"),
    path("book/review/", booking.book_review, name="book_review"),
    path("book/next-start/", booking.book_next_start, name="book_next_start"),
    path(ORDER, order.order_detail, name="order"),
    path(f"{ORDER}confirm/<str:token>/", order.confirm_contact, name="confirm_contact"),
    path(f"{ORDER}billing/", order.billing, name="billing"),
    path(f"{ORDER}cancel/", self_service.cancel, name="order_cancel"),
    path(f"{ORDER}ssh-keys/", self_service.change_keys, name="order_ssh_keys"),
    path(
        f"{ORDER}checkpoints/<int:position>/outcome/",
        campaign.record_outcome,
        name="checkpoint_outcome",
    ),
    path(f"{ORDER}early-end/", campaign.request_early_end, name="early_end"),
    path(f"{ORDER}extend/", extend.extend, name="order_extend"),
    path(f"{ORDER}again/", extend.book_again, name="book_again"),
    path(f"{ORDER}credits/<int:credit>/", credits.take, name="order_credit"),
]
