"""The site's addresses: the composition root, the one module that names every entry point."""

from django.conf.urls.i18n import i18n_patterns
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from desk.health import health
from provisioning.views import split_test_tool

handler500 = "infra.outages.server_error"

urlpatterns = [
    path("admin/", include("desk.urls")),
    path("healthz", health, name="health"),
    path("api/v1/webhooks/", include("webhooks.api_urls")),
    path("api/v1/", include("api.urls")),
    # The split-test command of every delivered account, for anywhere else (no language).
    path("tools/gpulots.py", split_test_tool, name="split_test_tool"),
    # Browsers ask for /favicon.ico whatever the page links; the icon is a static file.
    path(
        "favicon.ico",
        RedirectView.as_view(url=lazy(static, str)("img/favicon.ico"), permanent=True),
        name="favicon",
    ),
]
urlpatterns += i18n_patterns(
    path("", include("pages.urls")),
    path("", include("payments.urls")),
    path("", include("provisioning.urls")),
    path("account/", include("accounts.urls")),
    path("account/tokens/", include("api.token_urls")),
    path("account/webhooks/", include("webhooks.urls")),
)
