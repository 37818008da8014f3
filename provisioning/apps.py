from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"

    def ready(self) -> None:
        # The receivers connect to their events; the SSH module registers its key check.
        from provisioning import receivers, ssh  # noqa: F401
