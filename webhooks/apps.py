from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Each webhook event is a receiver of a domain event (infra.events).
        from webhooks import receivers  # noqa: F401
