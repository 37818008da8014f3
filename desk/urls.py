"""The operator desk under /admin/: its home page "Today" (which keeps the admin's list of
models below it), the occupancy timeline, and the admin's own pages."""

from django.contrib import admin
from django.urls import path

from desk.timeline import timeline_view
from desk.today import today_view

admin.site.site_header = "GPU lots — operator desk"
admin.site.site_title = "GPU lots"
# No model sidebar: at 1366 px it leaves a list ~700 px beside the filters. Today lists the
# models, and the breadcrumbs lead back to it.
admin.site.enable_nav_sidebar = False

urlpatterns = [
    path("", admin.site.admin_view(today_view), name="desk_today"),
    path("timeline/", admin.site.admin_view(timeline_view), name="desk_timeline"),
    path("", admin.site.urls),
]
