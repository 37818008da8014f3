from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from config.health import health

admin.site.site_header = "GPU lots — operator desk"
admin.site.site_title = "GPU lots"

urlpatterns = [
    # The booking pages arrive with the booking issue; until then the operator desk is home.
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("healthz", health, name="health"),
]
