"""kirolearn installs beside PyPI's `supervisor` (supervisord) without either breaking."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run_python(code: str) -> str:
    # cwd=/tmp so that nothing is imported from a source checkout by accident
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd="/tmp", check=True)
    return result.stdout.strip()


def test_both_supervisor_packages_import_side_by_side():
    out = run_python(
        "import supervisor, supervisor.supervisord, supervisor.options\n"
        "import kirolearn.supervisor, kirolearn.cli, kirolearn.supervisor.arbiter\n"
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


@pytest.mark.timeout(900)  # pip installs everything: minutes on a loaded machine (600 s allowed)
def test_quick_start_install_and_start_in_a_fresh_checkout(tmp_path):
    """The README's first Quick start command, verbatim, in a copy of this checkout."""
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    command = next(line for line in readme.splitlines()
                   if line.startswith("python3 -m venv") and line.endswith("kirolearn start"))
    checkout = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (root / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, checkout / name)
    home = tmp_path / "h"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KIROLEARN_", "VIRTUAL_ENV", "PYTHON"))}
    env["HOME"] = str(home)
    kirolearn = checkout / ".venv" / "bin" / "kirolearn"
    try:
        result = subprocess.run(["bash", "-c", command], cwd=checkout, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "RUNNING" in result.stdout
        # Every package of the checkout was installed (setuptools finds them; the top-level
        # folders go under kirolearn.), with its modules.
        installed = subprocess.run(
            [checkout / ".venv" / "bin" / "python", "-c",
             "import kirolearn, pkgutil\nfor m in pkgutil.walk_packages(kirolearn.__path__,"
             " 'kirolearn.'): print(m.name)"], cwd=tmp_path, capture_output=True, text=True,
            check=True).stdout.split()
        assert set(installed) >= source_modules(checkout)
        # The embedding model's tokenizer ships inside the package, whole.
        tokenizer = subprocess.run(
            [checkout / ".venv" / "bin" / "python", "-c",
             "import hashlib\nfrom kirolearn.search import embeddings\n"
             "print(hashlib.sha256(embeddings.TOKENIZER.read_bytes()).hexdigest())"],
            cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
        assert tokenizer == hashlib.sha256(
            (root / "kirolearn/search/models/all-MiniLM-L6-v2/tokenizer.json").read_bytes(
            )).hexdigest()
        status = json.loads(subprocess.run([kirolearn, "status", "--json"], cwd=checkout,
                                           env=env, capture_output=True, text=True,
                                           check=True).stdout)
        assert status["home"] == str(home / ".kirolearn")
        # The plain install searches by meaning too: the packaged model, checked.
        assert status["embeddings"]["embeddings"].startswith(
            "on: all-MiniLM-L6-v2 (packaged, int8; vector space onnx-")
        assert status["embeddings"]["mode"] == "hybrid"
        checked = subprocess.run([checkout / ".venv" / "bin" / "pip", "check"], cwd=tmp_path,
                                 capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout
        # The viewer's templates and static files are in the installed package.
        url = subprocess.run([kirolearn, "open", "--url"], cwd=checkout, env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(url, timeout=10) as page:
            assert page.status == 200 and "<h1>Overview</h1>" in page.read().decode()
        with opener.open(url.split("?")[0] + "static/viewer.js", timeout=10) as script:
            assert b"EventSource" in script.read()
    finally:
        if kirolearn.exists():
            subprocess.run([kirolearn, "stop"], cwd=checkout, env=env, capture_output=True,
                           timeout=120)
    assert not processes_using_home(home)


def processes_using_home(home: Path) -> list[int]:
    from helpers.cli import processes_using

    return processes_using(home / ".kirolearn")


def source_modules(checkout: Path) -> set[str]:
    """The modules a checkout holds, by the names they are installed under."""
    folders = {"kirolearn": "kirolearn", "supervisor": "kirolearn.supervisor",
               "shims": "kirolearn.shims", "configs": "kirolearn.configs"}
    names = set()
    for folder, package in folders.items():
        for path in (checkout / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(checkout / folder).with_suffix("").parts
                     if p not in ("__init__", "__main__")]
            if parts:
                names.add(".".join([package, *parts]))
    return names
