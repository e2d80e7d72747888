"""kirolearn installs beside PyPI's `supervisor` (supervisord) without either breaking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def run_python(code: str) -> str:
    # cwd=/tmp so that nothing is imported from a source checkout by accident
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd="/tmp", check=True)
    return result.stdout.strip()


def test_both_supervisor_packages_import_side_by_side():
    out = run_python(
        "import supervisor, supervisor.supervisord, supervisor.options\n"
        "import kirolearn.supervisor, kirolearn.supervisor.cli, kirolearn.supervisor.arbiter\n"
        "print(supervisor.__file__); print(kirolearn.supervisor.__file__)")
    theirs, ours = out.splitlines()
    assert "kirolearn" not in theirs and theirs.endswith("supervisor/__init__.py")
    assert ours != theirs


def test_supervisord_still_runs():
    result = subprocess.run([BIN / "supervisord", "--version"], capture_output=True, text=True,
                            cwd="/tmp", check=True)
    assert result.stdout.strip()[0].isdigit()


def test_kirolearn_console_script_runs():
    result = subprocess.run([BIN / "kirolearn", "--version"], capture_output=True, text=True,
                            cwd="/tmp", check=True)
    assert result.stdout.startswith("kirolearn")


def test_packaged_defaults_are_installed():
    out = run_python("from kirolearn import config; print(sorted(config.defaults()))")
    assert "retrieval" in out and "storage" in out


def test_shims_import_only_light_modules():
    """The modules a shim needs must not drag in click, tenacity or asyncio (start-up cost)."""
    out = run_python(
        "import sys\n"
        "import kirolearn.contract, kirolearn.project, kirolearn.protocol, kirolearn.paths,"
        " kirolearn.transport\n"
        "print(sorted(m for m in ('click', 'tenacity', 'asyncio', 'ulid', 'sqlite3')"
        " if m in sys.modules))")
    assert out == "[]"
