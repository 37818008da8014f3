"""``Authorization: Bearer gl_…``: a personal API token, looked up by its hash."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from api.models import ApiToken, hash_token

LAST_USED_EVERY = timedelta(minutes=1)


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme != self.keyword or not token.strip():
            raise exceptions.AuthenticationFailed(
                "Use: Authorization: Bearer <token>.", code="invalid_token"
            )
        record = (
            ApiToken.objects.select_related("user")
            .filter(
                key_hash=hash_token(token.strip()), revoked_at__isnull=True, user__is_active=True
            )
            .first()
        )
        if record is None:
            raise exceptions.AuthenticationFailed(
                "This token is unknown or revoked.", code="invalid_token"
            )
        now = timezone.now()
        if record.last_used_at is None or now - record.last_used_at > LAST_USED_EVERY:
            ApiToken.objects.filter(pk=record.pk).update(last_used_at=now)
        return record.user, record

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
