"""Every mail is three templates — ``<name>_subject.txt``, ``<name>.txt``, ``<name>.html`` —
rendered in the recipient's language and sent as plain text with an HTML alternative; each
ends with the operator's help contact (HELP_EMAIL, HELP_URL: emails/_help_footer.*), added
here so that no mail goes without it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.utils import translation


def send_templated(name: str, context: dict[str, Any], to: str, language: str) -> None:
    with translation.override(language):
        message = EmailMultiAlternatives(
            subject=render_to_string(f"emails/{name}_subject.txt", context).strip(),
            body=render_to_string(f"emails/{name}.txt", context) + _footer("txt"),
            to=[to],
        )
        html: str = render_to_string(f"emails/{name}.html", context)
        footer = _footer("html")
        end = html.rfind("</body>")
        html = html[:end] + footer + html[end:] if end >= 0 else html + footer
        message.attach_alternative(html, "text/html")
        message.send()


def _footer(extension: str) -> str:
    contact = {"help_email": settings.HELP_EMAIL, "help_url": settings.HELP_URL}
    return render_to_string(f"emails/_help_footer.{extension}", contact)
