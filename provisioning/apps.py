from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"

    def ready(self) -> None:
        from provisioning import access, keys, ssh  # noqa: F401  (the SSH key check)
        from reservations.signals import booking_moved, ssh_keys_changed

        booking_moved.connect(access.follow_moved_booking, dispatch_uid="provisioning-move")
        ssh_keys_changed.connect(keys.keys_changed, dispatch_uid="provisioning-keys")
