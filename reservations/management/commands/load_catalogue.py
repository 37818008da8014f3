from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from reservations.catalogue import load_catalogue


class Command(BaseCommand):
    help = "Load the catalogue's seed data (kinds, prices, environments) into an empty database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--demo-inventory",
            action="store_true",
            help="Also create demo hosts and lots on loopback (local development only).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if load_catalogue(demo_inventory=options["demo_inventory"]):
            self.stdout.write(self.style.SUCCESS("Catalogue loaded."))
        else:
            self.stdout.write("Catalogue already present; nothing loaded.")
