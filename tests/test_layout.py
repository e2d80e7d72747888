"""The layout keeps its promises: every op is documented, SQL stays in the db package,
and a shim imports only what a hook can afford."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kirolearn.roles import base
from kirolearn.roles.extraction import ExtractionWorker
from kirolearn.roles.ingest import Ingest
from kirolearn.roles.retrieval import Retrieval
from kirolearn.roles.storage import Storage
from kirolearn.roles.viewer import Viewer
from kirolearn.supervisor.arbiter import Arbiter

ROOT = Path(__file__).parent.parent
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text()
SHIMS = ("kirolearn.shims.kiro_cli", "kirolearn.shims.kiro_ide", "kirolearn.shims.claude_code")
# What a hook may import: the standard library, pyzmq, msgpack and kirolearn's light modules.
SHIM_MAY_IMPORT = {"kirolearn", "kirolearn.shims", "kirolearn.shims.common",
                   "kirolearn.contract", "kirolearn.paths", "kirolearn.project",
                   "kirolearn.protocol", "kirolearn.transport", "kirolearn.spool",
                   "kirolearn.control", "kirolearn.capture", "kirolearn.tooluse", *SHIMS}
# Start-up is most of a hook's cost: each of these costs it milliseconds.
SHIM_MUST_NOT = ("click", "ulid", "tenacity", "asyncio", "_hashlib", "sqlite3", "logging",
                 "tomllib", "subprocess", "socket", "numpy", "starlette", "mcp", "pydantic",
                 "uvicorn", "jinja2", "onnxruntime", "tokenizers")


def section(name: str) -> str:
    """The part of docs/protocol.md about one socket: from its bold name to the next."""
    found = re.search(rf"^\*\*{re.escape(name)}\*\* \(.*?(?=^\*\*\w+\*\* \(|\Z)", PROTOCOL,
                      re.S | re.M)
    assert found, f"docs/protocol.md has no section for {name}"
    return found.group(0)


def handlers(klass: type, socket: str) -> dict[str, object]:
    instance = klass.__new__(klass)  # the table only, no sockets
    return base.op_table(instance, socket)


@pytest.mark.parametrize(("klass", "socket", "doc"), [
    (Ingest, "service", "ingest"), (Storage, "service", "storage"),
    (Retrieval, "service", "retrieval"), (Ingest, "control", "control"),
    (ExtractionWorker, "control", "control"), (Viewer, "control", "control"),
    (Arbiter, "control", "supervisor")])
def test_every_op_is_documented_with_a_docstring(klass, socket, doc):
    table = handlers(klass, socket)
    assert table, f"{klass.__name__} serves nothing on {socket}"
    text = section(doc)
    for name, handler in table.items():
        assert f"| `{name}` |" in text, f"{doc}: `{name}` is not in docs/protocol.md"
        assert (handler.__doc__ or "").strip(), f"{klass.__name__}.{name} has no docstring"


def test_the_roles_serve_ping_and_the_control_ops_once():
    for klass in (Ingest, Storage, Retrieval, ExtractionWorker, Viewer):
        assert set(handlers(klass, "control")) == {"ping", "shutdown"}
    assert "ping" in handlers(Storage, "service")


def test_sql_lives_in_the_db_package():
    statement = re.compile(r"\.execute(many)?\(|BEGIN IMMEDIATE|\bSELECT\s+\w|INSERT INTO")
    offenders = []
    for folder in ("kirolearn", "supervisor", "shims"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.is_relative_to(ROOT / "kirolearn" / "db"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if statement.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "SQL outside kirolearn/db:\n" + "\n".join(offenders)


@pytest.mark.parametrize("shim", SHIMS)
def test_a_shim_imports_only_the_light_modules(shim):
    """Checked twice: what is in sys.modules after importing the real shim module, and
    what ``python -X importtime`` says was imported."""
    code = f"import sys, {shim}; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    timed = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {shim}"],
                           capture_output=True, text=True, check=True).stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in timed.splitlines()
                if line.startswith("import time:") and "|" in line[12:]}
    for modules in (set(loaded), imported):
        ours = {m for m in modules if m.startswith("kirolearn")}
        assert ours <= SHIM_MAY_IMPORT, f"{shim} imports {sorted(ours - SHIM_MAY_IMPORT)}"
        heavy = {m for m in modules if m.split(".")[0] in SHIM_MUST_NOT}
        assert not heavy, f"{shim} imports {sorted(heavy)}"
