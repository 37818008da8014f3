"""The local dev chain: ``setup`` deploys the test contracts and configures the chain;
``pay <reference>`` pays an order's invoice from the funded dev wallet; ``mine`` adds blocks."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from payments import devchain
from payments.models import Chain, Invoice


class Command(BaseCommand):
    help = "Work with the local dev chain (anvil): setup, pay <reference>, mine <blocks>."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        setup = sub.add_parser("setup", help="deploy the contracts and configure the chain")
        setup.add_argument("--url", default="http://127.0.0.1:8545")
        setup.add_argument("--confirmations", type=int, default=2)
        pay = sub.add_parser("pay", help="pay an order's current invoice from the dev wallet")
        pay.add_argument("reference")
        pay.add_argument("--amount", type=Decimal, help="in the invoice's coin (default: all)")
        pay.add_argument("--via-contract", action="store_true", help="ETH through a contract")
        mine = sub.add_parser("mine", help="mine blocks now")
        mine.add_argument("blocks", type=int, nargs="?", default=1)

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "setup":
            dev = devchain.DevChain(options["url"])
            dev.deploy()
            chain = devchain.configure(options["url"], confirmations=options["confirmations"])
            self.stdout.write(
                f"Dev chain ready: {chain} at {chain.rpc_url}; USDC and ETH accepted."
            )
            return
        configured = Chain.objects.filter(chain_id=devchain.CHAIN_ID).first()
        if configured is None:
            raise CommandError("no dev chain configured: run `manage.py devchain setup` first")
        dev = devchain.DevChain(configured.rpc_url)
        if action == "mine":
            dev.mine(options["blocks"])
            self.stdout.write(f"Mined {options['blocks']} block(s).")
            return
        invoice = (
            Invoice.objects.filter(order__reference=options["reference"], is_current=True)
            .select_related("asset", "deposit_address")
            .first()
        )
        if invoice is None:
            raise CommandError("that order has no invoice yet: open its page and choose how to pay")
        tx = dev.pay_invoice(invoice, options["amount"], via_contract=options["via_contract"])
        amount = options["amount"] or invoice.asset.from_units(invoice.amount_due)
        self.stdout.write(
            f"Paid {amount} {invoice.asset.symbol} to {invoice.deposit_address.address}\n"
            f"transaction {tx}"
        )
