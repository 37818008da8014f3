from django.apps import AppConfig

from infra import formats


class InfraConfig(AppConfig):
    name = "infra"
    verbose_name = "Infrastructure"

    def ready(self) -> None:
        formats.install()
