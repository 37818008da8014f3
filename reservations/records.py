"""The desk's read-only view of records the services keep (the audit trail, access grants),
shared by the apps' admins."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class RecordAdmin(admin.ModelAdmin):
    """A record the services keep: read in the desk, never added, edited or deleted there."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """Such records on their parent's page: a table to read, in a region that scrolls
    sideways on a phone and takes the keyboard's focus (tabular_region.html)."""

    extra = 0
    template = "admin/edit_inline/tabular_region.html"
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
