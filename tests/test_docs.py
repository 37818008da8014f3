"""The documentation site (MkDocs, docs/) says what the code does and works offline: the
environment table lists exactly what the code reads, every page is in the navigation, the
built site loads nothing from another host and carries the schema the code produces, every
screenshot was taken by the browser tests; the README stays short, the changelog in shape."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from mkdocs.exceptions import PluginError

from docs_hooks import generated
from infra.env import READ

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
NOT_PAGES = ("reference/",)
"""Folders under docs/ that mkdocs.yml excludes (data, not pages)."""
TICKET = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)


def build_site(target: Path) -> Path:
    """`make docs`, into ``target``: strict, as `make test` builds it."""
    environment = {**os.environ, "DJANGO_DEBUG": "1", "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return target


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_site(tmp_path_factory.mktemp("site") / "site")


def devstack_run_env() -> dict[str, str]:
    """What `make run` reads (scripts/devstack.py is a script: loaded from its path)."""
    spec = importlib.util.spec_from_file_location(
        "devstack_for_docs", ROOT / "scripts" / "devstack.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return dict(module.RUN_ENV)


def schema_json() -> Any:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema, renderer_context={}))


def nav_files(entries: Any) -> Iterator[str]:
    for entry in entries:
        if isinstance(entry, str):
            yield entry
        else:
            for value in dict(entry).values():
                yield from nav_files(value) if isinstance(value, list) else [value]


def pages() -> set[str]:
    found = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    return {page for page in found if not page.startswith(NOT_PAGES)}


def markdown_sources() -> dict[str, str]:
    return {page: (DOCS / page).read_text() for page in pages()}


# --------------------------------------------------------------------- environment variables


def test_the_environment_table_lists_exactly_the_variables_the_code_reads(site: Path) -> None:
    run_env = devstack_run_env()
    table = (site / "deploying" / "environment" / "index.html").read_text()
    rows = dict(
        re.findall(r"<tr>\s*<td><code>([A-Z][A-Z0-9_]*)</code></td>(.*?)</tr>", table, re.S)
    )
    assert set(rows) == set(READ) | set(run_env)
    for name in set(run_env) - set(READ):
        assert "<code>make run</code> only" in rows[name], name
    for name in set(READ):
        assert "only" not in rows[name].split("</td>")[1], name  # read by the settings


def test_a_variable_without_a_meaning_or_a_meaning_without_a_variable_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = generated.meanings()
    assert generated.problems(READ, devstack_run_env(), data) == []
    data["Site and security"].pop("DJANGO_SECRET_KEY")
    data["Logs"]["GPULOTS_NOBODY_READS_THIS"] = {"meaning": "a variable nothing reads"}
    edited = tmp_path / "environment.yml"
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr(generated, "ENVIRONMENT_DATA", edited)

    found = "\n".join(generated.problems(READ, devstack_run_env(), generated.meanings()))
    assert "DJANGO_SECRET_KEY is read by the code (settings) but has no meaning" in found
    assert "GPULOTS_NOBODY_READS_THIS is explained" in found
    from docs_hooks import site as hooks

    page: Any = type(
        "Page", (), {"file": type("File", (), {"src_uri": "deploying/environment.md"})}
    )
    with pytest.raises(PluginError, match="DJANGO_SECRET_KEY"):
        hooks.on_page_markdown("<!-- generated: environment-variables -->", page, None, None)  # type: ignore[arg-type]


def test_the_configuration_meanings_were_moved_not_lost() -> None:
    """Every default the code computes (it depends on DEBUG, another variable or this
    checkout's path) is said in words, not as this machine's value."""
    rows = {
        row.name: row for row in generated.variables(READ, devstack_run_env(), generated.meanings())
    }
    assert "required unless" in rows["DJANGO_SECRET_KEY"].default
    assert str(ROOT) not in "".join(row.default for row in rows.values())
    assert all(len(row.meaning) > 5 for row in rows.values())


# ------------------------------------------------------------------------------ navigation


def test_every_page_is_reachable_from_the_navigation() -> None:
    config = yaml.safe_load(MKDOCS.read_text())  # loadable safely: no !!python tags
    assert pages() - set(nav_files(config["nav"])) == set()


def test_every_navigation_entry_is_a_page() -> None:
    config = yaml.safe_load(MKDOCS.read_text())
    listed = list(nav_files(config["nav"]))
    assert len(listed) == len(set(listed)), "a page listed twice"
    assert set(listed) - pages() == set()


def test_the_site_is_configured_to_work_offline() -> None:
    config = yaml.safe_load(MKDOCS.read_text())
    assert config["theme"]["name"] == "material"
    assert config["theme"]["font"] is False  # no Google Fonts
    assert "repo_url" not in config  # Material would ask GitHub's API for the repository's facts
    assert not config.get("extra_javascript")


# ----------------------------------------------------------------------------- the built site


EXTERNAL = [
    re.compile(r"""<script[^>]*\bsrc=["']?(?:https?:)?//""", re.I),
    re.compile(r"""<link[^>]*\brel=["']?(?:stylesheet|preload|preconnect|icon)[^>]*>""", re.I),
    re.compile(r"""@import\s+(?:url\()?["']?(?:https?:)?//""", re.I),
    re.compile(r"""url\(\s*["']?(?:https?:)?//""", re.I),
    re.compile(r"fonts\.(?:googleapis|gstatic)\.com", re.I),
]


def external_loads(text: str) -> list[str]:
    found: list[str] = []
    for pattern in EXTERNAL:
        for match in pattern.finditer(text):
            tag = match.group(0)
            if tag.startswith("<link") and not re.search(r"""href=["']?(?:https?:)?//""", tag):
                continue  # a stylesheet or icon of this site
            found.append(tag)
    return found


def test_the_built_site_loads_nothing_from_another_host(site: Path) -> None:
    built = [*site.rglob("*.html"), *site.rglob("*.css")]
    assert len(built) > 20
    found = {
        str(path.relative_to(site)): loads
        for path in built
        if (loads := external_loads(path.read_text(errors="replace")))
    }
    assert found == {}
    assert 'src="http' not in "".join(path.read_text() for path in site.rglob("*.html"))


def test_the_offline_check_sees_a_script_a_stylesheet_and_a_font_from_elsewhere() -> None:
    assert external_loads('<script src="https://cdn.example/x.js"></script>')
    assert external_loads('<link rel="stylesheet" href="https://cdn.example/x.css">')
    assert external_loads("@import url(https://fonts.googleapis.com/css?family=Roboto);")
    assert not external_loads('<link rel="stylesheet" href="../assets/main.css">')
    assert not external_loads('<a href="https://example.org/">a link is not a load</a>')


def test_the_site_carries_the_schema_the_code_produces_and_swagger_ui(site: Path) -> None:
    published = json.loads((site / "api" / "openapi.json").read_text())
    assert published == schema_json()
    assert "/api/v1/orders/" in published["paths"]
    for name in ("swagger-ui.css", "swagger-ui-bundle.js", "LICENSE"):
        assert (site / "api" / "swagger-ui" / name).stat().st_size > 0, name
    reference = (site / "labs" / "reference" / "index.html").read_text()
    assert 'src="../../api/swagger-ui/swagger-ui-bundle.js"' in reference
    assert 'data-schema="../../api/openapi.json"' in reference
    assert 'src="../../js/api-reference.js"' in reference


def test_the_generated_parts_are_on_their_pages(site: Path) -> None:
    errors = (site / "labs" / "api" / "index.html").read_text()
    assert "<code>idempotency_key_reused</code>" in errors
    assert "<code>lot_unavailable</code>" in errors
    references = (site / "how-it-works" / "benchmark" / "index.html").read_text()
    assert "<code>sm_100</code>" in references
    assert "<!-- generated:" not in "".join(p.read_text() for p in site.rglob("*.html"))


# ------------------------------------------------------------------------------ screenshots


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]*screenshots/([\w-]+)\.png)\)")


def test_every_screenshot_a_page_shows_was_taken_by_the_browser_tests() -> None:
    browser_tests = "".join(path.read_text() for path in (ROOT / "tests" / "browser").glob("*.py"))
    taken = set(re.findall(r"""doc=["']([\w-]+)["']""", browser_tests))
    shown: set[str] = set()
    for page, text in markdown_sources().items():
        lines = text.splitlines()
        for number, line in enumerate(lines):
            for _link, name in IMAGE.findall(line):
                shown.add(name)
                assert name in taken, f"{page}: {name}.png is not taken by a browser test"
                after = " ".join(lines[number + 1 : number + 6])
                assert "taken by the browser tests" in after, f"{page}: say who took {name}.png"
    on_disk = {path.stem for path in (DOCS / "screenshots").glob("*.png")}
    assert shown <= on_disk
    assert on_disk <= taken, "a screenshot no browser test takes (made by hand?)"
    assert on_disk <= shown, "a screenshot no page shows"


# ----------------------------------------------------------------- the README and changelog


def test_the_readme_is_short_names_no_ticket_and_links_the_documentation() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert TICKET.search(readme) is None
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link
    assert "make docs-serve" in readme
    assert "## Try the whole loop in ten minutes" in readme


def test_the_changelog_keeps_a_changelog_without_ticket_numbers() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog")
    unreleased = changelog.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    assert {"### Added", "### Changed", "### Fixed"} <= set(
        re.findall(r"^### \w+", unreleased, re.M)
    )
    assert re.findall(r"^## \[[^\]]+\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert TICKET.search(changelog) is None
