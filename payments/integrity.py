"""The payment configuration checked against the chain itself.

An asset's row says which contract is paid, on which chain, and how its amounts scale. A
wrong ``decimals`` prices a lot at a trillionth of its price (USDT configured with 6 on a
contract with 18: $500 due as 5×10⁻¹⁰ USDT); a wrong chain id or contract credits tokens
that anyone can mint. So the node is asked — the chain id it serves, the code at the
contract, the contract's ``decimals()`` and ``symbol()``; for the native coin 18 decimals
and a price feed with code and 8 decimals — before an active asset is saved in the desk
(payments.admin) and before each new invoice in it (the answer cached for
PAYMENT_ASSET_CHECK_SECONDS per asset and configuration).

And a payment to an invoice whose chain or coin the operator has since turned off is
recorded but never settles by itself (services.recompute): the operator is told here.
"""

from __future__ import annotations

import hashlib
import logging
import re

from django.conf import settings
from django.core.cache import cache
from django.core.mail import mail_admins
from django.utils.translation import gettext_lazy as _

from payments.models import Asset, Invoice
from payments.nodes import NodeClient
from payments.prices import FEED_DECIMALS, feed_decimals
from payments.rpc import RpcClient, RpcError
from reservations import services as reservations

log = logging.getLogger(__name__)

ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
NATIVE_DECIMALS = 18
"""Every EVM chain's native coin (ETH, POL, …) counts in 10⁻¹⁸."""
ALERT_SECONDS = 24 * 3600
"""The operator is mailed about one problem at most once in this time."""

ASSET_MISCONFIGURED = _(
    "This coin cannot be used right now: its configuration does not match the payment "
    "network, and the operator has been told. Choose another coin."
)


class AssetMismatch(Exception):
    """The chain contradicts the asset's configuration; ``problems`` say how (for the
    operator)."""

    def __init__(self, asset: Asset, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.asset = asset
        self.problems = problems


def verify_asset(asset: Asset, client: NodeClient | None = None) -> None:
    """Raise AssetMismatch unless the chain agrees with ``asset`` (saved or not, with its
    chain): chain id, contract code, decimals and symbol. RpcUnavailable: the node could not
    be asked (nothing is known)."""
    chain = asset.chain
    client = client or RpcClient(chain.rpc_url, timeout=settings.PAYMENT_RPC_TIMEOUT)
    served = client.chain_id()
    if served != chain.chain_id:
        raise AssetMismatch(
            asset, [f"the node {chain.rpc_url} serves chain id {served}, not {chain.chain_id}"]
        )
    problems = _native(asset, client) if asset.is_native else _token(asset, client)
    if problems:
        raise AssetMismatch(asset, problems)


def _token(asset: Asset, client: NodeClient) -> list[str]:
    address = asset.contract_address
    found = _contract(client, address, asset.chain.chain_id)
    if found:
        return found
    problems = []
    decimals = client.erc20_decimals(address)
    if decimals is None:
        problems.append(f"the contract {address} does not answer decimals()")
    elif decimals != asset.decimals:
        problems.append(
            f"the contract {address} has {decimals} decimals, the configuration says "
            f"{asset.decimals}"
        )
    symbol = client.erc20_symbol(address)
    if symbol is None:
        problems.append(f"the contract {address} does not answer symbol()")
    elif symbol != asset.symbol:
        problems.append(
            f"the contract {address} is {symbol!r}, the configuration says {asset.symbol!r}"
        )
    return problems


def _native(asset: Asset, client: NodeClient) -> list[str]:
    problems = []
    if asset.decimals != NATIVE_DECIMALS:
        problems.append(
            f"the native coin has {NATIVE_DECIMALS} decimals, the configuration says "
            f"{asset.decimals}"
        )
    feed = asset.price_feed_address
    if feed:  # none: the coin is not priced, hence not offered (payments.prices)
        found = _contract(client, feed, asset.chain.chain_id)
        if found:
            return problems + found
        decimals = feed_decimals(feed, client)
        if decimals != FEED_DECIMALS:
            problems.append(
                f"the price feed {feed} has {decimals} decimals, not {FEED_DECIMALS}"
                if decimals is not None
                else f"the price feed {feed} does not answer decimals()"
            )
    return problems


def _contract(client: NodeClient, address: str, chain_id: int) -> list[str]:
    if not ADDRESS.match(address):
        return [f"{address!r} is not an address (0x and 40 hexadecimal digits)"]
    try:
        code = client.code(address)
    except RpcError as exc:
        return [f"the node refused to read {address}: {exc}"]
    if code in ("", "0x", "None"):
        return [f"there is no contract at {address} on chain {chain_id}"]
    return []


# --------------------------------------------------------------------------- before invoicing


def _configuration(asset: Asset) -> str:
    """What the check depends on, hashed: another configuration is checked afresh."""
    chain = asset.chain
    parts = (
        chain.chain_id,
        chain.rpc_url,
        asset.contract_address.lower(),
        asset.decimals,
        asset.symbol,
        asset.price_feed_address.lower(),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _key(kind: str, asset: Asset) -> str:
    return f"payments:asset-{kind}:{asset.pk}:{_configuration(asset)}"


def known_mismatch(asset: Asset) -> bool:
    """The last check of this configuration found a mismatch (and is still fresh)."""
    return bool(cache.get(_key("mismatch", asset)))


def check_before_invoicing(asset: Asset, client: NodeClient) -> None:
    """verify_asset, its answer kept PAYMENT_ASSET_CHECK_SECONDS per asset and configuration
    (the page is not slowed; a refused coin does not ask the node again and again). On a
    mismatch: AssetMismatch, logged, and the operator mailed once."""
    seconds = settings.PAYMENT_ASSET_CHECK_SECONDS
    if cache.get(_key("verified", asset)):
        return
    problems = cache.get(_key("mismatch", asset))
    if problems:
        raise AssetMismatch(asset, list(problems))
    try:
        verify_asset(asset, client)
    except AssetMismatch as exc:
        cache.set(_key("mismatch", asset), exc.problems, seconds)
        _alert_mismatch(exc)
        raise
    cache.set(_key("verified", asset), "1", seconds)


def _alert_mismatch(exc: AssetMismatch) -> None:
    asset = exc.asset
    if not cache.add(_key("mismatch-alert", asset), "1", ALERT_SECONDS):
        return
    problems = "\n".join(f"- {problem}" for problem in exc.problems)
    log.error(
        "asset configuration contradicts the chain",
        extra={"asset": str(asset), "problems": exc.problems},
    )
    mail_admins(
        f"Payments: {asset} does not match the chain; invoices in it are refused",
        f"The configuration of {asset} (asset {asset.pk}) contradicts the chain:\n{problems}\n\n"
        "No invoice is made in this coin until it is fixed in the desk (Payments > Assets; "
        "saving checks it again).",
        fail_silently=True,
    )


# --------------------------------------------------------------------------- turned off


def accepting(invoice: Invoice) -> bool:
    """Whether a payment to ``invoice`` may settle its order: its coin and chain are active."""
    return Asset.objects.filter(pk=invoice.asset_id, is_active=True, chain__is_active=True).exists()


def alert_held(invoice: Invoice) -> None:
    """A payment to an invoice on a chain or coin turned off: recorded, not settled. The
    order's history and the operator (once) are told what to do."""
    if not cache.add(f"payments:held-alert:{invoice.pk}", "1", ALERT_SECONDS):
        return
    asset = Asset.objects.select_related("chain").get(pk=invoice.asset_id)
    reason = (
        f"invoice {invoice.pk}: a payment in {asset}, which is turned off, is held, not "
        "settled; reactivate the coin and its chain to let it settle, or refund it"
    )
    reservations.record_note(
        invoice.order, actor=reservations.system("payment scanner"), reason=reason
    )
    log.error("payment held: chain or coin inactive", extra={"invoice": invoice.pk})
    mail_admins(
        f"Payments: a payment on an inactive chain or coin is held ({invoice.order.reference})",
        f"Order {invoice.order.reference}, {reason}.\n\nUntil its deadline the invoice waits "
        "(payment seen); after it, it is 'paid after expiry': accept it or refund it in the desk.",
        fail_silently=True,
    )
