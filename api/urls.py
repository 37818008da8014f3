from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from api import views

app_name = "api"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file of its own: no inline script,
    # as the Content-Security-Policy requires.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    path("kinds/", views.KindsView.as_view(), name="kinds"),
    path("environments/", views.EnvironmentsView.as_view(), name="environments"),
    path("availability/", views.AvailabilityView.as_view(), name="availability"),
    path("advisor/", views.AdvisorView.as_view(), name="advisor"),
    path("orders/", views.OrdersView.as_view(), name="orders"),
    path("orders/<str:reference>/", views.OrderView.as_view(), name="order"),
    path("orders/<str:reference>/cancel/", views.CancelView.as_view(), name="cancel"),
    path("orders/<str:reference>/extensions/", views.ExtensionsView.as_view(), name="extensions"),
    path(
        "orders/<str:reference>/credits/<int:credit>/",
        views.CreditView.as_view(),
        name="credit",
    ),
    path(
        "orders/<str:reference>/checkpoints/<int:position>/outcome/",
        views.CheckpointOutcomeView.as_view(),
        name="checkpoint_outcome",
    ),
    path("orders/<str:reference>/early-end/", views.EarlyEndView.as_view(), name="early_end"),
    path("orders/<str:reference>/billing/", views.BillingView.as_view(), name="billing"),
    path("orders/<str:reference>/ssh-keys/", views.SshKeysView.as_view(), name="ssh_keys"),
    path("orders/<str:reference>/invoice/", views.InvoiceView.as_view(), name="invoice"),
    path("orders/<str:reference>/claim/", views.ClaimView.as_view(), name="claim"),
    path("orders/<str:reference>/refunds/", views.RefundsView.as_view(), name="refunds"),
    path(
        "orders/<str:reference>/refund-address/",
        views.RefundAddressView.as_view(),
        name="refund_address",
    ),
    path(
        "orders/<str:reference>/provisioning/",
        views.ProvisioningView.as_view(),
        name="provisioning",
    ),
    path("orders/<str:reference>/report/", views.ReportView.as_view(), name="report"),
    path("orders/<str:reference>/receipt/", views.ReceiptView.as_view(), name="receipt"),
    path(
        "orders/<str:reference>/split-tests/",
        views.SplitTestsView.as_view(),
        name="split_tests",
    ),
    # Last: whatever else is asked under /api/v1/ is a JSON 404.
    re_path(r"^", views.NoSuchEndpoint.as_view(), name="no_such_endpoint"),
]
