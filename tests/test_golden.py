"""Golden records: a real multi-tool turn of each agent, sent by its installed shim
to a real daemon, becomes exactly the record a colleague would want to read — what
was asked, what was changed (files, functions), what failed and why, what was
concluded. Payloads follow each agent's documented hook format
(../shared/reference/hook-payloads.md). The records are in ``golden_records.json``:
a change to what extraction writes shows there as a diff to review, not as a drift.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import private_home
from helpers.cli import kl
from helpers.events import retrieval
from helpers.waits import wait_for
from helpers.workspace import Workspace

SOURCE = '''def write_row(out, row):
    out.write(",".join(row) + "\\n")
'''
FIXED = '''def write_row(out, row):
    csv.writer(out).writerow(row)
'''
TEST = '''def test_a_title_with_a_comma_stays_one_field():
    assert read_back(write_row(["a, b"])) == ["a, b"]
'''
GOLDEN = json.loads((Path(__file__).parent / "golden_records.json").read_text("utf-8"))
FAILURE = ("FAILED tests/test_export.py::test_a_title_with_a_comma_stays_one_field"
           " - KeyError: 'title'\n1 failed, 4 passed in 0.31s")


@pytest.fixture(scope="module")
def golden_daemon():
    """A daemon for the module that forms a batch 8 s after a turn's last event (the
    Kiro IDE posts no empty stop, so its turn waits for that, 30 s by default): longer
    than a hook takes on a loaded machine, whose quiet between two hooks of a turn would
    otherwise cut the turn (the others' turns end with their stop)."""
    with pytest.MonkeyPatch.context() as monkeypatch, private_home(monkeypatch) as base:
        monkeypatch.setenv("KIROLEARN_STORAGE_BATCH_IDLE_S", "8")
        kl("start", check=True)
        yield base
        kl("stop", check=True)


@pytest.fixture
def ws(tmp_path, golden_daemon):
    return Workspace(tmp_path)


def records_of(ws: Workspace, count: int) -> list[dict]:
    """The namespace's records, the turn's first, once there are count of them."""
    def found() -> list[dict] | None:
        ids = retrieval("search", {"query": "export comma title csv rows storage WAL",
                                   "namespace": ws.namespace, "mode": "lexical",
                                   "limit": 50})["record_ids"]
        if len(ids) < count:
            return None
        got = retrieval("get_records", {"ids": ids, "namespaces": [ws.namespace]})["records"]
        return sorted(got, key=lambda r: (r["observation_type"] != "tool_use", r["title"]))

    return [{key: r[key] for key in ("title", "summary", "facts", "files_touched",
                                     "observation_type")}
            for r in wait_for(found, message=f"{count} records in {ws.namespace}")]


def hook(ws: Workspace, script: str, payload: dict | None, *args: str, **env: str) -> str:
    result, _ = ws.hook(script, payload, *args, **env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def test_a_claude_code_turn(ws):
    path = str(ws.project / "src/export.py")
    common = {"session_id": "c0ffee-golden", "transcript_path": "/x/c0ffee-golden.jsonl",
              "cwd": str(ws.project)}

    def claude(event: str, **fields) -> None:
        hook(ws, "kirolearn-claude-code", {**common, "hook_event_name": event, **fields})

    claude("UserPromptSubmit", prompt="The CSV export splits titles that hold a comma;"
                                      " fix it and add a test", permission_mode="default")
    claude("PostToolUse", tool_name="Read", tool_input={"file_path": path},
           tool_response={"type": "text", "file": {"filePath": path, "content": SOURCE,
                                                   "numLines": 2, "startLine": 1}})
    claude("PostToolUse", tool_name="Grep", tool_input={"pattern": "write_row", "path": "src"},
           tool_response={"mode": "files_with_matches", "filenames": [path], "numFiles": 1})
    claude("PostToolUse", tool_name="Edit",
           tool_input={"file_path": path, "old_string": SOURCE, "new_string": FIXED},
           tool_response={"filePath": path, "oldString": SOURCE, "newString": FIXED})
    claude("PostToolUse", tool_name="Write",
           tool_input={"file_path": str(ws.project / "tests/test_export.py"), "content": TEST},
           tool_response={"type": "create", "filePath": str(ws.project / "tests/test_export.py")})
    claude("PostToolUseFailure", tool_name="Bash",
           tool_input={"command": "pytest tests/test_export.py", "description": "Run the tests"},
           error=f"Exit code 1\n{FAILURE}", error_type="tool_error", is_interrupt=False,
           is_timeout=False, tool_use_id="toolu_03")
    claude("PostToolUse", tool_name="Bash",
           tool_input={"command": "pytest tests/test_export.py", "description": "Run the tests"},
           tool_response={"stdout": "5 passed in 0.29s", "stderr": "", "interrupted": False})
    claude("Stop", stop_hook_active=False, last_assistant_message=(
        "Rows are written with csv.writer now, so a comma in a title stays in its field."
        " The first run failed on a fixture without a title; I gave it one."))
    assert records_of(ws, 2) == GOLDEN["claude-code"]


def test_a_kiro_cli_turn(ws):
    path = str(ws.project / "src/storage.py")

    def kiro(event: str, **fields) -> None:
        hook(ws, "kirolearn-kiro-cli", {"hook_event_name": event, "cwd": str(ws.project),
                                         **fields})

    def bash(command: str, status: str, stdout: str) -> dict:
        return {"tool_name": "execute_bash",
                "tool_input": {"command": command, "summary": "run the storage tests"},
                "tool_response": {"success": status == "0", "result": [
                    {"exit_status": status, "stdout": stdout, "stderr": ""}]}}

    kiro("agentSpawn")
    kiro("userPromptSubmit", prompt="Open the storage database in WAL mode")
    kiro("postToolUse", tool_name="fs_read",
         tool_input={"operations": [{"mode": "Line", "path": path}]},
         tool_response={"success": True, "result": ["def connect(path):\n    ..."]})
    kiro("postToolUse", tool_name="fs_write", tool_input={
        "command": "str_replace", "path": path, "old_str": "def connect(path):\n    ...",
        "new_str": 'def connect(path):\n    conn.execute("PRAGMA journal_mode=WAL")'},
         tool_response={"success": True, "result": [""]})
    kiro("postToolUse", **bash("pytest tests/test_storage.py", "1",
                               "E   sqlite3.OperationalError: database is locked\n"
                               "1 failed, 7 passed in 1.20s"))
    kiro("postToolUse", **bash("pytest tests/test_storage.py", "0", "8 passed in 1.02s"))
    kiro("stop", assistant_response="The database opens in WAL mode; readers no longer"
                                    " wait for the writer. A test held a connection open,"
                                    " which the first run showed as a locked database.")
    assert records_of(ws, 2) == GOLDEN["kiro-cli"]


def test_a_kiro_ide_turn_with_an_empty_stop(ws):
    """The IDE's agentStop carries no text: the record is made of the tool uses."""
    def ide(event: str, payload: str) -> None:
        hook(ws, "kirolearn-kiro-ide", None, event, USER_PROMPT=payload)

    def tool(name: str, args: dict, result: str, success: bool = True) -> str:
        return json.dumps({"toolName": name, "toolArgs": args, "toolResult": result,
                           "toolSuccess": success})

    ide("promptSubmit", "Rename the rows setting to max_rows in the export config")
    ide("postToolUse", tool("readFile", {"path": "config/export.toml"}, "rows = 500"))
    ide("postToolUse", tool("strReplace", {"path": "config/export.toml",
                                           "oldStr": "rows = 500", "newStr": "max_rows = 500"},
                            "Replaced 1 occurrence"))
    ide("postToolUse", tool("executeBash", {"command": "make check-config"},
                            "config/export.toml: unknown key max_rows", False))
    ide("agentStop", "")
    assert records_of(ws, 2) == GOLDEN["kiro-ide"]
