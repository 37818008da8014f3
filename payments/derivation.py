"""Deposit addresses from the operator's watch-only extended public key (BIP32/BIP44).

The server never sees a private key: PAYMENT_XPUB is the account-level key
(m/44'/60'/account'), and address i is its external chain's child m/…/0/i, the same address
the operator's wallet shows for that index. bip_utils does the derivation.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from bip_utils import Bip44, Bip44Changes, Bip44Coins, Bip44Levels  # type: ignore[import-untyped]
from django.conf import settings
from django.core.checks import Error, register
from django.db import connection, transaction
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


def fingerprint(xpub: str | None = None) -> str:
    """What identifies the key (its chain code and public key, hashed): the index space."""
    key = _account(xpub or settings.PAYMENT_XPUB).PublicKey().Bip32Key()
    raw = key.ChainCode().ToBytes() + key.RawCompressed().ToBytes()
    return hashlib.sha256(raw).hexdigest()[:32]


def new_deposit_address(chain: Chain) -> DepositAddress:
    """The next never-used address of the key, to be watched on ``chain``.

    One index space across all chains (an EVM address is the same on each): the next index
    after the highest the key has used anywhere — and after every index of the rows made
    before that rule, which may repeat across chains. A transaction-level advisory lock
    serialises the count; the unique constraints (key, index) and (address) back it up.
    """
    xpub_fingerprint = fingerprint()
    with transaction.atomic():
        # Locks: the key's index space (an advisory lock, until the transaction ends).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"payments:deposit-index:{xpub_fingerprint}"],
            )
        used = DepositAddress.objects.filter(xpub_fingerprint=xpub_fingerprint)
        legacy = DepositAddress.objects.filter(xpub_fingerprint="")
        tops = [rows.aggregate(top=Max("index"))["top"] for rows in (used, legacy)]
        index = max((top + 1 for top in tops if top is not None), default=0)
        return DepositAddress.objects.create(
            chain=chain,
            index=index,
            address=address_at(index),
            xpub_fingerprint=xpub_fingerprint,
        )


@register()
def check_payment_key(app_configs: object, **kwargs: object) -> list[Error]:
    """``manage.py check`` (and every start) fails on anything but an account xpub."""
    try:
        _account(settings.PAYMENT_XPUB)
    except NotAWatchOnlyKey as exc:
        return [Error(f"PAYMENT_XPUB is unusable: {exc}", id="payments.E001")]
    return []
