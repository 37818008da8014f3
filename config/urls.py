from django.contrib import admin
from django.urls import path

from config.health import health

admin.site.site_header = "GPU lots — operator desk"
admin.site.site_title = "GPU lots"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health, name="health"),
]
