"""Configuration: read from the environment, strict in production, documented everywhere."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from infra import env
from infra.env import READ, database_from_url, env_bool, env_int, env_str

ROOT = Path(__file__).resolve().parent.parent
APP_SERVICES = ("web", "worker", "clock", "hooks", "beat")


def manage(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def production_env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    environ.update(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="gpulots.example",
    )
    return environ


def test_production_settings_pass_check_deploy() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", environ=production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key() -> None:
    environ = production_env()
    del environ["DJANGO_SECRET_KEY"]
    result = manage("check", environ=environ)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_migrations_match_the_models() -> None:
    result = manage("makemigrations", "--check", "--dry-run", environ=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bad_value_fails_loudly_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULOTS_TEST_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="GPULOTS_TEST_FLAG"):
        env_bool("GPULOTS_TEST_FLAG", default=False)
    monkeypatch.setenv("GPULOTS_TEST_NUMBER", "six")
    with pytest.raises(ImproperlyConfigured, match="GPULOTS_TEST_NUMBER"):
        env_int("GPULOTS_TEST_NUMBER", 1)
    monkeypatch.setenv("GPULOTS_TEST_NUMBER", "-1")
    with pytest.raises(ImproperlyConfigured, match="minimum"):
        env_int("GPULOTS_TEST_NUMBER", 1, minimum=0)
    with pytest.raises(ImproperlyConfigured, match="postgres"):
        database_from_url("mysql://root@localhost/db")
    env.READ.pop("GPULOTS_TEST_FLAG", None)
    env.READ.pop("GPULOTS_TEST_NUMBER", None)


def test_secrets_can_come_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    monkeypatch.delenv("GPULOTS_TEST_SECRET", raising=False)
    monkeypatch.setenv("GPULOTS_TEST_SECRET_FILE", str(secret))
    assert env_str("GPULOTS_TEST_SECRET") == "from-a-file"
    env.READ.pop("GPULOTS_TEST_SECRET", None)


def test_database_url_is_parsed_fully() -> None:
    parsed = database_from_url("postgres://u%40x:p%2Fw@db.example:6543/name?sslmode=require")
    assert parsed["USER"] == "u@x"
    assert parsed["PASSWORD"] == "p/w"
    assert (parsed["HOST"], parsed["PORT"], parsed["NAME"]) == ("db.example", "6543", "name")
    assert parsed["OPTIONS"] == {"sslmode": "require"}


def test_compose_runs_every_service_the_app_needs() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "mailpit", "anvil", *APP_SERVICES} <= set(services)
    assert "anvil" in services["anvil"]["entrypoint"]
    assert "celery" in services["worker"]["command"]
    assert "worker" in services["worker"]["command"]
    assert "beat" in services["beat"]["command"]
    clock = services["clock"]["command"]
    assert (
        clock[clock.index("--queues") + 1]
        == services["clock"]["environment"]["PROVISIONING_CLOCK_QUEUE"]
    )
    hooks = services["hooks"]["command"]
    assert hooks[hooks.index("--queues") + 1] == services["hooks"]["environment"]["WEBHOOK_QUEUE"]
    assert hooks[hooks.index("--pool") + 1] == "threads"
    assert "gunicorn" in " ".join(services["web"]["command"])
    assert (ROOT / "Dockerfile").exists()


def test_compose_passes_every_variable_the_settings_read() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in APP_SERVICES:
        environment = compose["services"][name]["environment"]
        assert set(environment) == set(READ), name
        urls = (environment["DATABASE_URL"], environment["REDIS_URL"])
        assert "@postgres:5432/" in urls[0]
        assert urls[1].startswith("redis://redis:6379")
        assert environment["EMAIL_HOST"] == "mailpit"


def test_the_documentation_explains_every_variable() -> None:
    """Each variable the settings read has a meaning in the data file the documentation's
    environment table is rendered from (tests/test_docs.py checks the rendered table)."""
    data = yaml.safe_load((ROOT / "docs" / "reference" / "environment.yml").read_text())
    documented = {name: entry for variables in data.values() for name, entry in variables.items()}
    assert set(READ) <= set(documented), sorted(set(READ) - set(documented))
    assert all(entry["meaning"].strip() for entry in documented.values())
