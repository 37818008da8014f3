"""The researcher's own split test on the report page (issue 16): beside the acceptance
result, the newest uploaded split test of the order for this lot, in the page's language
with its figures, a warning when a CPU stand-in measured it, how to run one when none was
uploaded, and its raw JSON for the order's link holder only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from accounts.models import User
from provisioning.models import ProvisioningJob, SplitTest
from provisioning.split_tests import attach_split_test
from reservations.models import Order
from reservations.services import Actor
from tests.conftest import RequestFactory
from tests.provisioning import split_test_reports, v2_reports
from tests.provisioning.test_provisioning import paid_order
from tests.provisioning.test_report_page import delivered, page

pytestmark = pytest.mark.django_db

RESEARCHER = Actor("ada@example.org")


def section(html: str) -> str:
    found = re.search(r'<section aria-labelledby="own-job".*?</section>', html, re.S)
    assert found, "no section for the researcher's own job"
    return found.group(0)


def uploaded(job: ProvisioningJob, report: dict[str, Any]) -> SplitTest:
    return attach_split_test(job.order, report, actor=RESEARCHER)


@pytest.fixture
def job(make_request: RequestFactory, tmp_path: Path) -> ProvisioningJob:
    made: ProvisioningJob = delivered(make_request, tmp_path, v2_reports.report())
    return made


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        (
            "en",
            (
                "Your own job: one card, then two",
                "Your job: 1.7× shorter step on two cards; exchange 18.0 % of the step.",
                "A step is shorter on two cards than on one.",
                "41.2 ms",
                "24.2 ms",
                "776.7 samples/s",
                "1322.3 samples/s",
                "3.2 GiB",
                "1.9 GiB / 2.1 GiB",
                "1.04",
            ),
        ),
        (
            "de",
            (
                "Ihr eigener Job: eine Karte, dann zwei",
                "Ihr Job: 1,7× kürzerer Schritt auf zwei Karten; Austausch 18,0 % des Schritts.",
                "Ein Schritt ist auf zwei Karten kürzer als auf einer.",
                "41,2 ms",
                "24,2 ms",
                "776,7 Samples/s",
                "1322,3 Samples/s",
                "3,2 GiB",
                "1,9 GiB / 2,1 GiB",
                "1,04",
            ),
        ),
        (
            "fr",
            (
                "Votre propre tâche : une carte, puis deux",
                "Votre tâche : pas 1,7× plus court sur deux cartes ; échange 18,0 % du pas.",
                "Un pas est plus court sur deux cartes que sur une.",
                "41,2 ms",
                "24,2 ms",
                "776,7 échantillons/s",
                "3,2 GiB",
                "1,9 GiB / 2,1 GiB",
                "1,04",
            ),
        ),
    ],
)
def test_the_page_shows_the_split_test_in_the_pages_language(
    client: Client, job: ProvisioningJob, language: str, expected: tuple[str, ...]
) -> None:
    uploaded(job, split_test_reports.report(job=job.pk))
    shown = section(page(client, job, language))
    for text in expected:
        assert text in shown, text
    assert "python train.py --batch-size {per_rank_batch}" in shown
    assert 'data-testid="split-stand-in"' not in shown
    assert 'data-testid="split-how-to"' not in shown
    assert '<th scope="row">' in shown
    assert '<th scope="col"' in shown
    if language != "en":
        for english in ("Your job", "shorter step", "samples/s", "Median step time", "Uploaded"):
            assert english not in shown, english


@pytest.mark.parametrize(
    ("language", "warning"),
    [
        ("en", "Measured on a CPU stand-in, not on the cards"),
        ("de", "Auf einem CPU-Ersatz gemessen, nicht auf den Karten"),
        ("fr", "Mesuré sur un substitut CPU, pas sur les cartes"),
    ],
)
def test_a_stand_in_split_test_is_said_plainly(
    client: Client, job: ProvisioningJob, language: str, warning: str
) -> None:
    uploaded(job, split_test_reports.report(stand_in=True))  # no job named: the order's
    shown = section(page(client, job, language))
    assert 'data-testid="split-stand-in"' in shown
    assert warning in shown


def test_the_newest_split_test_of_this_lot_is_shown(
    client: Client, job: ProvisioningJob, make_request: RequestFactory
) -> None:
    uploaded(job, split_test_reports.report(job=job.pk))
    newest = uploaded(job, split_test_reports.bigger_batch())
    other_order = paid_order(make_request, inventory=False)
    attach_split_test(other_order, split_test_reports.two_cards_out_of_memory(), actor=RESEARCHER)
    shown = section(page(client, job, "en"))
    assert "Your job: 1.8× the samples per second on two cards (twice the global batch)" in shown
    assert "1.7×" not in shown
    assert "Twice the global batch on two cards (the same batch per card) processes more" in shown
    json_url = reverse(
        "provisioning:split_test_json", args=[job.order.reference, job.order.secret, newest.pk]
    )
    assert f'href="{json_url}"' in shown


def test_missing_figures_say_not_measured_and_an_unknown_code_falls_back_to_the_answer(
    client: Client, job: ProvisioningJob
) -> None:
    uploaded(job, split_test_reports.two_cards_out_of_memory(job=job.pk))
    shown = section(page(client, job, "en"))
    assert "Your job: not measured on two cards (out of memory)." in shown
    assert 'data-testid="split-verdict">Not answered<' in shown
    assert "out of memory" in shown.split("<tbody>")[1]
    german = section(page(client, job, "de"))
    assert "Ihr Job: auf zwei Karten nicht gemessen (Speicher erschöpft)." in german


@pytest.mark.parametrize(
    ("language", "how_to"),
    [
        ("en", "Run it in your account"),
        ("de", "Führen Sie ihn in Ihrem Konto aus"),
        ("fr", "Lancez-le dans votre compte"),
    ],
)
def test_without_a_split_test_the_page_says_how_to_run_one(
    client: Client, job: ProvisioningJob, make_request: RequestFactory, language: str, how_to: str
) -> None:
    other_order = paid_order(make_request, inventory=False)
    attach_split_test(other_order, split_test_reports.report(), actor=RESEARCHER)
    shown = section(page(client, job, language))
    assert 'data-testid="split-how-to"' in shown
    assert how_to in shown
    assert job.order.hypothesis != "bigger_batch"
    # As the tool asks: the batch said (the same global batch for this hypothesis).
    assert (
        "<code>gpulots split-test --global-batch 32 -- python train.py --batch-size "
        "{per_rank_batch}</code>" in shown
    )
    assert 'href="/tools/gpulots.py"' in shown
    assert "--upload" in shown
    assert "split-tests/" not in shown


def test_the_raw_json_is_for_the_orders_link_holder_only(
    client: Client, job: ProvisioningJob, make_request: RequestFactory
) -> None:
    report = split_test_reports.report(job=job.pk, reference=job.order.reference)
    split_test = uploaded(job, report)
    order = job.order
    with translation.override("en"):
        json_url = reverse(
            "provisioning:split_test_json", args=[order.reference, order.secret, split_test.pk]
        )
        wrong_secret = reverse(
            "provisioning:split_test_json", args=[order.reference, "x" * 22, split_test.pk]
        )
        other: Order = paid_order(make_request, inventory=False)
        others_link = reverse(
            "provisioning:split_test_json", args=[other.reference, other.secret, split_test.pk]
        )
    assert f'href="{json_url}"' in section(page(client, job, "en"))

    response = client.get(json_url)
    assert response.status_code == 200
    assert response.json() == report
    assert response["Content-Disposition"] == (
        f'attachment; filename="{order.reference}-split-test-{split_test.pk}.json"'
    )
    assert client.get(wrong_secret).status_code == 404
    assert client.get(others_link).status_code == 404


def test_the_order_page_counts_the_split_tests_and_gives_the_newest(
    client: Client, job: ProvisioningJob
) -> None:
    order = job.order
    url = reverse("pages:order", args=[order.reference, order.secret])
    assert 'data-testid="split-tests"' not in client.get(url).content.decode()
    uploaded(job, split_test_reports.bigger_batch(job=job.pk))
    uploaded(job, split_test_reports.report(job=job.pk))
    html = client.get(url).content.decode()
    line = re.search(r'<p data-testid="split-tests">.*?</p>', html, re.S)
    assert line, html
    assert "2 split tests of your own job uploaded" in line.group(0)
    assert "Your job: 1.7× shorter step on two cards" in line.group(0)


def test_the_desk_lists_split_tests_read_only_and_shows_them_on_the_order(
    client: Client, job: ProvisioningJob
) -> None:
    split_test = uploaded(job, split_test_reports.report(job=job.pk, stand_in=True))
    client.force_login(User.objects.create_superuser("operator@example.org", "a-long-password-1"))
    listed = client.get(
        "/admin/provisioning/splittest/", {"q": job.order.reference}
    ).content.decode()
    assert f"/admin/provisioning/splittest/{split_test.pk}/change/" in listed
    assert "shorter" in listed
    assert "1.7" in listed
    shown = client.get(f"/admin/provisioning/splittest/{split_test.pk}/change/")
    assert shown.status_code == 200
    text = shown.content.decode()
    assert "Your job: 1.7× shorter step on two cards" in text
    assert "measured on a CPU stand-in" in text
    assert 'name="_save"' not in text  # a record: nothing to edit
    json_url = reverse(
        "provisioning:split_test_json", args=[job.order.reference, job.order.secret, split_test.pk]
    )
    assert json_url in text
    order_page = client.get(f"/admin/reservations/order/{job.order.pk}/change/").content.decode()
    assert json_url in order_page
    assert str(job.lot) in order_page
