"""Researchers and operators sign in with their e-mail address."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from django.contrib.auth.models import AbstractUser, BaseUserManager
from django.db import models
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy as _

from infra.identity import NotAnAddress, canonical_email


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def _create(self, email: str, password: str | None, **fields: Any) -> User:
        if not email:
            raise ValueError("An e-mail address is required")
        user = self.model(email=canonical_email(email), **fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def get_by_natural_key(self, username: str | None) -> User:
        """Signing in with a password compares the canonical address too (infra.identity)."""
        with contextlib.suppress(NotAnAddress):
            username = canonical_email(username or "")
        return super().get_by_natural_key(username)

    def create_user(self, email: str, password: str | None = None, **fields: Any) -> User:
        fields.setdefault("is_staff", False)
        fields.setdefault("is_superuser", False)
        return self._create(email, password, **fields)

    def create_superuser(self, email: str, password: str | None = None, **fields: Any) -> User:
        fields.update(is_staff=True, is_superuser=True)
        return self._create(email, password, **fields)


class User(AbstractUser):
    username = None  # type: ignore[assignment]
    email = models.EmailField(_("e-mail address"), unique=True)

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    objects: ClassVar[UserManager] = UserManager()  # type: ignore[assignment]

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("email"), name="user_email_unique_ci"),
        ]

    def __str__(self) -> str:
        return self.email
