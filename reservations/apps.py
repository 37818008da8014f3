from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        # The receivers connect to their events.
        from reservations import receivers  # noqa: F401
