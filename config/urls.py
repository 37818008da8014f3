from django.conf.urls.i18n import i18n_patterns
from django.contrib import admin
from django.urls import include, path

from config.desk import timeline_view, today_view
from config.health import health
from provisioning.views import split_test_tool

handler500 = "config.outages.server_error"

admin.site.site_header = "GPU lots — operator desk"
admin.site.site_title = "GPU lots"
# No model sidebar: at 1366 px it leaves a list ~700 px beside the filters. Today lists the
# models, and the breadcrumbs lead back to it.
admin.site.enable_nav_sidebar = False

urlpatterns = [
    # The desk's home page is "Today" (it keeps the list of models below it).
    path("admin/", admin.site.admin_view(today_view), name="desk_today"),
    path("admin/timeline/", admin.site.admin_view(timeline_view), name="desk_timeline"),
    path("admin/", admin.site.urls),
    path("healthz", health, name="health"),
    path("api/v1/", include("api.urls")),
    # The split-test command of every delivered account, for anywhere else (no language).
    path("tools/gpulots.py", split_test_tool, name="split_test_tool"),
]
urlpatterns += i18n_patterns(
    path("", include("reservations.urls")),
    path("", include("payments.urls")),
    path("", include("provisioning.urls")),
    path("account/", include("accounts.urls")),
)
