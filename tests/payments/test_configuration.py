"""Watch-only by construction: only an extended public key is accepted; the contracts
the dev chain runs are what their sources compile to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bip_utils import Bip39SeedGenerator, Bip44, Bip44Coins  # type: ignore[import-untyped]

from payments.contracts.build import ARTIFACTS, compile_contracts
from payments.derivation import NotAWatchOnlyKey, _account, address_at

ROOT = Path(__file__).resolve().parents[2]
MNEMONIC = "abandon " * 11 + "about"


def account() -> Bip44:
    seed = Bip39SeedGenerator(MNEMONIC).Generate()
    return Bip44.FromSeed(seed, Bip44Coins.ETHEREUM).Purpose().Coin().Account(0)


def django_check(**environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_DEBUG": "1", **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_settings_refuse_a_private_key() -> None:
    private = account().PrivateKey().ToExtended()
    assert private.startswith("xprv")
    result = django_check(PAYMENT_XPUB=private)
    assert result.returncode != 0
    assert "extended PUBLIC key" in result.stderr
    assert private not in result.stderr  # never echoed


def test_the_check_refuses_a_key_that_is_not_an_account_xpub() -> None:
    purpose_level = (
        Bip44.FromSeed(Bip39SeedGenerator(MNEMONIC).Generate(), Bip44Coins.ETHEREUM)
        .Purpose()
        .PublicKey()
        .ToExtended()
    )
    result = django_check(PAYMENT_XPUB=purpose_level)
    assert result.returncode != 0
    assert "payments.E001" in result.stderr
    assert django_check(PAYMENT_XPUB="xpubgarbage").returncode != 0


def test_addresses_are_the_wallets_own() -> None:
    xpub = account().PublicKey().ToExtended()
    # The first receiving address of the BIP39 test mnemonic, as every wallet shows it.
    assert address_at(0, xpub) == "0x9858EfFD232B4033E47d90003D41EC34EcaEda94"
    with pytest.raises(NotAWatchOnlyKey):
        _account(account().PrivateKey().ToExtended())


def test_the_committed_contracts_are_what_the_sources_compile_to() -> None:
    assert json.loads(ARTIFACTS.read_text()) == compile_contracts()
