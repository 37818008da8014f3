"""Receipts for a university's accounting: billing details, the numbered receipt of a settled
invoice (page, PDF, mail, API), only behind the order's secret link or its owner's token."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from pypdf import PdfReader

from accounts.models import User
from payments import claims, invoicing, receipts, scanning
from payments.models import Asset, BillingDetails, Chain, Invoice, Receipt, Transfer
from reservations.events import order_paid
from reservations.models import Order
from reservations.services import place_order
from reservations.templatetags.money import units as coin
from tests.concurrency import at_once
from tests.conftest import Payments, RequestFactory, build_inventory, openssh_public_key

pytestmark = pytest.mark.django_db


def settle(payments: Payments, order: Order, asset: Asset) -> tuple[Invoice, str]:
    """Pay the order's invoice in ``asset`` from the dev wallet and let the scanner settle it."""
    if asset.is_native:
        invoicing.refresh_prices(payments.chain)
    invoice = invoicing.create_invoice(order, asset)
    tx_hash = payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    if asset.is_native:  # credited by balance: the hash is known from "I've paid"
        claims.claim_payment(invoice, tx_hash)
        claims.verify_claim(invoice.pk)
    else:
        scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    invoice.refresh_from_db()
    assert invoice.status == Invoice.STATUS_SETTLED
    return invoice, tx_hash


def link(order: Order, language: str = "en") -> str:
    return f"/{language}/orders/{order.reference}/{order.secret}"


def pdf_text(body: bytes) -> str:
    reader = PdfReader(io.BytesIO(body))
    return "\n".join(page.extract_text() for page in reader.pages)


def test_a_paid_order_gets_a_receipt_with_its_payment(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice, tx_hash = settle(payments, order, payments.eth)
    due = coin(payments.eth.from_units(int(invoice.amount_due)))
    assert "." in due  # a fraction of an ETH, printed exactly from wei

    page = client.get(f"{link(order)}/").content.decode()
    assert 'data-testid="receipt-links"' in page
    response = client.get(f"{link(order)}/receipt/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Receipt R-000001" in html
    assert tx_hash in html
    assert f"{due} ETH" in html

    response = client.get(f"{link(order)}/receipt.pdf")
    assert response["Content-Type"] == "application/pdf"
    assert response["Cache-Control"].startswith("no-store")
    text = pdf_text(response.content)
    assert "Receipt R-000001" in text
    assert order.reference in text
    assert tx_hash in text
    assert f"{due} ETH" in text
    assert "$1,130.00" not in text  # a 3-day H200 lot is not the 7-day price
    assert f"${order.total_usd:,.2f}" in text
    rate = f"{invoice.usd_per_unit.normalize():,f}"
    assert f"1 ETH = ${rate}" in text or f"1 ETH = ${rate}.00" in text
    assert "chain id 31337" in text
    assert "1 lot of 2× NVIDIA H200 141 GB" in text
    assert order.environment.name in text
    assert "GPU lots (local development)" in text  # the issuer, from the settings
    assert "Settled" in text
    assert "Paid" in text
    assert Receipt.objects.get(order=order).invoice_id == invoice.pk


def test_a_native_coin_paid_without_a_named_hash_says_how_it_was_credited(
    client: Client, payments: Payments, order: Order
) -> None:
    invoicing.refresh_prices(payments.chain)
    invoice = invoicing.create_invoice(order, payments.eth)
    tx_hash = payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    text = pdf_text(client.get(f"{link(order)}/receipt.pdf").content)
    assert tx_hash not in text
    assert "credited by the balance of the address it was paid to" in text
    assert invoice.deposit_address.address in text


def test_a_stablecoin_receipt_names_the_token_contract(
    client: Client, payments: Payments, order: Order
) -> None:
    _invoice, tx_hash = settle(payments, order, payments.usdc)
    text = pdf_text(client.get(f"{link(order)}/receipt.pdf").content)
    assert payments.usdc.contract_address in text
    assert f"{coin(order.total_usd)} USDC" in text
    assert "1 USDC = $1.00" in text
    assert tx_hash in text


def test_receipts_are_numbered_once_in_the_order_they_are_issued(
    client: Client, payments: Payments, order: Order, make_request: RequestFactory
) -> None:
    second = place_order(make_request(lot_count=1, window_days=3, contact_email="bo@example.org"))
    settle(payments, order, payments.usdc)
    settle(payments, second, payments.usdc)
    # Numbered by the order.paid receiver once the payment commits (not in this test's
    # transaction, which never commits): here at the first issue, in the order of issue.
    assert Receipt.objects.count() == 0

    client.get(f"{link(second)}/receipt/")
    client.get(f"{link(order)}/receipt.pdf")
    client.get(f"{link(second)}/receipt.pdf")
    assert Receipt.objects.get(order=second).number == 1
    assert Receipt.objects.get(order=order).number == 2
    assert "Receipt R-000001" in pdf_text(client.get(f"{link(second)}/receipt.pdf").content)

    first = Receipt.objects.get(order=second)
    with pytest.raises(IntegrityError), transaction.atomic():
        Receipt.objects.filter(order=order).update(number=first.number)


@pytest.mark.django_db(transaction=True)
def test_a_paid_order_is_numbered_its_receipt_at_once_and_the_desk_shows_it(
    client: Client, committed_payments: Payments, make_request: RequestFactory
) -> None:
    """Nobody opened the receipt: the desk's order page shows the same receipt the order
    page links, not an empty Receipt section."""
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    settle(committed_payments, order, committed_payments.usdc)
    receipt = Receipt.objects.get(order=order)
    assert receipt.number == 1
    operator = User.objects.create_superuser("operator@example.org", "a-long-operator-password")
    client.force_login(operator)
    page = client.get(f"/admin/reservations/order/{order.pk}/change/").content.decode()
    assert "R-000001" in page
    assert f"{link(order)}/receipt.pdf" in page


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_issues_take_one_number_each_none_skipped(
    committed_payments: Payments,
    make_request: RequestFactory,
    soon: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without the order.paid receiver, which numbers each receipt as its payment commits:
    # here the first issues race each other (as a page view races the receiver).
    monkeypatch.delitem(order_paid._receivers, "payments: number the receipt of a paid order")
    build_inventory()
    orders = []
    for i in range(4):
        starts_at = soon + timedelta(days=4 * i)
        request = make_request(
            window_days=3, starts_at=starts_at, contact_email=f"r{i}@example.org"
        )
        orders.append(place_order(request))
        settle(committed_payments, orders[-1], committed_payments.usdc)

    def first_issue(index: int) -> int:
        issued = receipts.issue_receipt(Order.objects.get(pk=orders[index % 4].pk))
        assert issued is not None
        return issued.number

    outcomes = at_once(8, first_issue)  # two requests at once for each order
    assert not [o for o in outcomes if isinstance(o, Exception)]
    numbers = dict(Receipt.objects.values_list("order_id", "number"))
    assert sorted(numbers.values()) == [1, 2, 3, 4]
    assert sorted(outcomes) == sorted([*numbers.values(), *numbers.values()])  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("language", "title", "labels"),
    [
        ("de", "Quittung", ("Rechnungsempfänger", "Gebucht", "Zeitfenster", "Transaktion")),
        ("fr", "Reçu", ("Facturé à", "Réservé", "Fenêtre", "Transaction")),
    ],
)
def test_the_receipt_is_in_the_orders_language(
    client: Client,
    payments: Payments,
    make_request: RequestFactory,
    language: str,
    title: str,
    labels: tuple[str, ...],
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3, language=language))
    _invoice, tx_hash = settle(payments, order, payments.usdc)
    # The PDF follows the order's language, whichever page it is asked from.
    text = pdf_text(client.get(f"{link(order, 'en')}/receipt.pdf").content)
    assert f"{title} R-000001" in text
    for label in labels:
        assert label in text
    assert "Receipt" not in text
    assert tx_hash in text
    assert f"{coin(order.total_usd)} USDC" in text
    # The page speaks the page's language.
    assert title in client.get(f"{link(order, language)}/receipt/").content.decode()


def test_an_unpaid_order_has_no_receipt(client: Client, payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice, payments.usdc.from_units(int(invoice.amount_due)) / 2)
    payments.dev.mine(2)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    assert client.get(f"{link(order)}/receipt/").status_code == 404
    assert client.get(f"{link(order)}/receipt.pdf").status_code == 404
    page = client.get(f"{link(order)}/").content.decode()
    assert 'data-testid="receipt-links"' not in page
    assert "/receipt" not in page
    assert Receipt.objects.count() == 0


def test_the_receipt_needs_the_orders_secret(
    client: Client, payments: Payments, order: Order
) -> None:
    settle(payments, order, payments.usdc)
    wrong = f"/en/orders/{order.reference}/{'x' * len(order.secret)}"
    assert client.get(f"{wrong}/receipt/").status_code == 404
    assert client.get(f"{wrong}/receipt.pdf").status_code == 404
    assert client.post(f"{wrong}/billing/", {"billing-vat_id": "DE123456789"}).status_code == 404
    assert Receipt.objects.count() == 0
    assert not BillingDetails.objects.exists()


def test_billing_details_given_when_booking_are_saved_and_printed(
    client: Client, payments: Payments
) -> None:
    build_inventory()
    start = (timezone.now() + timedelta(days=3)).date().isoformat()
    plan = {
        "kind": "h200",
        "lot_count": "1",
        "window_days": "3",
        "start_date": start,
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
    }
    assert client.post("/en/book/", plan).status_code == 302
    contact = {
        "contact_name": "Ada Lovelace",
        "contact_email": "ada@example.org",
        "organisation": "Universität Zürich, Institut für Informatik",
        "ssh_public_keys": openssh_public_key(),
        "billing_address": "Binzmühlestrasse 14\n8050 Zürich\nSwitzerland",
        "vat_id": "che-123.456.789 mwst",
    }
    assert client.get("/en/book/contact/").content.decode().count("Billing address") == 1
    assert client.post("/en/book/contact/", contact).status_code == 302
    assert "Binzmühlestrasse 14" in client.get("/en/book/review/").content.decode()
    assert client.post("/en/book/review/").status_code == 302
    order = Order.objects.get()
    billing = BillingDetails.objects.get(order=order)
    assert billing.address == "Binzmühlestrasse 14\n8050 Zürich\nSwitzerland"
    assert billing.vat_id == "CHE-123.456.789 MWST"

    settle(payments, order, payments.usdc)
    text = pdf_text(client.get(f"{link(order)}/receipt.pdf").content)
    for line in (
        "Universität Zürich, Institut für Informatik",
        "Binzmühlestrasse 14",
        "8050 Zürich",
        "VAT id: CHE-123.456.789 MWST",
        "ada@example.org",
    ):
        assert line in text


def test_booking_without_billing_details_stores_none(
    client: Client, payments: Payments, order: Order
) -> None:
    settle(payments, order, payments.usdc)
    assert not BillingDetails.objects.exists()
    html = client.get(f"{link(order)}/receipt/").content.decode()
    billed_to = re.search(r'data-testid="billed-to">(.*?)</p>', html, re.S)
    assert billed_to
    assert "Ada Lovelace" in billed_to.group(1)
    assert "VAT id" not in billed_to.group(1)


def test_billing_details_can_be_given_later_on_the_order_page(
    client: Client, payments: Payments, order: Order
) -> None:
    settle(payments, order, payments.usdc)
    refused = client.post(
        f"{link(order)}/billing/", {"billing-address": "Somewhere", "billing-vat_id": "123"}
    )
    assert refused.status_code == 400
    assert "A VAT id starts with its country" in refused.content.decode()
    assert not BillingDetails.objects.exists()

    response = client.post(
        f"{link(order)}/billing/",
        {
            "billing-organisation": "Sorbonne Université",
            "billing-address": "4 place Jussieu\n75005 Paris",
            "billing-vat_id": "FR12345678901",
        },
    )
    assert response.status_code == 302
    assert response["Location"].endswith("#receipt")
    assert "4 place Jussieu" in client.get(f"{link(order)}/").content.decode()  # the form, filled
    html = client.get(f"{link(order)}/receipt/").content.decode()
    assert "Sorbonne Université" in html
    assert "FR12345678901" in html
    text = pdf_text(client.get(f"{link(order)}/receipt.pdf").content)
    assert "Sorbonne Université" in text
    assert "75005 Paris" in text
    assert "VAT id: FR12345678901" in text


def test_the_order_paid_mail_links_the_receipt(
    client: Client,
    payments: Payments,
    order: Order,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        settle(payments, order, payments.usdc)
    (message,) = mail.outbox
    url = receipts.receipt_link(order)
    assert url.endswith(f"/en/orders/{order.reference}/{order.secret}/receipt/")
    assert url in message.body
    assert isinstance(message, EmailMultiAlternatives)
    assert url in str(message.alternatives[0][0])
    path = url.split("://", 1)[1].split("/", 1)[1]
    assert client.get(f"/{path}").status_code == 200


def adas_order(make_request: RequestFactory, ada: tuple[User, str]) -> tuple[Order, dict[str, str]]:
    """An order of ada's (the API's token owner), and her token's header."""
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3), user=ada[0])
    return order, {"Authorization": f"Bearer {ada[1]}"}


def test_the_owner_gets_the_receipt_from_the_api_and_no_one_else(
    client: Client,
    payments: Payments,
    make_request: RequestFactory,
    ada: tuple[User, str],
    eve: tuple[User, str],
) -> None:
    order, owner = adas_order(make_request, ada)
    other = {"Authorization": f"Bearer {eve[1]}"}
    api = f"/api/v1/orders/{order.reference}"

    assert client.get(f"{api}/", headers=owner).json()["receipt_url"] is None
    unpaid = client.get(f"{api}/receipt/", headers=owner)
    assert unpaid.status_code == 404
    assert unpaid.json()["code"] == "not_found"

    _invoice, tx_hash = settle(payments, order, payments.usdc)
    receipt_url = client.get(f"{api}/", headers=owner).json()["receipt_url"]
    assert receipt_url.endswith(f"{api}/receipt/")
    assert client.get(f"{api}/receipt/", headers=other).status_code == 404
    assert client.get(f"{api}/receipt/").status_code == 401
    assert Receipt.objects.count() == 0  # nobody else's request numbered it

    response = client.get(f"{api}/receipt/", headers={**owner, "Accept": "application/pdf"})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/pdf"
    text = pdf_text(response.content)
    assert tx_hash in text
    assert order.reference in text
    assert "Receipt R-000001" in text


def test_only_confirmed_transfers_are_printed(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice, tx_hash = settle(payments, order, payments.usdc)
    Transfer.objects.filter(invoice=invoice).update(status=Transfer.STATUS_ORPHANED)
    Transfer.objects.create(
        chain=payments.chain,
        tx_hash="0x" + "ab" * 32,
        log_index=0,
        invoice=invoice,
        from_address="0x" + "11" * 20,
        amount=invoice.amount_due,
        block_number=10**6,
        block_hash="0x" + "cd" * 32,
        block_time=timezone.now(),
        status=Transfer.STATUS_SEEN,
    )
    text = pdf_text(client.get(f"{link(order)}/receipt.pdf").content)
    assert tx_hash not in text
    assert "ab" * 32 not in text


def test_a_missing_font_is_said_clearly(
    client: Client, payments: Payments, order: Order, settings: Any
) -> None:
    settle(payments, order, payments.usdc)
    issued = receipts.issue_receipt(order)
    assert issued is not None
    settings.RECEIPT_FONT = "/nonexistent/DejaVuSans.ttf"
    with pytest.raises(receipts.FontMissing, match="fonts-dejavu-core"):
        receipts.render_pdf(receipts.document(issued))


def test_the_desk_shows_the_billing_details_and_the_receipt(
    client: Client, payments: Payments, order: Order
) -> None:
    receipts.save_billing(order, organisation="Lab of Ada", address="1 Road, Oxford", vat_id="")
    settle(payments, order, payments.usdc)
    receipt = receipts.issue_receipt(order)
    assert receipt is not None
    operator = User.objects.create_superuser("operator@example.org", "a-long-operator-password")
    client.force_login(operator)
    page = client.get(f"/admin/reservations/order/{order.pk}/change/").content.decode()
    assert "Lab of Ada" in page
    assert "1 Road, Oxford" in page
    assert "R-000001" in page
    assert f"{link(order)}/receipt.pdf" in page
    listed = client.get("/admin/payments/receipt/")
    assert listed.status_code == 200
    assert order.reference in listed.content.decode()
    assert client.get("/admin/payments/receipt/add/").status_code == 403  # a record, not a form


def test_billing_details_can_be_set_through_the_api_and_are_printed(
    client: Client,
    payments: Payments,
    make_request: RequestFactory,
    ada: tuple[User, str],
    eve: tuple[User, str],
) -> None:
    order, owner = adas_order(make_request, ada)
    url = f"/api/v1/orders/{order.reference}/billing/"

    def put(body: dict[str, str], headers: dict[str, str] = owner) -> Any:
        return client.put(url, json.dumps(body), content_type="application/json", headers=headers)

    empty = {"organisation": "", "address": "", "vat_id": ""}
    assert client.get(url, headers=owner).json() == empty
    refused = put({"vat_id": "123"})
    assert refused.status_code == 400
    assert "vat_id" in refused.json()["fields"]
    assert not BillingDetails.objects.filter(order=order).exists()  # nothing changed
    assert put({"address": "x"}, {"Authorization": f"Bearer {eve[1]}"}).status_code == 404
    saved = put(
        {"organisation": "Lab of Ada", "address": "1 Road\nOxford", "vat_id": "gb123456789"}
    )
    assert saved.status_code == 200, saved.content
    assert saved.json() == {
        "organisation": "Lab of Ada",
        "address": "1 Road\nOxford",
        "vat_id": "GB123456789",
    }
    settle(payments, order, payments.usdc)
    text = pdf_text(client.get(f"{link(order)}/receipt.pdf").content)
    assert "Lab of Ada" in text
    assert "GB123456789" in text
