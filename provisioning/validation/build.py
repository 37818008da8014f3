"""The tools a host gets, each as one file: the acceptance benchmark (``benchmark.pyz``) and
the split-test command (``gpulots.py``), built from their packages here as zipapps.

A zipapp is a zip of the package with a ``__main__.py`` beside it and a ``#!`` line before
it; ``python FILE ...`` runs it whatever its name ends in, and imports its modules from it
(zipimport: pure Python, the standard library only). The build is deterministic: the same
sources give the same bytes (entries sorted, fixed time stamps and modes). Each build lands
in ``var/shipped/<digest of what goes in>/``, made on first use and kept: a changed source
is a new folder, never a stale file under an old name.

    python provisioning/validation/build.py [benchmark] [gpulots]    (prints their paths)

The standard library only, Python 3.9+, no Django: it runs where the benchmark does.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
import zipapp
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE.parents[1] / "var" / "shipped"
"""Beside the other run-time files (var/ is not in git; the image makes it writable)."""
FORMAT = "zipapp-1"
"""Part of the digest: a change in how the files are built gives them a new folder."""
STAMP = (1980, 1, 1, 0, 0, 0)
"""The zip format's earliest time: every entry's, so that the bytes depend on the text."""
INTERPRETER = "/usr/bin/env python3"

BENCHMARK_MAIN = '''"""The acceptance benchmark as shipped: one file, a zipapp of its package.

    python benchmark.pyz --out report.json --cards 2,3 [...]    (--help: all of it)

Run by path (runpy.run_path), it also gives the program's names, as its single file did."""

from __future__ import annotations

import sys

from benchmark import *  # noqa: F403
from benchmark.__main__ import main, parse  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
'''

GPULOTS_MAIN = '''"""gpulots split-test, as shipped: one file, a zipapp of the gpulots package.

    python gpulots.py split-test --help

The hooks your job imports (import gpulots) come from this same file."""

from __future__ import annotations

import sys

from gpulots.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
'''

TOOLS = {
    "benchmark": ("benchmark.pyz", BENCHMARK_MAIN),
    "gpulots": ("gpulots.py", GPULOTS_MAIN),
}
"""Package name: (the built file's name, its ``__main__.py``). gpulots keeps ``gpulots.py``:
the name installed in every account and downloaded from /tools/gpulots.py."""


def entries(name: str) -> list[tuple[str, bytes]]:
    """What goes into ``name``'s file, in order: ``__main__.py`` first (stored as text, so
    that the file's first bytes say what it is), then the package's modules, sorted."""
    _filename, main = TOOLS[name]
    package = HERE / name
    modules = sorted(
        path.relative_to(HERE).as_posix()
        for path in package.rglob("*.py")
        if "__pycache__" not in path.parts
    )
    return [("__main__.py", main.encode()), *((m, (HERE / m).read_bytes()) for m in modules)]


def digest(name: str) -> str:
    """The hash of what ``name``'s file is built from (and how): its folder's name."""
    hashed = hashlib.sha256(f"{FORMAT}\0{INTERPRETER}\0".encode())
    for arcname, data in entries(name):
        hashed.update(f"{arcname}\0{len(data)}\0".encode())
        hashed.update(data)
    return hashed.hexdigest()[:20]


def archive(name: str) -> bytes:
    """``name``'s zip, without the ``#!`` line: the same sources, the same bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zipped:
        for arcname, data in entries(name):
            info = zipfile.ZipInfo(arcname, date_time=STAMP)
            info.create_system = 3  # Unix, wherever it is built
            info.external_attr = 0o100644 << 16
            if arcname == "__main__.py":
                info.compress_type = zipfile.ZIP_STORED
                zipped.writestr(info, data)
            else:
                info.compress_type = zipfile.ZIP_DEFLATED
                zipped.writestr(info, data, compresslevel=9)
    return out.getvalue()


def build(name: str, folder: Path | None = None) -> Path:
    """``name``'s one file (built now unless it already is), under ``folder`` (default
    var/shipped) in a folder named for its digest. Written whole or not at all, so that
    processes building it at once each find it complete."""
    filename, _main = TOOLS[name]
    target = Path(folder or CACHE) / digest(name) / filename
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{filename}-")
    os.close(handle)
    try:
        zipapp.create_archive(io.BytesIO(archive(name)), temporary, interpreter=INTERPRETER)
        os.chmod(temporary, 0o644)  # run as `python FILE`, read by the backends
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return target


def benchmark(folder: Path | None = None) -> Path:
    """The acceptance benchmark as the backends ship it: ``python FILE --out ... --cards``."""
    return build("benchmark", folder)


def tool(folder: Path | None = None) -> Path:
    """``gpulots split-test`` as every delivered account gets it (install_tool.sh) and
    /tools/gpulots.py serves it: ``python FILE split-test --help``."""
    return build("gpulots", folder)


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or list(TOOLS)
    unknown = [name for name in names if name not in TOOLS]
    if unknown:
        known = ", ".join(TOOLS)
        print(f"build.py: no tool {', '.join(unknown)} (one of {known})", file=sys.stderr)
        return 2
    for name in names:
        print(build(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
