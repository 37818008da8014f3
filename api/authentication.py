"""``Authorization: Bearer gl_…``: a personal API token, looked up by its hash."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from accounts.models import User
from api.models import ApiToken, hash_token
from infra.prepared import columns, execute_prepared, instance

LAST_USED_EVERY = timedelta(minutes=1)

# Every API request looks its token up: prepared once per connection (infra.prepared).
TOKEN_SQL = (
    f"SELECT {columns(ApiToken, 't')}, {columns(User, 'u')} "  # noqa: S608
    f"FROM {ApiToken._meta.db_table} t JOIN {User._meta.db_table} u ON u.id = t.user_id "
    "WHERE t.key_hash = %(hash)s AND t.revoked_at IS NULL AND u.is_active"
)


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
        row = execute_prepared(TOKEN_SQL, {"hash": hash_token(token.strip())})
        if row is None:
            raise exceptions.AuthenticationFailed(
                "This token is unknown or revoked.", code="invalid_token"
            )
        width = len(ApiToken._meta.concrete_fields)
        record = instance(ApiToken, row[:width])
        record.user = instance(User, row[width:])
        now = timezone.now()
        if record.last_used_at is None or now - record.last_used_at > LAST_USED_EVERY:
            ApiToken.objects.filter(pk=record.pk).update(last_used_at=now)
        return record.user, record

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
