"""The local dev chain: anvil (from npm), the test contracts, and paying from a dev wallet.

For `make run`, the demo and the tests only. anvil's dev accounts are unlocked on the node,
so transactions are sent with eth_sendTransaction: no private key appears here either.
Deployed by anvil's first account at nonces 0-3, the contracts land at fixed addresses.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import transaction
from web3 import Web3
from web3.types import Wei

from payments.models import Asset, Chain, Invoice

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = json.loads((Path(__file__).parent / "contracts" / "artifacts.json").read_text())
CHAIN_ID = 31337
DEPLOYER = Web3.to_checksum_address("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266")
PAYER = Web3.to_checksum_address("0x70997970c51812dc3a010c7d01b50e0d17dc79c8")
USDC = Web3.to_checksum_address("0x5fbdb2315678afecb367f032d93f642f64180aa3")
FAKE_USDC = Web3.to_checksum_address("0xe7f1725e7734ce288f8367e1bb143e90bb3f0512")
ETH_USD_FEED = Web3.to_checksum_address("0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0")
FORWARDER = Web3.to_checksum_address("0xcf7ed3acca5a467e9e704c703e8d87f634fb0fc9")
ETH_USD = 3000


def anvil_binary() -> str:
    """The anvil executable itself. npm's ``.bin/anvil`` is a Node script that spawns the
    platform's binary as its child: a signal to it (a test stopping the node, a supervisor
    restarting it) would not reach the node, so the platform package's binary comes first."""
    modules = ROOT / "node_modules" / "@foundry-rs"
    candidates = [
        *sorted(modules.glob("anvil-*/bin/anvil")),
        ROOT / "node_modules" / ".bin" / "anvil",
    ]
    local = next((path for path in candidates if path.exists()), None)
    found = str(local) if local else shutil.which("anvil")
    if not found:
        raise RuntimeError("anvil is missing: run `npm ci` (make install does)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_anvil(
    port: int,
    *,
    chain_id: int = CHAIN_ID,
    block_time: int | None = None,
    state: Path | None = None,
    prune_history: bool = False,
    genesis_number: int | None = None,
) -> subprocess.Popen[bytes]:
    """anvil on ``port``. ``prune_history``: keep only recent states, so that mining many
    blocks is faster (balances at old blocks are then gone). ``genesis_number``: the chain
    starts at that height (a tall chain without mining it: the blocks below do not exist)."""
    command = [
        anvil_binary(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chain-id",
        str(chain_id),
    ]
    if block_time:
        command += ["--block-time", str(block_time)]
    if state:
        command += ["--state", str(state)]
    if prune_history:
        command += ["--prune-history", "256"]
    if genesis_number is not None:
        command += ["--number", str(genesis_number)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # not up yet
            if Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 1})).is_connected():
                return process
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"anvil did not start on {url}")


@dataclass
class DevChain:
    """A handle on a running anvil with the contracts deployed."""

    url: str

    @property
    def w3(self) -> Web3:
        return Web3(Web3.HTTPProvider(self.url))

    def contract(self, name: str, address: str) -> Any:
        return self.w3.eth.contract(
            address=Web3.to_checksum_address(address), abi=ARTIFACTS[name]["abi"]
        )

    def wait(self, tx_hash: Any) -> Any:
        return self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30)

    def deploy(self) -> None:
        """Deploy the four contracts if the chain has none yet (fresh anvil)."""
        w3 = self.w3
        if w3.eth.get_code(USDC):
            return
        if w3.eth.get_transaction_count(DEPLOYER) != 0:
            raise RuntimeError("the deployer has sent transactions: addresses would differ")
        for name, args in [
            ("TestToken", ("USD Coin", "USDC", 6)),
            ("TestToken", ("USD Coin", "USDC", 6)),  # the fake one: same symbol and decimals
            ("MockPriceFeed", (ETH_USD * 10**8,)),
            ("Forwarder", ()),
        ]:
            factory = w3.eth.contract(
                abi=ARTIFACTS[name]["abi"], bytecode=ARTIFACTS[name]["bytecode"]
            )
            self.wait(factory.constructor(*args).transact({"from": DEPLOYER}))
        for token in (USDC, FAKE_USDC):
            self.wait(
                self.contract("TestToken", token)
                .functions.mint(PAYER, 10**6 * 10**6)
                .transact({"from": DEPLOYER})
            )

    def deploy_token(self, name: str, symbol: str, decimals: int, *, mint: int = 0) -> str:
        """One more TestToken (``mint`` base units to the payer); its address."""
        w3 = self.w3
        factory = w3.eth.contract(
            abi=ARTIFACTS["TestToken"]["abi"], bytecode=ARTIFACTS["TestToken"]["bytecode"]
        )
        receipt = self.wait(
            factory.constructor(name, symbol, decimals).transact({"from": DEPLOYER})
        )
        address = str(receipt["contractAddress"])
        if mint:
            self.wait(
                self.contract("TestToken", address)
                .functions.mint(PAYER, mint)
                .transact({"from": DEPLOYER})
            )
        return address

    def mine(self, blocks: int = 1, *, seconds_apart: int | None = None) -> None:
        """Mine ``blocks`` empty blocks (``seconds_apart`` 0: all at the same time)."""
        params = [hex(blocks)] if seconds_apart is None else [hex(blocks), hex(seconds_apart)]
        self.w3.provider.make_request("anvil_mine", params)  # type: ignore[arg-type]

    def snapshot(self) -> str:
        return str(self.w3.provider.make_request("evm_snapshot", [])["result"])  # type: ignore[arg-type]

    def revert(self, snapshot_id: str) -> None:
        """Back to the snapshot's state, with the clock back at the wall's: anvil's revert
        also rewinds its clock to the snapshot's block, so every later block would be dated
        that much in the past (a payment "on time" that was mined after a deadline)."""
        self.w3.provider.make_request("evm_revert", [snapshot_id])  # type: ignore[arg-type]
        self.w3.provider.make_request("evm_setTime", [int(time.time())])  # type: ignore[arg-type]

    def set_price(self, usd: int, updated_at: int | None = None) -> None:
        feed = self.contract("MockPriceFeed", ETH_USD_FEED)
        when = (
            updated_at if updated_at is not None else self.w3.eth.get_block("latest")["timestamp"]
        )
        self.wait(feed.functions.setAnswer(usd * 10**8, when).transact({"from": DEPLOYER}))

    # ------------------------------------------------------------------ paying

    def pay_token(self, to: str, units: int, *, token: str = USDC, sender: str = PAYER) -> str:
        contract = self.contract("TestToken", token)
        tx = contract.functions.transfer(Web3.to_checksum_address(to), units).transact(
            {"from": sender}
        )
        self.wait(tx)
        return "0x" + tx.hex().removeprefix("0x")

    def pay_eth(self, to: str, wei: int, *, via_contract: bool = False, sender: str = PAYER) -> str:
        w3 = self.w3
        target = Web3.to_checksum_address(to)
        if via_contract:
            tx = (
                self.contract("Forwarder", FORWARDER)
                .functions.forward(target)
                .transact({"from": sender, "value": wei})
            )
        else:
            tx = w3.eth.send_transaction({"from": sender, "to": target, "value": Wei(wei)})
        self.wait(tx)
        return "0x" + tx.hex().removeprefix("0x")

    def pay_token_reverted(self, to: str, units: int) -> str:
        """A transaction that emits a Transfer to ``to`` and then reverts."""
        token = self.contract("TestToken", USDC)
        self.wait(token.functions.approve(FORWARDER, units).transact({"from": PAYER}))
        forwarder = self.contract("Forwarder", FORWARDER)
        tx = forwarder.functions.transferThenRevert(
            USDC, Web3.to_checksum_address(to), units
        ).transact({"from": PAYER, "gas": 200_000})
        receipt = self.wait(tx)
        assert receipt["status"] == 0
        return "0x" + tx.hex().removeprefix("0x")

    def pay_invoice(
        self, invoice: Invoice, amount: Decimal | None = None, *, via_contract: bool = False
    ) -> str:
        units = int(invoice.amount_due) if amount is None else invoice.asset.to_units(amount)
        if invoice.asset.is_native:
            return self.pay_eth(invoice.deposit_address.address, units, via_contract=via_contract)
        return self.pay_token(
            invoice.deposit_address.address, units, token=invoice.asset.contract_address
        )


@transaction.atomic
def configure(url: str, *, confirmations: int = 2) -> Chain:
    """The dev chain and its two assets (USDC, ETH priced by the feed) in the database."""
    chain, _ = Chain.objects.update_or_create(
        chain_id=CHAIN_ID,
        defaults={
            "name": "Local dev chain (anvil)",
            "rpc_url": url,
            "confirmations": confirmations,
            "is_active": True,
        },
    )
    Asset.objects.update_or_create(
        chain=chain,
        symbol="USDC",
        defaults={"contract_address": USDC, "decimals": 6, "display_order": 1},
    )
    Asset.objects.update_or_create(
        chain=chain,
        symbol="ETH",
        defaults={
            "contract_address": "",
            "decimals": 18,
            "price_feed_address": ETH_USD_FEED,
            "display_order": 2,
        },
    )
    return chain
