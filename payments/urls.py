from django.urls import path

from payments import views

app_name = "payments"

urlpatterns = [
    path("orders/<str:reference>/<str:secret>/payment/", views.panel, name="panel"),
    path("orders/<str:reference>/<str:secret>/payment/asset/", views.choose_asset, name="asset"),
    path("orders/<str:reference>/<str:secret>/payment/paid/", views.claim, name="claim"),
    path(
        "orders/<str:reference>/<str:secret>/payment/refund-address/",
        views.refund_address,
        name="refund_address",
    ),
    path("orders/<str:reference>/<str:secret>/receipt/", views.receipt, name="receipt"),
    path("orders/<str:reference>/<str:secret>/receipt.pdf", views.receipt_pdf, name="receipt_pdf"),
]
