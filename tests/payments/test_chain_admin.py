"""The chains in the operator's desk: the scan settings editable, the extra RPC endpoints
inline with their health read-only, Chain.clean()'s refusals on the form, and the list saying
per chain how the scanner fares (cursor, last scan and error, a deep reorganisation in red,
endpoints and how many are healthy)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import User
from payments.models import Chain, RpcEndpoint
from tests.payments.test_network_presets import chain_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    return client


@pytest.fixture
def chain() -> Chain:
    """An inactive chain (saving it asks no node), with two extra endpoints: one healthy,
    one failing."""
    chain = Chain.objects.create(
        chain_id=8453,
        name="Base",
        rpc_url="https://base.example",
        confirmations=12,
        reorg_window=64,
        is_active=False,
    )
    now = timezone.now()
    RpcEndpoint.objects.create(
        chain=chain, url="https://one.example", label="One", priority=1, last_ok_at=now
    )
    RpcEndpoint.objects.create(
        chain=chain,
        url="https://two.example",
        label="Two",
        priority=2,
        last_ok_at=now - timedelta(hours=1),
        failures=3,
        last_error="ReadTimeout",
        last_error_at=now,
    )
    return chain


def cell(html: str, column: str) -> str:
    found = re.search(rf'<td class="field-{column}[^"]*">(.*?)</td>', html, re.S)
    assert found, column
    return found.group(1).strip()


def test_the_change_page_shows_the_endpoints_inline_with_their_health_read_only(
    desk: Client, chain: Chain
) -> None:
    response = desk.get(f"/admin/payments/chain/{chain.pk}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="endpoints-TOTAL_FORMS"' in html
    for editable in ("url", "label", "priority", "is_active"):
        assert f'name="endpoints-0-{editable}"' in html
    assert 'value="https://two.example"' in html
    for health in ("last_ok_at", "failures", "last_error", "last_error_at"):
        assert f'name="endpoints-1-{health}"' not in html  # shown, not editable
    assert "ReadTimeout" in html
    for field in ("block_range_limit", "reorg_window", "quorum", "use_finalized_tag"):
        assert f'name="{field}"' in html
    assert 'name="scanned_block"' not in html  # the scanner's, read-only


def test_an_endpoint_is_added_and_the_scan_settings_saved_from_the_page(
    desk: Client, chain: Chain
) -> None:
    data = chain_form(chain, block_range_limit="500", reorg_window="128", quorum="2")
    for i, endpoint in enumerate(chain.endpoints.order_by("priority")):
        data.update(
            {
                f"endpoints-{i}-id": endpoint.pk,
                f"endpoints-{i}-chain": chain.pk,
                f"endpoints-{i}-url": endpoint.url,
                f"endpoints-{i}-label": endpoint.label,
                f"endpoints-{i}-priority": endpoint.priority,
                f"endpoints-{i}-is_active": "on",
            }
        )
    data.update(
        {
            "endpoints-2-chain": chain.pk,
            "endpoints-2-url": "https://three.example",
            "endpoints-2-label": "Three",
            "endpoints-2-priority": "3",
            "endpoints-2-is_active": "on",
            "endpoints-TOTAL_FORMS": 3,
            "endpoints-INITIAL_FORMS": 2,
        }
    )
    response = desk.post(f"/admin/payments/chain/{chain.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    chain.refresh_from_db()
    assert (chain.block_range_limit, chain.reorg_window, chain.quorum) == (500, 128, 2)
    assert list(chain.endpoints.values_list("label", flat=True)) == ["One", "Two", "Three"]
    assert chain.endpoints.get(label="Two").failures == 3  # health is not the form's


def test_a_reorg_window_below_the_confirmations_is_refused_on_the_form(
    desk: Client, chain: Chain
) -> None:
    response = desk.post(
        f"/admin/payments/chain/{chain.pk}/change/",
        chain_form(chain, confirmations="12", reorg_window="5", block_range_limit="0"),
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "At least the confirmations (12)." in html
    assert "Please correct the errors below." in html or "Please correct the error below." in html
    chain.refresh_from_db()
    assert chain.reorg_window == 64


def test_the_list_shows_scan_health_a_deep_reorg_in_red_and_healthy_endpoints(
    desk: Client, chain: Chain
) -> None:
    Chain.objects.create(chain_id=10, name="OP Mainnet", rpc_url="https://op.example")
    Chain.objects.filter(pk=chain.pk).update(
        scanned_block=123_456,
        last_scan_at=timezone.now(),
        last_scan_error="RpcUnavailable: https://base.example: ConnectionError",
        last_scan_error_at=timezone.now(),
        deep_reorg_at=timezone.now(),
        deep_reorg_note="block 123000 changed its hash (window 64)",
    )
    response = desk.get("/admin/payments/chain/")
    assert response.status_code == 200
    html = response.content.decode()
    results = html[html.index('id="result_list"') :]
    rows = results[: results.index("</table>")].split("<tr")
    base_row = next(row for row in rows if ">Base<" in row)
    op_row = next(row for row in rows if ">OP Mainnet<" in row)

    assert cell(base_row, "scanned_block") == "123456"
    assert "ConnectionError" in cell(base_row, "scan_error")
    marker = cell(base_row, "deep_reorg")
    assert 'class="deep-reorg" style="color:#ba2121"' in marker
    assert "deep reorg" in marker
    assert "block 123000 changed its hash (window 64)" in marker
    assert (cell(base_row, "endpoint_count"), cell(base_row, "healthy_endpoint_count")) == (
        "2",
        "1",
    )

    assert "deep-reorg" not in op_row
    assert (cell(op_row, "endpoint_count"), cell(op_row, "healthy_endpoint_count")) == ("0", "0")


def test_the_operator_clears_a_deep_reorg_marker_once_checked(desk: Client, chain: Chain) -> None:
    Chain.objects.filter(pk=chain.pk).update(deep_reorg_at=timezone.now(), deep_reorg_note="x")
    response = desk.post(
        "/admin/payments/chain/",
        {"action": "clear_deep_reorg", "_selected_action": [chain.pk]},
        follow=True,
    )
    assert "Cleared on 1 chain(s)." in response.content.decode()
    chain.refresh_from_db()
    assert (chain.deep_reorg_at, chain.deep_reorg_note) == (None, "")
