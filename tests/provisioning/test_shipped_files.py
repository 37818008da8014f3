"""The two files a host gets (provisioning/validation/build.py): each is one self-contained
file that needs the standard library and PyTorch only, and the same sources build the same
bytes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from provisioning.validation import build
from tests.provisioning.shipped import BENCHMARK, TOOL, modules

ALLOWED = set(sys.stdlib_module_names) | {"torch", "__future__"}
OPTIONAL = {"transformers", "lightning", "pytorch_lightning"}
"""Imported inside a function only, by a hook for the researcher's own job that uses it
(gpulots.hf_callback, gpulots.lightning_callback): never needed to run the file."""


@pytest.mark.parametrize(("built", "package"), [(BENCHMARK, "benchmark"), (TOOL, "gpulots")])
def test_each_file_imports_the_standard_library_and_torch_only(built: Path, package: str) -> None:
    shipped = modules(built)
    assert "__main__.py" in shipped
    assert f"{package}/__init__.py" in shipped
    for name, source in shipped.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = {node.module.split(".")[0]}
            elif isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            else:
                continue
            assert roots <= ALLOWED | OPTIONAL | {package}, (name, roots)
        for node in ast.parse(source).body:  # what runs on import: no optional one
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] not in OPTIONAL, (name, node.module)
            if isinstance(node, ast.Import):
                assert not {a.name.split(".")[0] for a in node.names} & OPTIONAL, name


@pytest.mark.parametrize(
    ("built", "arguments", "usage"),
    [
        (BENCHMARK, ["--help"], "usage: benchmark.pyz"),
        (TOOL, ["split-test", "--help"], "usage: gpulots split-test"),
    ],
)
def test_each_file_runs_on_its_own_away_from_the_project(
    built: Path, arguments: list[str], usage: str, tmp_path: Path
) -> None:
    alone = tmp_path / built.name
    alone.write_bytes(built.read_bytes())  # the file as uploaded, nothing beside it
    done = subprocess.run(
        [sys.executable, "-I", str(alone), *arguments],  # -I: no PYTHONPATH, no project
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(usage)


def test_the_same_sources_build_the_same_bytes(tmp_path: Path) -> None:
    for name in build.TOOLS:
        first = build.build(name, tmp_path / "one").read_bytes()
        second = build.build(name, tmp_path / "two").read_bytes()
        assert first == second
        assert first.startswith(b"#!/usr/bin/env python3\n")
