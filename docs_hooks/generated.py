"""What the documentation takes from the code, rendered as Markdown.

Each renderer answers one marker in the pages (``<!-- generated: NAME -->``, see
``RENDERERS``) and reads the code as it is, so a page cannot drift from it. Django must be
set up before any of them runs (``setup_django``); the hooks and the tests both do it.

The environment table joins two sources: the names and defaults the code records — every
``infra.env`` helper notes name → default in ``infra.env.READ`` when ``config.settings`` is
imported, and ``scripts/devstack.py``'s ``RUN_ENV`` holds what ``make run`` itself reads —
with the meanings kept in ``docs/reference/environment.yml``. A name read by the code
without a meaning there, or a meaning for a name nothing reads, is a ``problem`` that fails
the build.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENT_DATA = ROOT / "docs" / "reference" / "environment.yml"
DEVSTACK = ROOT / "scripts" / "devstack.py"
MARKER = re.compile(r"<!--\s*generated:\s*([a-z-]+)\s*-->")


def setup_django() -> None:
    """Django with the project's settings, as ``manage.py`` has it (development defaults:
    the documentation reads no secret). Logging is kept to warnings: the build prints
    nothing when all is well."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    # The modules in the order a request loads them (the URLs import the views, which import
    # the API's errors): imported on their own, api.errors and DRF's settings meet halfway.
    import config.urls  # noqa: F401


def devstack() -> ModuleType:
    """``scripts/devstack.py`` (what ``make run`` runs), imported from its path: it is a
    script, not a package. Importing it starts nothing."""
    name = "_gpulots_devstack"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DEVSTACK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------- environment variables


@dataclass(frozen=True)
class Variable:
    name: str
    group: str
    meaning: str
    default: str
    """As the table shows it: Markdown."""
    read_by: str
    """"settings", "make run" or "settings, make run"."""


def code_reads() -> tuple[dict[str, str | None], dict[str, str]]:
    """What the settings read (``infra.env.READ``: name → default, None for none) and what
    ``make run`` reads (``RUN_ENV``: name → default)."""
    setup_django()
    from infra.env import READ

    return dict(READ), dict(devstack().RUN_ENV)


def meanings(path: Path | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """The data file: group title → variable name → {meaning, optional default}."""
    path = path or ENVIRONMENT_DATA
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a mapping of groups to variables is expected")
    return data


def problems(
    read: Mapping[str, str | None],
    run_env: Mapping[str, str],
    documented: Mapping[str, Mapping[str, Mapping[str, str]]],
) -> list[str]:
    """Why the table cannot be made: each name the code reads and the data file does not
    explain, each name the data file explains and nothing reads, each entry without a
    meaning, each name explained twice, each default that is this machine's path."""
    found: list[str] = []
    seen: dict[str, str] = {}
    for group, variables in documented.items():
        if not isinstance(variables, Mapping):
            found.append(f"group {group!r} is not a mapping of variables")
            continue
        for name, entry in variables.items():
            if name in seen:
                found.append(f"{name} is explained twice (in {seen[name]!r} and {group!r})")
            seen[name] = group
            if not isinstance(entry, Mapping) or not str(entry.get("meaning") or "").strip():
                found.append(f"{name} has no meaning in {ENVIRONMENT_DATA.name}")
            elif set(entry) - {"meaning", "default"}:
                found.append(f"{name}: unknown keys {sorted(set(entry) - {'meaning', 'default'})}")
    names = set(read) | set(run_env)
    for name in sorted(names - set(seen)):
        found.append(
            f"{name} is read by the code ({_readers(name, read, run_env)}) but has no meaning "
            f"in docs/reference/{ENVIRONMENT_DATA.name}"
        )
    for name in sorted(set(seen) - names):
        found.append(
            f"{name} is explained in docs/reference/{ENVIRONMENT_DATA.name} but nothing reads "
            "it (not in infra.env.READ nor devstack.RUN_ENV): remove it"
        )
    for name, default in read.items():
        given = documented.get(seen.get(name, ""), {}).get(name)
        if default and str(ROOT) in default and not (given and given.get("default")):
            found.append(
                f"{name}'s default {default!r} is this checkout's path: give it a `default:` "
                f"in {ENVIRONMENT_DATA.name}"
            )
    return found


def _readers(name: str, read: Mapping[str, Any], run_env: Mapping[str, Any]) -> str:
    return ", ".join(
        reader for reader, names in (("settings", read), ("make run", run_env)) if name in names
    )


def _shown(default: str | None) -> str:
    if default is None:
        return "—"
    if default == "":
        return "empty"
    return f"`{default}`"


def variables(
    read: Mapping[str, str | None],
    run_env: Mapping[str, str],
    documented: Mapping[str, Mapping[str, Mapping[str, str]]],
) -> list[Variable]:
    """The table's rows, in the data file's order (its groups, then its order in each)."""
    rows: list[Variable] = []
    for group, entries in documented.items():
        for name, entry in entries.items():
            if "default" in entry:
                default = str(entry["default"])
            elif name in read and name in run_env and read[name] != run_env[name]:
                default = f"{_shown(read[name])}; `make run`: {_shown(run_env[name])}"
            else:
                default = _shown(read[name] if name in read else run_env.get(name))
            rows.append(
                Variable(
                    name=name,
                    group=group,
                    meaning=" ".join(str(entry["meaning"]).split()),
                    default=default,
                    read_by=_readers(name, read, run_env),
                )
            )
    return rows


def environment_table() -> str:
    """One table per group of the data file: variable, default, read by, meaning."""
    read, run_env = code_reads()
    documented = meanings()
    found = problems(read, run_env, documented)
    if found:
        raise ValueError(
            "the environment table is out of step with the code:\n- " + "\n- ".join(found)
        )
    lines: list[str] = []
    group = None
    for row in variables(read, run_env, documented):
        if row.group != group:
            group = row.group
            lines += ["", f"### {group}", "", "| variable | default | read by | meaning |"]
            lines.append("| --- | --- | --- | --- |")
        reader = "**`make run` only**" if row.read_by == "make run" else row.read_by
        lines.append(f"| `{row.name}` | {_cell(row.default)} | {reader} | {_cell(row.meaning)} |")
    return "\n".join(lines).strip() + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _plain(text: str) -> str:
    """Text (not Markdown) in a table cell: shown as written, ``<reference>`` included."""
    return _cell(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


# ------------------------------------------------------------------------------ error codes


def api_error_codes() -> str:
    """The API's own error codes (api.errors, with their status), then every refusal code
    shared with the booking pages (reservations.errors), with its English message."""
    setup_django()
    from django.utils import translation
    from rest_framework.exceptions import APIException

    from api import errors as api_errors
    from reservations.errors import MESSAGES

    own = sorted(
        {
            (item.default_code, item.status_code, str(item.default_detail))
            for item in vars(api_errors).values()
            if isinstance(item, type)
            and issubclass(item, APIException)
            and item.__module__ == api_errors.__name__
        }
    )
    lines = ["| code | status | what it says |", "| --- | --- | --- |"]
    lines += [f"| `{code}` | {status} | {_plain(detail)} |" for code, status, detail in own]
    lines += ["", "| code | what it says (English) |", "| --- | --- |"]
    with translation.override("en"):
        for code, message in MESSAGES.items():
            text = re.sub(r"%\((\w+)\)s", r"{\1}", " ".join(str(message).split()))
            lines.append(f"| `{code}` | {_plain(text)} |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------- acceptance references


def acceptance_references() -> str:
    """The seed catalogue's acceptance references per kind (reservations.catalogue), and the
    shares every kind shares (the hardware kind's field defaults)."""
    setup_django()
    from django.db.models import Field

    from reservations.catalogue import ACCEPTANCE, KINDS
    from reservations.models import HardwareKind

    def figure(values: Mapping[str, Any], key: str) -> str:
        value = values.get(key)
        return (
            "—" if value in (None, "") else f"{value:g}" if isinstance(value, float) else str(value)
        )

    lines = [
        "| kind | arch | device name | memory (GiB) | BF16 dense (TFLOP/s) | FP8 dense (TFLOP/s) "
        "| HBM (TB/s) | all-reduce busbw at least (GB/s) | least PyTorch | least CUDA / ROCm "
        "| least driver |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS:
        values = ACCEPTANCE.get(kind["slug"], {})
        stack = values.get("accept_min_cuda") or values.get("accept_min_rocm")
        lines.append(
            f"| {kind['name']} | `{kind['architecture']}` | "
            + " | ".join(
                figure(values, f"accept_{key}")
                for key in ("sku", "memory_gib", "bf16_tflops", "fp8_tflops", "hbm_tbps")
            )
            + f" | {figure(values, 'accept_busbw_gbps_min')} | {figure(values, 'accept_min_torch')}"
            f" | {stack or '—'} | {figure(values, 'accept_min_driver')} |"
        )

    def default(name: str) -> Any:
        field = HardwareKind._meta.get_field(name)
        assert isinstance(field, Field)
        return field.default

    lines += [
        "",
        "Shared by every kind (the defaults of a hardware kind's fields): usable memory at "
        f"least {default('accept_memory_share_min'):.0%} of the nameplate, the matrix product "
        f"at least {default('accept_matmul_share_min'):.0%} of the dense peak, HBM bandwidth at "
        f"least {default('accept_hbm_share_min'):.0%} of the datasheet, the two cards within "
        f"{default('accept_card_tolerance'):.0%} of each other, ECC "
        f"{'required' if default('accept_ecc_required') else 'not required'}, MIG "
        f"{'allowed' if default('accept_mig_allowed') else 'not allowed'}.",
    ]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[], str]] = {
    "environment-variables": environment_table,
    "api-error-codes": api_error_codes,
    "acceptance-references": acceptance_references,
}


def fill(markdown: str, page: str) -> tuple[str, set[str]]:
    """The page with each marker replaced by what it names, and the names it had; an unknown
    marker is an error."""
    used: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(f"{page}: no generated part is called {name!r} ({sorted(RENDERERS)})")
        used.add(name)
        return RENDERERS[name]()

    return MARKER.sub(replace, markdown), used
