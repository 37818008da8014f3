"""One-time sign-in links: valid for a short while, and only until the account signs in."""

from __future__ import annotations

from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.utils.http import base36_to_int

from accounts.models import User

LINK_MINUTES = 30


class SignInLinkTokens(PasswordResetTokenGenerator):
    """Django's reset-token scheme (HMAC over the user's last login, so a used link dies),
    under its own salt and with a short life."""

    key_salt = "accounts.tokens.SignInLinkTokens"

    def check_token(self, user: User | None, token: str | None) -> bool:
        if not token or not super().check_token(user, token):
            return False
        try:
            issued = base36_to_int(token.split("-")[0])
        except ValueError:
            return False
        return self._num_seconds(self._now()) - issued <= LINK_MINUTES * 60


sign_in_tokens = SignInLinkTokens()
