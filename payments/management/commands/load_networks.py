"""Load network presets (payments.networks) as chains and their coins, always inactive.

    manage.py load_networks base arbitrum --rpc-url base=https://base.example/KEY
    manage.py load_networks --all
    manage.py load_networks polygon --update      # apply the preset to an existing chain

By chain id, and idempotent: a chain that exists is left as the operator made it unless
``--update`` is given (and then its RPC URL, its activation and its coins' activation stay
the operator's). A new chain is always created inactive, with or without an RPC URL: the
operator activates it in the desk, where its coins are checked against their contracts
(integrity) before the activation is saved. The local dev chain (31337) is never touched.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction

from payments import devchain
from payments.integrity import NATIVE_DECIMALS
from payments.models import Asset, Chain
from payments.networks import (
    PRESETS,
    NetworkPreset,
    TokenPreset,
    UnknownNetwork,
    known_names,
    preset_named,
)

CHAIN_FIELDS = ("name", "confirmations", "use_finalized_tag", "block_range_limit", "reorg_window")
"""What a preset decides about a chain (``--update`` applies these)."""


class Command(BaseCommand):
    help = (
        "Load network presets as payment chains, created inactive: "
        f"{known_names()} (or --all). The dev chain stays as it is."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("networks", nargs="*", help=f"among: {known_names()}")
        parser.add_argument("--all", action="store_true", help="every preset")
        parser.add_argument(
            "--rpc-url",
            action="append",
            default=[],
            metavar="NETWORK=URL",
            help="the node to use for that network (repeatable)",
        )
        parser.add_argument(
            "--update",
            action="store_true",
            help="apply the preset to chains that exist already (RPC URL and activation stay)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        presets = self._chosen(options["networks"], everything=options["all"])
        urls = self._urls(options["rpc_url"], presets)
        for preset in presets:
            self._load(preset, urls.get(preset.key, ""), update=options["update"])

    # ------------------------------------------------------------------ arguments

    def _chosen(self, names: list[str], *, everything: bool) -> list[NetworkPreset]:
        if everything and names:
            raise CommandError("name networks or give --all, not both")
        if everything:
            return list(PRESETS.values())
        if not names:
            raise CommandError(f"name the networks to load ({known_names()}), or give --all")
        chosen: list[NetworkPreset] = []
        unknown = []
        for name in names:
            try:
                preset = preset_named(name)
            except UnknownNetwork:
                unknown.append(name)
                continue
            if preset not in chosen:
                chosen.append(preset)
        if unknown:
            raise CommandError(
                f"unknown network{'s' if len(unknown) > 1 else ''}: "
                f"{', '.join(repr(n) for n in unknown)}; known: {known_names()}"
            )
        return chosen

    def _urls(self, given: list[str], presets: list[NetworkPreset]) -> dict[str, str]:
        urls: dict[str, str] = {}
        for item in given:
            name, sep, url = item.partition("=")
            if not sep or not url.strip():
                raise CommandError(f"--rpc-url takes NETWORK=URL, not {item!r}")
            try:
                preset = preset_named(name)
            except UnknownNetwork:
                raise CommandError(
                    f"--rpc-url: unknown network {name!r}; known: {known_names()}"
                ) from None
            if preset not in presets:
                raise CommandError(f"--rpc-url {name}=…: {preset.key} is not being loaded")
            url = url.strip()
            if not url.startswith(("http://", "https://")):
                raise CommandError(f"--rpc-url {name}=…: an http:// or https:// URL, please")
            urls[preset.key] = url
        return urls

    # ------------------------------------------------------------------ loading

    def _load(self, preset: NetworkPreset, url: str, *, update: bool) -> None:
        if preset.chain_id == devchain.CHAIN_ID:  # no preset is; never let one be
            raise CommandError(f"{preset.key}: chain id {preset.chain_id} is the dev chain's")
        try:
            with transaction.atomic():
                chain = Chain.objects.select_for_update().filter(chain_id=preset.chain_id).first()
                if chain is None:
                    chain = self._create(preset, url)
                    self._created(chain, url)
                elif update:
                    changed = self._update(chain, preset, url)
                    self.stdout.write(
                        f"{chain}: updated ({', '.join(changed)})"
                        if changed
                        else f"{chain}: already as the preset says"
                    )
                else:
                    self.stdout.write(
                        f"{chain}: exists, left as it is (--update applies the preset to it)"
                        + (f"; the RPC URL given for {preset.key} was not set" if url else "")
                    )
        except IntegrityError as exc:
            raise CommandError(
                f"{preset.key}: its coins clash with coins configured by hand on chain "
                f"{preset.chain_id} (same symbol, other contract): {exc}"
            ) from None

    def _create(self, preset: NetworkPreset, url: str) -> Chain:
        chain = Chain(chain_id=preset.chain_id, rpc_url=url, is_active=False)
        self._apply(chain, preset)
        chain.save()
        for order, token in enumerate(preset.tokens, start=1):
            self._add_token(chain, token, order)
        self._add_native(chain, preset)
        return chain

    def _add_token(self, chain: Chain, token: TokenPreset, order: int) -> Asset:
        return Asset.objects.create(
            chain=chain,
            symbol=token.symbol,
            contract_address=token.contract_address,
            decimals=token.decimals,
            is_active=True,  # offered once its chain is activated, and checked then
            display_order=order,
        )

    def _add_native(self, chain: Chain, preset: NetworkPreset) -> Asset:
        return Asset.objects.create(
            chain=chain,
            symbol=preset.native_symbol,
            contract_address="",
            decimals=NATIVE_DECIMALS,
            price_feed_address=preset.price_feed_address,
            is_active=bool(preset.price_feed_address),  # unpriced: never offered
            display_order=len(preset.tokens) + 1,
        )

    def _update(self, chain: Chain, preset: NetworkPreset, url: str) -> list[str]:
        """The preset's chain fields and coins on an existing chain. A coin is matched by its
        contract (its symbol and decimals follow the preset); a symbol the operator gave to
        another contract is reported and left alone (open invoices may be watching it)."""
        before = {field: getattr(chain, field) for field in CHAIN_FIELDS}
        self._apply(chain, preset)
        changed = [field for field in CHAIN_FIELDS if getattr(chain, field) != before[field]]
        if url and url != chain.rpc_url:
            chain.rpc_url = url
            changed.append("rpc_url")
        if changed:
            chain.save()
        for order, token in enumerate(preset.tokens, start=1):
            asset = chain.assets.filter(contract_address__iexact=token.contract_address).first()
            if asset is None:
                other = chain.assets.filter(symbol=token.symbol).first()
                if other is not None:
                    self.stderr.write(
                        f"{chain}: {token.symbol} is configured with another contract "
                        f"({other.contract_address or 'the native coin'}), left as it is; "
                        f"the preset's is {token.contract_address} ({token.issuer})"
                    )
                    continue
                self._add_token(chain, token, order)
                changed.append(f"added {token.symbol}")
                continue
            wanted = {
                "symbol": token.symbol,
                "contract_address": token.contract_address,
                "decimals": token.decimals,
            }
            differs = [name for name, value in wanted.items() if getattr(asset, name) != value]
            if differs:
                for name in differs:
                    setattr(asset, name, wanted[name])
                asset.save(update_fields=differs)  # checked again before its next invoice
                changed.append(f"{token.symbol}: {', '.join(differs)}")
        natives = chain.assets.filter(contract_address="")
        if not natives.exists() and not chain.assets.filter(symbol=preset.native_symbol).exists():
            self._add_native(chain, preset)
            changed.append(f"added {preset.native_symbol} (inactive)")
        return changed

    def _apply(self, chain: Chain, preset: NetworkPreset) -> None:
        chain.name = preset.name
        chain.confirmations = preset.confirmations
        chain.use_finalized_tag = preset.use_finalized_tag
        chain.block_range_limit = preset.block_range_limit
        chain.reorg_window = preset.reorg_window
        try:
            chain.clean()
        except ValidationError as exc:
            raise CommandError(f"{preset.key}: the preset is invalid: {exc}") from None

    def _created(self, chain: Chain, url: str) -> None:
        coins = ", ".join(
            f"{asset.symbol}{'' if asset.is_active else ' (inactive)'}"
            for asset in chain.assets.order_by("display_order")
        )
        where = (
            f"RPC URL {url}" if url else "no RPC URL yet: set one in the desk (Payments > Chains)"
        )
        self.stdout.write(
            f"{chain}: created INACTIVE, {where}; coins {coins}. Nothing is invoiced on it "
            "until you activate it in the desk, which checks its coins against their "
            "contracts on the node first."
        )
