"""The MkDocs hooks of the documentation site (mkdocs.yml, ``hooks:``).

- ``on_page_markdown``: each ``<!-- generated: NAME -->`` marker becomes what the code says
  (``docs_hooks.generated``: the environment variables, the API's error codes, the
  acceptance references). A table out of step with the code, or a page that lost its
  marker, fails the build.
- ``on_post_build``: the OpenAPI schema the code produces (drf-spectacular, as
  ``/api/v1/schema/`` serves it) is written to ``api/openapi.json`` in the site, beside
  Swagger UI's files from npm (``node_modules/swagger-ui-dist``), which the API reference
  page (``theme/api-reference.html``, with ``docs/js/api-reference.js``) loads. Nothing
  comes from another host.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # MkDocs loads this file by its path
    sys.path.insert(0, str(ROOT))

from docs_hooks import generated  # noqa: E402

SWAGGER_UI = ROOT / "node_modules" / "swagger-ui-dist"
SWAGGER_FILES = ("swagger-ui.css", "swagger-ui-bundle.js", "LICENSE", "NOTICE")
"""What the reference page loads, and the licence that comes with it (Apache 2.0)."""
SCHEMA_PATH = "api/openapi.json"
SWAGGER_DIR = "api/swagger-ui"
EXPECTED = {
    "deploying/environment.md": "environment-variables",
    "labs/api.md": "api-error-codes",
    "how-it-works/benchmark.md": "acceptance-references",
}
"""Which page carries which generated part: a page that lost its marker fails the build."""

_used: dict[str, set[str]] = {}


def openapi_schema() -> bytes:
    """The schema the code produces, as drf-spectacular renders it at /api/v1/schema/ in
    JSON (public: every endpoint, whoever asks)."""
    generated.setup_django()
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return bytes(OpenApiJsonRenderer().render(schema, renderer_context={}))


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    _used.clear()
    try:
        generated.setup_django()
    except Exception as error:
        raise PluginError(f"the documentation needs the project's settings: {error}") from error
    return config


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    try:
        filled, used = generated.fill(markdown, page.file.src_uri)
    except ValueError as error:
        raise PluginError(str(error)) from error
    _used[page.file.src_uri] = used
    return filled


def on_post_build(config: MkDocsConfig, **_: Any) -> None:
    for page, part in EXPECTED.items():
        if part not in _used.get(page, set()):
            raise PluginError(f"{page} must carry <!-- generated: {part} --> (docs_hooks/site.py)")
    site = Path(config.site_dir)
    target = site / SCHEMA_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(openapi_schema())
    missing = [name for name in SWAGGER_FILES if not (SWAGGER_UI / name).is_file()]
    if missing:
        raise PluginError(f"{SWAGGER_UI} lacks {missing}: run `npm ci` (make install does)")
    folder = site / SWAGGER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name in SWAGGER_FILES:
        shutil.copyfile(SWAGGER_UI / name, folder / name)
