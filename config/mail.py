"""Every mail is three templates — ``<name>_subject.txt``, ``<name>.txt``, ``<name>.html`` —
rendered in the recipient's language and sent as plain text with an HTML alternative."""

from __future__ import annotations

from typing import Any

from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.utils import translation


def send_templated(name: str, context: dict[str, Any], to: str, language: str) -> None:
    with translation.override(language):
        message = EmailMultiAlternatives(
            subject=render_to_string(f"emails/{name}_subject.txt", context).strip(),
            body=render_to_string(f"emails/{name}.txt", context),
            to=[to],
        )
        message.attach_alternative(render_to_string(f"emails/{name}.html", context), "text/html")
        message.send()
