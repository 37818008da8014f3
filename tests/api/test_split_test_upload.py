"""Uploading the researcher's own split test (issue 16): ``gpulots split-test --upload``
posts its JSON report to /api/v1/orders/<reference>/split-tests/ with the researcher's
token. Stored for the owner's order only, with an audit entry; anything else refused with
a code and nothing stored; the order's split tests listed newest first."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from accounts.models import User
from provisioning.models import ProvisioningJob, SplitTest
from provisioning.split_tests import KEPT_PER_ORDER, SplitTestRefused, attach_split_test
from reservations.models import Order, OrderEvent
from reservations.services import Actor
from tests.api.test_api import get, post
from tests.conftest import RequestFactory
from tests.provisioning import split_test_reports
from tests.provisioning.test_operator import approved_job
from tests.provisioning.test_provisioning import paid_order

pytestmark = pytest.mark.django_db

SUMMARY = "Your job: 1.7× shorter step on two cards; exchange 18.0 % of the step."


def owned_job(make_request: RequestFactory, user: User) -> ProvisioningJob:
    """An approved order of ``user`` with its lot's provisioning job."""
    job = approved_job(make_request)
    Order.objects.filter(pk=job.order_id).update(user=user)
    return job


def url(order: Order) -> str:
    return f"/api/v1/orders/{order.reference}/split-tests/"


def test_the_owner_uploads_a_split_test_of_one_of_its_jobs(
    client: Client, make_request: RequestFactory, ada: tuple[User, str]
) -> None:
    job = owned_job(make_request, ada[0])
    order = job.order
    report = split_test_reports.report(job=job.pk, reference=order.reference)
    events = OrderEvent.objects.filter(order=order).count()

    response = post(client, url(order), report, ada[1])

    assert response.status_code == 201, response.json()
    stored = SplitTest.objects.get()
    body = response.json()
    json_path = reverse(
        "provisioning:split_test_json", args=[order.reference, order.secret, stored.pk]
    )
    assert body == {
        "id": stored.pk,
        "order": order.reference,
        "job": job.pk,
        "created_at": body["created_at"],
        "answer": "yes",
        "code": "shorter",
        "speedup": 1.7,
        "stand_in": False,
        "summary": SUMMARY,
        "report_url": f"{settings.SITE_URL}{json_path}",
    }
    assert body["created_at"].startswith(stored.created_at.strftime("%Y-%m-%dT%H:%M"))
    assert stored.report == report
    assert (stored.order_id, stored.job_id, stored.answer, stored.code) == (
        order.pk,
        job.pk,
        "yes",
        "shorter",
    )
    assert (stored.speedup, stored.stand_in) == (1.7, False)
    assert OrderEvent.objects.filter(order=order).count() == events + 1
    event = OrderEvent.objects.filter(order=order).last()
    assert event is not None
    assert (event.actor, event.actor_label) == (ada[0], "ada@example.org")
    assert event.from_status == event.to_status == Order.STATUS_APPROVED
    assert event.reason == f"split test {stored.pk} uploaded for lot {job.lot}: yes (shorter, 1.7×)"


def test_a_stand_in_without_a_job_is_stored_for_the_order_and_says_so(
    client: Client, make_request: RequestFactory, ada: tuple[User, str]
) -> None:
    order = owned_job(make_request, ada[0]).order
    response = post(client, url(order), split_test_reports.report(stand_in=True), ada[1])
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["job"], body["stand_in"]) == (None, True)
    assert body["summary"] == f"{SUMMARY} (measured on a CPU stand-in, not on the cards)"
    assert SplitTest.objects.get().stand_in is True


def test_another_users_order_is_not_found_and_nothing_is_stored(
    client: Client, make_request: RequestFactory, ada: tuple[User, str], eve: tuple[User, str]
) -> None:
    job = owned_job(make_request, ada[0])
    events = OrderEvent.objects.count()
    report = split_test_reports.report(job=job.pk, reference=job.order.reference)
    refused = post(client, url(job.order), report, eve[1])
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
    listed = get(client, url(job.order), eve[1])
    assert (listed.status_code, listed.json()["code"]) == (404, "not_found")
    assert client.post(url(job.order), json.dumps(report), "application/json").status_code == 401
    assert SplitTest.objects.count() == 0
    assert OrderEvent.objects.count() == events


def _too_large() -> dict[str, Any]:
    made = split_test_reports.report()
    made["host"] = "x" * (300 * 1024)  # a 300 KiB body
    return made


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    made = split_test_reports.report()
    target = made
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return made


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (["not", "an", "object"], "not_a_split_test"),
        ({"version": 2, "acceptance": {"passed": True}}, "not_a_split_test"),
        (_with(("kind",), "validation"), "not_a_split_test"),
        (_with(("version",), 1), "unsupported_version"),
        (_with(("version",), "2"), "unsupported_version"),
        (_with(("split",), [1, 2]), "malformed_split_test"),
        (_with(("verdict",), "yes"), "malformed_split_test"),
        (_with(("order",), "GL-1"), "malformed_split_test"),
        (_with(("host",), "h200\u000001"), "malformed_split_test"),
        (_with(("order", "job"), "17"), "job_not_in_order"),
        (_with(("order", "reference"), "SOMEONEELSE"), "other_order"),
        (_too_large(), "split_test_too_large"),
    ],
)
def test_bad_reports_get_a_code_and_nothing_is_stored(
    client: Client, make_request: RequestFactory, ada: tuple[User, str], body: Any, code: str
) -> None:
    order = owned_job(make_request, ada[0]).order
    events = OrderEvent.objects.count()
    response = post(client, url(order), body, ada[1])
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == code
    assert response.json()["detail"]
    assert SplitTest.objects.count() == 0
    assert OrderEvent.objects.count() == events


def test_a_job_of_another_order_is_refused(
    client: Client, make_request: RequestFactory, ada: tuple[User, str]
) -> None:
    job = owned_job(make_request, ada[0])
    other = ProvisioningJob.objects.create(
        order=paid_order(make_request, inventory=False), lot=job.lot
    )
    response = post(client, url(job.order), split_test_reports.report(job=other.pk), ada[1])
    assert (response.status_code, response.json()["code"]) == (400, "job_not_in_order")
    assert str(other.pk) in response.json()["detail"]
    assert SplitTest.objects.count() == 0


def test_a_report_over_the_bound_is_refused_by_the_service_too() -> None:
    order = Order(reference="GL-TEST")
    made = split_test_reports.report()
    made["host"] = "é" * (130 * 1024)  # 260 KiB of UTF-8 text
    with pytest.raises(SplitTestRefused) as refused:
        attach_split_test(order, made, actor=Actor("ada@example.org"))
    assert refused.value.code == "split_test_too_large"
    assert "256 KiB" in str(refused.value)


def test_a_body_over_the_sites_bound_is_a_json_413_elsewhere(
    client: Client, ada: tuple[User, str]
) -> None:
    huge = post(client, "/api/v1/orders/", {"hypothesis_text": "x" * (300 * 1024)}, ada[1])
    assert (huge.status_code, huge.json()["code"]) == (413, "request_too_large")


def test_the_split_tests_are_listed_newest_first_without_their_reports(
    client: Client, make_request: RequestFactory, ada: tuple[User, str]
) -> None:
    job = owned_job(make_request, ada[0])
    first = post(client, url(job.order), split_test_reports.report(job=job.pk), ada[1]).json()
    second = post(client, url(job.order), split_test_reports.bigger_batch(), ada[1]).json()

    response = get(client, url(job.order), ada[1])

    assert response.status_code == 200
    listed = response.json()
    assert [item["id"] for item in listed] == [second["id"], first["id"]]
    assert listed == [second, first]
    assert listed[0]["summary"] == (
        "Your job: 1.8× the samples per second on two cards (twice the global batch); "
        "exchange 18.0 % of the step."
    )
    assert (listed[0]["code"], listed[0]["speedup"], listed[0]["job"]) == (
        "bigger_batch",
        1.8,
        None,
    )
    assert "report" not in listed[0]


def test_only_the_newest_split_tests_of_an_order_are_kept(
    client: Client, make_request: RequestFactory, ada: tuple[User, str]
) -> None:
    order = owned_job(make_request, ada[0]).order
    actor = Actor.of(ada[0])
    oldest = attach_split_test(order, split_test_reports.report(), actor=actor)
    for _ in range(KEPT_PER_ORDER - 1):
        attach_split_test(order, split_test_reports.report(), actor=actor)
    assert SplitTest.objects.filter(order=order).count() == KEPT_PER_ORDER

    newest = post(client, url(order), split_test_reports.bigger_batch(), ada[1]).json()

    kept = SplitTest.objects.filter(order=order)
    assert kept.count() == KEPT_PER_ORDER == 50
    assert not kept.filter(pk=oldest.pk).exists()
    assert kept.filter(pk=newest["id"]).exists()
    assert len(get(client, url(order), ada[1]).json()) == KEPT_PER_ORDER
    # The audit trail keeps every upload, the pruned one's too.
    assert order.events.filter(reason__startswith="split test ").count() == KEPT_PER_ORDER + 1
