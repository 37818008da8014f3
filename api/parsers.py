"""JSON bodies, bounded: a huge body is refused before it is read, a deeply nested one
before any of it is used."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

from provisioning import split_tests

MAX_BODY = 64 * 1024


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


MAX_JSON_DEPTH = 16
"""The deepest nesting of arrays and objects a body may have (the API's own are 2 deep)."""


class JsonTooDeep(exceptions.ParseError):
    default_detail = (
        f"The JSON body nests arrays or objects too deeply (at most {MAX_JSON_DEPTH} levels)."
    )
    default_code = "json_too_deep"


class BoundedJSONParser(JSONParser):
    max_body = MAX_BODY

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        request = (parser_context or {}).get("request")
        length = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        if length > self.max_body:
            raise RequestTooLarge()
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # nested deeper than the decoder's own stack allows
            raise JsonTooDeep() from None
        if depth(data) > MAX_JSON_DEPTH:
            raise JsonTooDeep()
        return data


class SplitTestParser(BoundedJSONParser):
    """A split test's report (provisioning.split_tests) may weigh more than the API's own
    bodies: its per-process figures."""

    max_body = split_tests.MAX_REPORT_BYTES


def depth(value: Any) -> int:
    """How deeply ``value`` nests lists and dicts (a scalar: 0), without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        pending.extend((child, level) for child in children)
    return deepest
