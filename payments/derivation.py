"""Deposit addresses from the operator's watch-only extended public key (BIP32/BIP44).

The server never sees a private key: PAYMENT_XPUB is the account-level key
(m/44'/60'/account'), and address i is its external chain's child m/…/0/i, the same address
the operator's wallet shows for that index. bip_utils does the derivation.
"""

from __future__ import annotations

from functools import lru_cache

from bip_utils import Bip44, Bip44Changes, Bip44Coins, Bip44Levels  # type: ignore[import-untyped]
from django.conf import settings
from django.core.checks import Error, register
from django.db import transaction
from django.db.models import Max

from payments.models import Chain, DepositAddress


class NotAWatchOnlyKey(ValueError):
    pass


@lru_cache(maxsize=4)
def _account(xpub: str) -> Bip44:
    try:
        account = Bip44.FromExtendedKey(xpub, Bip44Coins.ETHEREUM)
    except Exception as exc:  # bip_utils raises several kinds for a malformed key
        raise NotAWatchOnlyKey(f"not an extended key: {type(exc).__name__}") from exc
    if not account.IsPublicOnly():
        raise NotAWatchOnlyKey("a private key: give the account's extended PUBLIC key")
    if not account.IsLevel(Bip44Levels.ACCOUNT):
        raise NotAWatchOnlyKey("not an account-level key (m/44'/60'/account')")
    return account


def address_at(index: int, xpub: str | None = None) -> str:
    """The checksummed address at external index ``index``."""
    account = _account(xpub or settings.PAYMENT_XPUB)
    return str(account.Change(Bip44Changes.CHAIN_EXT).AddressIndex(index).PublicKey().ToAddress())


def new_deposit_address(chain: Chain) -> DepositAddress:
    """The next never-used address on ``chain``. Locks the chain's row while counting."""
    with transaction.atomic():
        # Locks: this chain's row, so two invoices never take the same index.
        Chain.objects.select_for_update().filter(pk=chain.pk).first()
        highest = DepositAddress.objects.filter(chain=chain).aggregate(top=Max("index"))["top"]
        index = 0 if highest is None else highest + 1
        return DepositAddress.objects.create(chain=chain, index=index, address=address_at(index))


@register()
def check_payment_key(app_configs: object, **kwargs: object) -> list[Error]:
    """``manage.py check`` (and every start) fails on anything but an account xpub."""
    try:
        _account(settings.PAYMENT_XPUB)
    except NotAWatchOnlyKey as exc:
        return [Error(f"PAYMENT_XPUB is unusable: {exc}", id="payments.E001")]
    return []
