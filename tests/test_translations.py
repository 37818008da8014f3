"""German and French are complete: every message the code and templates hold is translated,
and the compiled catalogues are the ones the .po files give."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polib  # type: ignore[import-untyped]
import pytest

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("de", "fr")


@pytest.fixture(scope="module")
def fresh_catalogues(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's files copied aside, with makemessages and compilemessages run there."""
    copy = tmp_path_factory.mktemp("project")
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    environ = {**os.environ, "DJANGO_DEBUG": "1"}
    for command in (
        [
            "makemessages",
            *[f"-l{code}" for code in LANGUAGES],
            "--no-obsolete",
            "--ignore=tests",
            "--ignore=bench",
        ],
        ["compilemessages"],
    ):
        result = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=copy,
            env=environ,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
    return copy


@pytest.mark.parametrize("language", LANGUAGES)
def test_nothing_is_left_untranslated(fresh_catalogues: Path, language: str) -> None:
    catalogue = polib.pofile(
        str(fresh_catalogues / "locale" / language / "LC_MESSAGES" / "django.po")
    )
    untranslated = [entry.msgid for entry in catalogue.untranslated_entries()]
    fuzzy = [entry.msgid for entry in catalogue.fuzzy_entries()]
    assert untranslated == [], untranslated
    assert fuzzy == [], fuzzy
    assert len(catalogue) > 150


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_committed_catalogue_is_up_to_date(fresh_catalogues: Path, language: str) -> None:
    relative = Path("locale") / language / "LC_MESSAGES"
    committed = polib.pofile(str(ROOT / relative / "django.po"))
    fresh = polib.pofile(str(fresh_catalogues / relative / "django.po"))
    assert {e.msgid: e.msgstr for e in committed} == {e.msgid: e.msgstr for e in fresh}
    assert (ROOT / relative / "django.mo").read_bytes() == (
        fresh_catalogues / relative / "django.mo"
    ).read_bytes()
