"""JSON bodies, bounded: a huge body is refused before it is read."""

from __future__ import annotations

from typing import Any

from rest_framework.parsers import JSONParser

from api.errors import RequestTooLarge

MAX_BODY = 64 * 1024


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        request = (parser_context or {}).get("request")
        length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        if length > MAX_BODY:
            raise RequestTooLarge()
        return super().parse(stream, media_type, parser_context)
