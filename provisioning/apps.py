from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"

    def ready(self) -> None:
        from provisioning import access, ssh  # noqa: F401  (the SSH key check)
        from reservations.signals import booking_moved

        booking_moved.connect(access.follow_moved_booking, dispatch_uid="provisioning-move")
