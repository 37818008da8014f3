"""Personal API tokens (stored as hashes) and remembered idempotent requests."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models, transaction
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "gl_"  # noqa: S105 (a marker, not a secret)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TooManyTokens(Exception):
    """The user already holds API_TOKENS_PER_USER active tokens."""

    code = "too_many_tokens"
    message = _(
        "At most %(limit)s active API tokens per account: revoke one you no longer use, "
        "then create the new one."
    )

    def __init__(self, limit: int) -> None:
        super().__init__(str(self.message % {"limit": limit}))
        self.limit = limit


class ApiToken(models.Model):
    """A researcher's token for scripts: shown once, kept only as a SHA-256 hash."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=80)
    prefix = models.CharField(
        max_length=12, help_text=_("The token's first characters, to recognise it")
    )
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user: Any, name: str) -> tuple[ApiToken, str]:
        """A new token for ``user``; the plain token is returned once and never stored.

        Raises ``TooManyTokens`` when the user already holds API_TOKENS_PER_USER active
        ones. The user's row is locked while counting, so that concurrent requests cannot
        each see room for one more."""
        limit = settings.API_TOKENS_PER_USER
        with transaction.atomic():
            get_user_model().objects.select_for_update().filter(pk=user.pk).exists()
            if cls.objects.filter(user=user, revoked_at__isnull=True).count() >= limit:
                raise TooManyTokens(limit)
            token = TOKEN_PREFIX + secrets.token_urlsafe(32)
            record = cls.objects.create(
                user=user, name=name.strip()[:80], prefix=token[:10], key_hash=hash_token(token)
            )
        return record, token


class IdempotentRequest(models.Model):
    """The first response to a request made with an Idempotency-Key, replayed on retries."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("user", "key"), name="idempotency_key_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
