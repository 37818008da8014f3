"""Provisioning in the operator's desk: jobs with their step, error and report; retry, hold
and release call the services, like everything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from infra.records import ReadOnlyInline, RecordAdmin
from provisioning import services
from provisioning.models import AccessGrant, ProvisioningJob, SplitTest
from provisioning.report import part, split_test_summary
from reservations.services import Actor


def report_summary(job: ProvisioningJob) -> str:
    """The report's answer and key figures, and links to the full page and the raw JSON."""
    report: Any = job.report
    if not isinstance(report, dict):
        return "-"
    links = format_html(
        '<a href="{}">full report</a> · <a href="{}">raw JSON</a>',
        reverse("provisioning:report", args=[job.order.reference, job.order.secret, job.pk]),
        reverse("provisioning:report_json", args=[job.order.reference, job.order.secret, job.pk]),
    )
    devices = report.get("devices")
    if isinstance(devices, dict) and devices.get("ok") is False:
        return format_html(
            "<strong>wrong devices: nothing measured, access held</strong> ({})<p>{}</p>",
            links,
            devices.get("problem", ""),
        )
    if isinstance(report.get("version"), int) and report["version"] >= 2:
        return _acceptance_summary(report, links)
    if "error" in report:
        return format_html(
            "<strong>benchmark crashed</strong> ({})<pre>{}</pre>", links, report["error"]
        )
    split = report.get("split_test", {})
    one, two = split.get("one_card", {}), split.get("two_cards", {})
    rows = [
        ("verdict", report.get("verdict", {}).get("answer", "-")),
        (
            "step time, one card / two (ms)",
            f"{one.get('median_step_ms')} / {two.get('median_step_ms')}",
        ),
        ("peak memory per card, two cards (GB)", two.get("peak_memory_gb")),
        ("share of the step in the exchange", two.get("exchange_share")),
        ("cards unbalanced", two.get("imbalanced")),
        ("stack", _stack(report.get("stack", {}))),
    ]
    table = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
    return format_html("<table>{}</table><p>{}</p>", table, links)


def _acceptance_summary(report: dict[str, Any], links: SafeString) -> SafeString:
    """A version-2 report in the desk: the acceptance result, what failed and why, whether
    a CPU stand-in measured it, the verdict, the step times (REPORT_V2.md)."""
    acceptance = part(report, "acceptance")
    passed = acceptance.get("passed")
    split = part(report, "split")
    one, two = split.get("one_card") or {}, split.get("two_cards") or {}
    verdict = part(report, "verdict")
    rows = [
        (
            "acceptance",
            "passed" if passed is True else "FAILED" if passed is False else "nothing checked",
        ),
        ("failed checks", "; ".join(map(str, acceptance.get("failed") or [])) or "-"),
        ("exit code", report.get("exit_code")),
        ("complete", report.get("complete")),
        ("CPU stand-in", report.get("stand_in")),
        ("verdict", f"{verdict.get('answer', '-')} ({verdict.get('code', '-')})"),
        (
            "step time, one card / two (ms)",
            f"{one.get('median_step_ms')} / {two.get('median_step_ms')}",
        ),
        ("share of the step in the exchange", two.get("exchange_share")),
    ]
    if "error" in report:
        rows.append(("error", report["error"]))
    table = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
    return format_html("<table>{}</table><p>{}</p>", table, links)


def _stack(stack: dict[str, Any]) -> str:
    kernels = stack.get("kernel_check", [])
    failing = [k.get("device") for k in kernels if isinstance(k, dict) and not k.get("ok")]
    return (
        f"PyTorch {stack.get('torch')}, CUDA {stack.get('cuda')}, HIP {stack.get('hip')}, "
        f"driver {stack.get('driver')}; {stack.get('expected_arch')} in the build: "
        f"{stack.get('arch_supported')}; "
        + (f"kernels FAIL on {', '.join(map(str, failing))}" if failing else "kernels run")
    )


def _each(
    admin_view: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[ProvisioningJob],
    service: Callable[..., bool],
    done: str,
    refused: str,
) -> None:
    actor = Actor.of(request.user)  # type: ignore[arg-type]
    for job in queryset.select_related("order", "lot__host"):
        if service(job, actor=actor):
            admin_view.message_user(request, f"{job}: {done}", messages.SUCCESS)
        else:
            admin_view.message_user(request, f"{job}: {refused}", messages.WARNING)


ERROR_SHOWN = 120
"""Characters of a job's error shown in the list."""


@admin.register(ProvisioningJob)
class ProvisioningJobAdmin(admin.ModelAdmin):
    list_display = (
        "order",
        "lot",
        "status",
        "access_held",
        "steps_done",
        "attempts",
        "heartbeat_at",
        "error_line",
    )
    list_filter = ("status", "access_held")
    search_fields = ("order__reference",)
    list_select_related = ("order", "lot__host")
    actions = ("retry", "hold", "release")
    exclude = ("report",)

    @admin.display(description="error")
    def error_line(self, job: ProvisioningJob) -> str:
        """The error's last line (a traceback's is the exception), cut to fit the list; the
        whole text is on the job's page."""
        lines = job.error.strip().splitlines()
        if not lines:
            return ""
        last = lines[-1]
        return format_html(
            '<span class="desk-wrap" title="{}">{}</span>',
            last,
            last if len(last) <= ERROR_SHOWN else f"{last[: ERROR_SHOWN - 1]}…",
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [field.name for field in ProvisioningJob._meta.fields if field.name != "report"]
        return [*fields, "validation_report"]

    @admin.display(description="validation report")
    def validation_report(self, job: ProvisioningJob) -> str:
        return report_summary(job)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Retry (continues from the last step done)")
    def retry(self, request: HttpRequest, queryset: QuerySet[ProvisioningJob]) -> None:
        _each(self, request, queryset, services.retry_job, "queued again.", "already done.")

    @admin.action(description="Hold access (prepare, but do not deliver)")
    def hold(self, request: HttpRequest, queryset: QuerySet[ProvisioningJob]) -> None:
        _each(
            self,
            request,
            queryset,
            services.hold_access,
            "held: it stops before delivery.",
            "already delivered or already held.",
        )

    @admin.action(description="Release held access (delivers it)")
    def release(self, request: HttpRequest, queryset: QuerySet[ProvisioningJob]) -> None:
        _each(
            self, request, queryset, services.release_access, "released: delivering.", "not held."
        )


class GrantState(admin.SimpleListFilter):
    title = "access"
    parameter_name = "access"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("open", "open (the cards are the order's)"),
            ("failing", "revocation failing (the lot stays closed)"),
            ("closed", "closed"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AccessGrant]) -> Any:
        if self.value() == "open":
            return queryset.filter(closed_at__isnull=True)
        if self.value() == "failing":
            return queryset.filter(closed_at__isnull=True).exclude(revoke_error="")
        if self.value() == "closed":
            return queryset.filter(closed_at__isnull=False)
        return queryset


@admin.register(AccessGrant)
class AccessGrantAdmin(RecordAdmin):
    """Who had which lot's cards, when: kept by the services, never edited by hand."""

    list_display = ("lot", "order", "opened_at", "keys_at", "closed_at", "state")
    list_filter = (GrantState, "lot__host")
    search_fields = ("order__reference", "lot__host__name")
    list_select_related = ("order", "lot__host")
    date_hierarchy = "opened_at"

    @admin.display(description="state")
    def state(self, grant: AccessGrant) -> str:
        if grant.closed_at is not None:
            return "closed"
        if grant.revoke_error:
            return f"revocation failing: {grant.revoke_error[:80]}"
        return "open: keys in" if grant.keys_at else "open: preparing"


def _split_test_json(split_test: SplitTest) -> str:
    order = split_test.order
    return format_html(
        '<a href="{}">raw JSON</a>',
        reverse(
            "provisioning:split_test_json", args=[order.reference, order.secret, split_test.pk]
        ),
    )


@admin.register(SplitTest)
class SplitTestAdmin(RecordAdmin):
    """The researchers' own split tests, as ``gpulots split-test --upload`` sent them: kept
    by provisioning.split_tests, read in the desk, never edited."""

    list_display = ("order", "job", "created_at", "answer", "code", "speedup", "stand_in")
    list_filter = ("answer", "stand_in")
    search_fields = ("order__reference",)
    list_select_related = ("order", "job__order", "job__lot__host")
    date_hierarchy = "created_at"
    fields = (
        "order",
        "job",
        "created_at",
        "answer",
        "code",
        "speedup",
        "stand_in",
        "summary",
        "raw_report",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[SplitTest]:
        return super().get_queryset(request).defer("report")

    @admin.display(description="summary")
    def summary(self, split_test: SplitTest) -> str:
        report = SplitTest.objects.values_list("report", flat=True).get(pk=split_test.pk)
        return split_test_summary(
            report if isinstance(report, dict) else {},
            split_test.order,
            stand_in=split_test.stand_in,
        )

    @admin.display(description="report")
    def raw_report(self, split_test: SplitTest) -> str:
        return _split_test_json(split_test)


class SplitTestInline(ReadOnlyInline):
    """The order's split tests on its page in the desk: newest first, the report a link."""

    model = SplitTest
    fields = ("created_at", "lot", "answer", "code", "speedup", "stand_in", "raw_report")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[SplitTest]:
        return (
            super().get_queryset(request).defer("report").select_related("order", "job__lot__host")
        )

    @admin.display(description="lot")
    def lot(self, split_test: SplitTest) -> str:
        return str(split_test.job.lot) if split_test.job is not None else "-"

    @admin.display(description="report")
    def raw_report(self, split_test: SplitTest) -> str:
        return _split_test_json(split_test)
