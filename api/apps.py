from django.apps import AppConfig

from api import schema  # noqa: F401  (registers the token scheme with the schema)


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "REST API"
