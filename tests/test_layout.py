"""The layout keeps its promises: every op is documented, SQL stays in the db package,
and a shim imports only what a hook can afford."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from radon.visitors import ComplexityVisitor

from kirolearn.agents import AGENTS
from kirolearn.roles import base
from kirolearn.roles.extraction import ExtractionWorker
from kirolearn.roles.ingest import Ingest
from kirolearn.roles.retrieval import Retrieval
from kirolearn.roles.storage import Storage
from kirolearn.roles.viewer import Viewer
from kirolearn.supervisor.arbiter import Arbiter

ROOT = Path(__file__).parent.parent
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text()
# Every command an agent runs on its hot path: each hook's shim, and the status line.
SHIMS = (*(f"kirolearn.shims.{agent.module}" for agent in AGENTS.values()),
         "kirolearn.shims.statusline")
# What a hook may import: the standard library, pyzmq, msgpack and kirolearn's light modules.
SHIM_MAY_IMPORT = {"kirolearn", "kirolearn.shims", "kirolearn.shims.common",
                   "kirolearn.contract", "kirolearn.paths", "kirolearn.project",
                   "kirolearn.protocol", "kirolearn.transport", "kirolearn.spool",
                   "kirolearn.control", "kirolearn.capture", "kirolearn.tooluse",
                   "kirolearn.words", "kirolearn.rules", "kirolearn.code", "kirolearn.agents",
                   "kirolearn.code.files", *SHIMS}
# Start-up is most of a hook's cost: each of these costs it milliseconds.
SHIM_MUST_NOT = ("click", "ulid", "tenacity", "asyncio", "_hashlib", "sqlite3", "logging",
                 "tomllib", "subprocess", "socket", "numpy", "starlette", "mcp", "pydantic",
                 "uvicorn", "jinja2", "onnxruntime", "tokenizers", "dataclasses", "inspect")


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


# The layers, lowest first (a folder or module each, as docs/architecture.md draws them):
# a module imports from a lower layer or from its own folder, never from beside or above.
LAYERS = (
    ("kirolearn", "kirolearn.contract", "kirolearn.configs", "kirolearn.supervisor.states",
     "kirolearn.words", "kirolearn.heap", "kirolearn.agents"),
    ("kirolearn.paths", "kirolearn.protocol", "kirolearn.code.files"),
    ("kirolearn.transport", "kirolearn.project", "kirolearn.spool", "kirolearn.keys",
     "kirolearn.tooluse"),
    ("kirolearn.config", "kirolearn.privacy", "kirolearn.access"),
    ("kirolearn.capture",),
    ("kirolearn.code",),
    ("kirolearn.db",),
    ("kirolearn.search", "kirolearn.extract"),
    ("kirolearn.control",),
    ("kirolearn.rules",),
    ("kirolearn.viewer", "kirolearn.mcp_server", "kirolearn.importer", "kirolearn.seed",
     "kirolearn.shims", "kirolearn.install"),
    ("kirolearn.transcripts",),
    ("kirolearn.roles",),
    ("kirolearn.supervisor",),
    ("kirolearn.cli",),
    ("kirolearn.__main__",),
)
FOLDERS = {"kirolearn": "kirolearn", "supervisor": "kirolearn.supervisor",
           "shims": "kirolearn.shims", "configs": "kirolearn.configs"}


def modules() -> dict[str, Path]:
    """Every module of the package by its installed name."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts
                     if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Which of our modules each module imports, at its top or inside a function."""
    names = modules()
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}"
                           in names else node.module for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in names and t != name)
    return graph


def place(module: str) -> tuple[int, str]:
    """A module's layer and the folder or module of LAYERS it belongs to."""
    found = [(number, unit) for number, layer in enumerate(LAYERS) for unit in layer
             if module == unit or (unit != "kirolearn" and module.startswith(unit + "."))]
    assert found, f"{module} is in no layer of LAYERS: place it there"
    return max(found, key=lambda pair: len(pair[1]))


def test_imports_go_down_the_layers():
    wrong = []
    for module, targets in import_graph().items():
        layer, unit = place(module)
        for target in targets:
            target_layer, target_unit = place(target)
            if target_unit != unit and target_layer >= layer:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports beside or up the layers:\n" + "\n".join(sorted(wrong))


def test_a_role_uses_no_other_roles_parts():
    """A role's folder is its own: what two roles need lives in ``roles/`` beside them."""
    folders = {m.rsplit(".", 1)[0] for m in modules() if m.count(".") == 3
               and m.startswith("kirolearn.roles.")}
    assert {"kirolearn.roles.ingest", "kirolearn.roles.storage",
            "kirolearn.roles.retrieval"} <= folders
    wrong = [f"{module} -> {target}" for module, targets in import_graph().items()
             for target in targets for folder in folders
             if target.startswith(folder + ".")
             and module != folder and not module.startswith(folder + ".")
             and module.startswith("kirolearn.roles.")]
    assert not wrong, "a role reaching into another's folder:\n" + "\n".join(sorted(wrong))


def test_no_import_circle():
    graph = import_graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join(
                [*path[path.index(module):], module]))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


MAX_BRANCHES = 20  # radon's cyclomatic complexity: it counts `and`/`or`, ruff's C901 does not
LONG_MODULE = 450  # lines


def test_no_function_takes_more_than_twenty_branches():
    over = [f"{path.relative_to(ROOT)}:{block.lineno} {block.fullname} ({block.complexity})"
            for path in modules().values()
            for block in ComplexityVisitor.from_code(path.read_text()).blocks
            if block.complexity > MAX_BRANCHES]
    assert not over, f"split into named steps: {over}"


def test_a_long_module_says_why_at_its_top():
    """A module past LONG_MODULE lines says in its docstring why it is one module ("long
    as it is: …"); else it is split."""
    unsaid = [str(path.relative_to(ROOT)) for path in modules().values()
              if len(path.read_text().splitlines()) > LONG_MODULE
              and "long as it is" not in " ".join(
                  (ast.get_docstring(ast.parse(path.read_text())) or "").split())]
    assert not unsaid, f"over {LONG_MODULE} lines with no reason at the top: {unsaid}"
