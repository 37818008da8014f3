"""The version-2 report page (issue 12): fully translated, the acceptance checks as a
pass/fail table with references, shares as percentages, the charts' axes named, the model
that was measured with a notice when it is a CPU stand-in or a scaled-down model, links
back to the order; the API returns the same JSON with its version."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from accounts.models import User
from api.models import ApiToken
from provisioning.models import ProvisioningJob
from reservations.models import Order
from tests.api.test_api import get
from tests.conftest import RequestFactory
from tests.provisioning import v2_reports
from tests.provisioning.clock import run_at_start
from tests.provisioning.test_acceptance_hold import Reporting
from tests.provisioning.test_operator import approved_job

pytestmark = pytest.mark.django_db

ENGLISH = (
    "not measured",
    "A step is shorter on two cards",
    "data parallel",
    ">Yes<",
    ">No<",
    ">True<",
    ">False<",
    "passed",
    "not checked",
    "One card, then two",
    "Hardware acceptance",
    "of the reference",
    "nameplate",
    "GiB usable",
    "message size",
    "Back to the order",
)

EXPECTED = {
    "de": (
        "nicht gemessen: von dieser Karte nicht unterstützt",
        "Ein Schritt ist auf zwei Karten kürzer als auf einer.",
        "bestanden",
        "Nennwert",
        "nutzbar",
        "5,2 %",
        "Nachrichtengröße",
        "eine Karte",
    ),
    "fr": (
        "non mesuré : non pris en charge par cette carte",
        "Un pas est plus court sur deux cartes que sur une.",
        "réussi",
        "nominale",
        "utilisable",
        "5,2 %",
        "taille du message",
        "une carte",
    ),
}


def delivered(make_request: RequestFactory, tmp_path: Path, report: dict[str, Any]) -> Any:
    job = run_at_start(approved_job(make_request).pk, Reporting(tmp_path / "hosts", report))
    assert job.status == ProvisioningJob.Status.READY
    return job


def page(client: Client, job: Any, language: str) -> str:
    with translation.override(language):
        url = reverse("provisioning:report", args=[job.order.reference, job.order.secret, job.pk])
    response = client.get(url)
    assert response.status_code == 200
    content: str = response.content.decode()
    main = re.search(r"<main.*</main>", content, re.S)
    return main.group(0) if main else content


def test_the_english_page_shows_the_checks_with_references_and_units(
    client: Client, make_request: RequestFactory, tmp_path: Path
) -> None:
    job = delivered(make_request, tmp_path, v2_reports.report())
    text = page(client, job, "en")
    assert 'data-testid="checks"' in text
    assert "702.5 TFLOP/s (71" in text  # the value and its share of the datasheet peak
    assert "at least 60.0 % of the reference" in text
    assert "140.4 GiB usable" in text
    assert "141 GiB nameplate" in text
    assert "not measured: not supported by this card" in text
    assert "5.2 %" in text  # the exchange share as a percentage, not 0.052
    assert "All-reduce: bus bandwidth (GB/s) by message size" in text
    assert "1 GiB" in text
    assert "one card against two cards" in text
    assert "A step is shorter on two cards than on one." in text
    assert "data parallel (a copy on each card)" in text
    assert 'data-testid="stand-in"' not in text
    assert 'data-testid="scaled-down"' not in text
    order_url = reverse("pages:order", args=[job.order.reference, job.order.secret])
    assert order_url in text


@pytest.mark.parametrize("language", ["de", "fr"])
def test_the_page_is_translated_without_english_leftovers(
    client: Client, make_request: RequestFactory, tmp_path: Path, language: str
) -> None:
    job = delivered(make_request, tmp_path, v2_reports.report())
    text = page(client, job, language)
    for english in ENGLISH:
        assert english not in text, english
    for expected in EXPECTED[language]:
        assert expected in text, expected


@pytest.mark.parametrize(
    ("language", "stand_in", "scaled_down"),
    [
        ("en", "Measured on a CPU stand-in", "scaled-down model of 263,425 parameters"),
        ("de", "Auf einem CPU-Ersatz gemessen", "verkleinerten Modell mit 263.425 Parametern"),
        ("fr", "Mesuré sur un substitut CPU", "modèle réduit de 263"),
    ],
)
def test_a_stand_in_and_a_scaled_down_model_are_said_plainly(
    client: Client,
    make_request: RequestFactory,
    tmp_path: Path,
    language: str,
    stand_in: str,
    scaled_down: str,
) -> None:
    job = delivered(make_request, tmp_path, v2_reports.stand_in())
    text = page(client, job, language)
    assert 'data-testid="stand-in"' in text
    assert stand_in in text
    assert 'data-testid="scaled-down"' in text
    assert scaled_down in text


def test_the_api_returns_the_same_json_with_its_version(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = delivered(make_request, tmp_path, v2_reports.report())
    owner = User.objects.create_user("ada@example.org")
    Order.objects.filter(pk=job.order_id).update(user=owner)
    token = ApiToken.issue(owner, "pipeline")[1]
    response = get(Client(), f"/api/v1/orders/{job.order.reference}/report/", token)
    assert response.status_code == 200, response.content
    (lot,) = response.json()["lots"]
    assert lot["version"] == 2
    assert lot["report"] == v2_reports.report()


@pytest.mark.parametrize(
    ("language", "verdict", "stand_in"),
    [
        ("en", "Yes: A step is shorter on two cards than on one.", "measured on a CPU stand-in"),
        ("de", "Ja: Ein Schritt ist auf zwei Karten kürzer als auf einer.", "CPU-Ersatz"),
        ("fr", "Oui : Un pas est plus court sur deux cartes que sur une.", "substitut CPU"),
    ],
)
def test_the_order_page_gives_the_verdict_translated_and_says_cpu_stand_in(
    client: Client,
    make_request: RequestFactory,
    tmp_path: Path,
    language: str,
    verdict: str,
    stand_in: str,
) -> None:
    job = delivered(make_request, tmp_path, v2_reports.stand_in())
    with translation.override(language):
        url = reverse("pages:order", args=[job.order.reference, job.order.secret])
    html = client.get(url).content.decode()
    assert verdict in html.replace("&#x27;", "'")
    assert 'data-testid="stand-in"' in html
    assert stand_in in html
