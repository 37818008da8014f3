from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"

    def ready(self) -> None:
        from provisioning import ssh  # noqa: F401  (registers the SSH key check)
