from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    name = "payments"
    verbose_name = "Payments"

    def ready(self) -> None:
        # The key check registers itself; the receivers connect to their events.
        from payments import derivation, receivers  # noqa: F401
