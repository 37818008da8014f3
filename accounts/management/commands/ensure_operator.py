"""Create (or repair) the local operator account and print its login. Development only."""

import secrets
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.models import User
from infra.identity import canonical_email


class Command(BaseCommand):
    help = "Ensure an operator (superuser) account exists; print its e-mail and password."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--email", default="operator@localhost")
        parser.add_argument(
            "--password-file",
            type=Path,
            required=True,
            help="Where the generated password is kept between runs (mode 600).",
        )

    def handle(self, *args: Any, email: str, password_file: Path, **options: Any) -> None:
        password = password_file.read_text().strip() if password_file.exists() else ""
        if not password:
            password = secrets.token_urlsafe(12)
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
        user = User.objects.filter(email=canonical_email(email)).first()
        if user is None:
            User.objects.create_superuser(email=email, password=password)
        elif not user.check_password(password) or not user.is_superuser:
            user.set_password(password)
            user.is_staff = user.is_superuser = user.is_active = True
            user.save(update_fields=["password", "is_staff", "is_superuser", "is_active"])
        self.stdout.write(f"Operator login: {email} / {password}")
