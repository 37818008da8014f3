"""The whole API, driven from its own OpenAPI schema by schemathesis against the live app:
no 5xx, and every response matches the schema."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from accounts.models import User
from api.models import ApiToken
from tests.conftest import build_inventory

EXAMPLES_PER_OPERATION = 30
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]
"""No 5xx, and every response as documented. Not "schema-valid data is accepted": the
schema cannot say which kinds exist or which starts are free, so the API refuses some
schema-valid requests, with a documented 400 or 409."""


@pytest.mark.django_db(transaction=True)
def test_the_api_keeps_its_schema_and_never_fails(
    live_server: Any, settings_throttle: None
) -> None:
    build_inventory()
    _record, token = ApiToken.issue(User.objects.create_user("script@example.org"), "schemathesis")
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/?format=json")
    headers = {"Authorization": f"Bearer {token}"}
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 10

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def conforms(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        conforms()


@pytest.fixture
def settings_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of generated requests: throttling is tested elsewhere."""
    monkeypatch.setattr("api.throttles.TokenRateThrottle.get_cache_key", lambda *a: None)
    monkeypatch.setattr("api.throttles.AddressRateThrottle.get_cache_key", lambda *a: None)
