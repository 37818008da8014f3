"""A form base that ties help texts and errors to their fields for assistive technology."""

from __future__ import annotations

from typing import Any

from django import forms


class AccessibleForm(forms.Form):
    """Each widget is described by its help text and its errors (``<id>_help``,
    ``<id>_errors``, as templates/_field.html renders them), and marked invalid when it
    has errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field_id = self[name].auto_id
            field.widget.attrs["aria-describedby"] = f"{field_id}_help {field_id}_errors"

    def full_clean(self) -> None:
        super().full_clean()
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["aria-invalid"] = "true"
