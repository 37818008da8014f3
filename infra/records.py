"""Admin building blocks every app's admin uses: the desk's read-only view of records the
services keep (the audit trail, access grants), and an admin action's one answer (a reason,
a checked fingerprint) asked on a page of its own."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse


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


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)


def ask_reason(
    admin_view: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    explanation: str,
    form_class: type[forms.Form] = ReasonForm,
) -> tuple[str | None, HttpResponse | None]:
    """An admin action's one answer (a reason, by default): (answer, None) once given, else
    (None, the page asking for it)."""
    (field,) = form_class.base_fields
    form = form_class(request.POST if field in request.POST else None)
    if form.is_valid():
        return form.cleaned_data[field], None
    page = TemplateResponse(
        request,
        "admin/reason_action.html",
        {
            **admin_view.admin_site.each_context(request),
            "title": title,
            "explanation": explanation,
            "items": queryset,
            "form": form,
            "action": action,
            "opts": admin_view.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        },
    )
    return None, page
