"""``kirolearn import-sessions``: the agents' own stored transcripts as memory, through
the real daemon.

The samples in ``tests/samples`` were written by the real CLIs (Claude Code, Codex,
Gemini CLI, Copilot CLI and OpenCode, as pinned in ``tests/e2e/package.json``) in their
end-to-end tests, run against a scripted API: one session each, "Say hello with a shell
command", answered with ``echo hello`` and "done". Only the user's home directory in them
is replaced (``/home/dev``), so that a test can put the session's project where it likes.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from helpers.cli import kl
from helpers.events import stored_events
from helpers.waits import wait_for
from helpers.workspace import Workspace
from hypothesis import given, settings
from hypothesis import strategies as st

from kirolearn import contract, project
from kirolearn.transcripts import claude_code, codex, copilot, gemini, opencode, replay

SAMPLES = Path(__file__).parent / "samples"
CLAUDE_SESSION = "219299d5-d688-4622-8b92-05a2826de608"
CODEX_SESSION = "01a21fd4-8b1f-75a0-8dcc-e5071d36976b"
CODEX_FILE = f"rollout-2026-11-28T01-45-52-{CODEX_SESSION}.jsonl"
GEMINI_SESSION = "75a7e6a3-51eb-4671-b05f-ab6f43857972"
COPILOT_SESSION = "f937f3d1-1601-42e1-af76-dc46b16ce30b"


def place(sample: str, user_home: Path, project_dir: Path, name: str | None = None,
          session: str | None = None) -> Path:
    """A sample where its agent keeps transcripts, its session in ``project_dir`` (and,
    given ``session``, under that id instead of its own)."""
    text = (SAMPLES / sample).read_text().replace("/home/dev/proj", str(project_dir))
    if sample == "copilot.jsonl":
        if session:
            text = text.replace(COPILOT_SESSION, session)
        where = user_home / ".copilot" / "session-state" / (session or COPILOT_SESSION)
        path = where / "events.jsonl"
    elif sample == "gemini.jsonl":
        folder = user_home / ".gemini" / "tmp" / project_dir.name
        where = folder / "chats"
        where.mkdir(parents=True, exist_ok=True)
        (folder / ".project_root").write_text(str(project_dir))
        if session:
            text = text.replace(GEMINI_SESSION, session)
        path = where / (name or "session-2026-11-28T02-11-75a7e6a3.jsonl")
    elif sample == "claude-code.jsonl":
        where = user_home / ".claude" / "projects" / str(project_dir).replace("/", "-")
        if session:
            text = text.replace(CLAUDE_SESSION, session)
        path = where / f"{session or CLAUDE_SESSION}.jsonl"
    else:
        where = user_home / ".codex" / "sessions" / "2026" / "11" / "28"
        if session:
            text = text.replace(CODEX_SESSION, session)
        path = where / (name or CODEX_FILE)
    where.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def place_opencode(user_home: Path, project_dir: Path) -> Path:
    """OpenCode's database, holding the sample's session, in ``project_dir``."""
    where = user_home / ".local" / "share" / "opencode"
    where.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(where / "opencode.db")
    conn.executescript((SAMPLES / "opencode.sql").read_text().replace(
        "/home/dev/proj", str(project_dir)))
    conn.close()
    return where / "opencode.db"


def shapes(made: list[dict]) -> list[tuple[str, object]]:
    return [(event["kind"], event["body"]) for event in made]


def read_events(module, path: Path) -> list[dict]:
    transcript = module.read(path)
    assert not transcript.problems, transcript.problems
    here = project.resolve_project(transcript.cwd, override="")
    return replay.events(transcript, here, "tester")


def test_a_transcript_becomes_the_events_its_hooks_would_have_sent(tmp_path):
    """What each real transcript reads as is what the live hooks stored in the same
    end-to-end run: the same kinds and the same bodies, each tool use under its prompt;
    the context the agent was given (ours too) is not a prompt."""
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    started = [("note", {"type": "text", "content": f"{agent} session started (imported)"})
               for agent in ("claude-code", "codex", "gemini")]
    prompt = ("prompt", {"type": "text", "content": "Say hello with a shell command"})
    reply = ("session_summary", {"type": "text", "content": "done"})

    claude = read_events(claude_code, place("claude-code.jsonl", tmp_path, proj))
    assert shapes(claude) == [started[0], prompt, ("tool_use", {"type": "json", "data": {
        "tool_name": "Bash", "tool_input": {"command": "echo hello", "description": "Say hello"},
        "tool_response": {"stdout": "hello", "stderr": "", "interrupted": False,
                          "isImage": False, "noOutputExpected": False}}}), reply,
        ("note", {"type": "text", "content": "claude-code session ended (imported)"})]
    made = read_events(codex, place("codex.jsonl", tmp_path, proj))
    assert shapes(made) == [started[1], prompt, ("tool_use", {"type": "json", "data": {
        "tool_name": "Bash", "tool_input": {"command": "echo hello"},
        "tool_response": "hello\n"}}), reply,
        ("note", {"type": "text", "content": "codex session ended (imported)"})]

    said = read_events(gemini, place("gemini.jsonl", tmp_path, proj))
    assert shapes(said) == [started[2], prompt, ("tool_use", {"type": "json", "data": {
        "tool_name": "run_shell_command", "tool_input": {"command": "echo hello"},
        "tool_response": {"output": "<untrusted_context>\nOutput: hello\nProcess Group"
                                    " PGID: 21775\n</untrusted_context>"}}}), reply,
        ("note", {"type": "text", "content": "gemini session ended (imported)"})]

    # Copilot's hooks give no reply at a turn's end: neither does its import
    used = read_events(copilot, place("copilot.jsonl", tmp_path, proj))
    assert shapes(used) == [
        ("note", {"type": "text", "content": "copilot session started (imported)"}), prompt,
        ("tool_use", {"type": "json", "data": {
            "tool_name": "bash", "tool_input": {"command": "echo hello",
                                                "description": "Say hello"},
            "tool_response": {"output": "hello\n<shellId: 0 completed with exit code 0>",
                              "exit_code": 0}}}),
        ("note", {"type": "text", "content": "copilot session ended (imported)"})]
    assert used[2]["source"]["branch"] == "master"

    place_opencode(tmp_path, proj)
    [session] = opencode.transcripts(tmp_path)
    assert not session.problems
    coded = replay.events(session, project.resolve_project(proj, override=""), "tester")
    assert shapes(coded) == [
        ("note", {"type": "text", "content": "opencode session started (imported)"}), prompt,
        ("tool_use", {"type": "json", "data": {
            "tool_name": "bash", "tool_input": {"command": "echo hello",
                                                "description": "Say hello"},
            "tool_response": {"output": "hello\n", "exit_code": 0}}}), reply]

    for events, session in ((claude, CLAUDE_SESSION), (made, CODEX_SESSION),
                            (said, GEMINI_SESSION), (used, COPILOT_SESSION),
                            (coded, "ses_de02acc4dffeXHco2K0tZdlGsV")):
        assert all(e["session_id"] == session for e in events)
        assert all(e["source"]["project_path"] == str(proj) for e in events)
        assert {e.get("parent_event_id") for e in events
                if e["kind"] in ("tool_use", "session_summary")} == {events[1]["event_id"]}
        for event in events:
            contract.validate_event(event)  # raises ContractError if not v1
        assert [e["valid_time"] for e in events] == sorted(e["valid_time"] for e in events)
    assert claude[1]["valid_time"] == "2026-11-28T01:45:54.170+00:00"  # the transcript's
    again = read_events(claude_code, place("claude-code.jsonl", tmp_path, proj))
    assert [e["event_id"] for e in again] == [e["event_id"] for e in claude]


def test_lines_that_cannot_be_read_are_reported_and_the_rest_read(tmp_path):
    path = place("claude-code.jsonl", tmp_path, tmp_path / "proj")
    lines = path.read_text().splitlines()
    lines.insert(3, "[1, 2]")
    lines.insert(5, "{not json")
    lines.append(lines[-2][:40])  # the last line, cut short by a crash
    path.write_text("\n".join(lines))
    transcript = claude_code.read(path)
    assert transcript.problems == ["line 4: not a JSON object", "line 6: not JSON",
                                   f"line {len(lines)}: not JSON"]
    assert [hook.role for _, hook in transcript.hooks] == [
        "start", "prompt", "tool", "turn_end", "end"]


LINE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "message", "content", "payload", "timestamp", "cwd",
                         "sessionId", "id", "role", "text", "call_id", "name", "item",
                         "arguments", "input", "output", "tool_use_id", "is_error", "$set",
                         "messages", "toolCalls", "args", "result", "functionResponse",
                         "response", "status", "data", "toolCallId", "toolName",
                         "success", "sessionId"]),
        inner, max_size=5), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.lists(LINE, max_size=12))
def test_any_lines_read_without_failing(tmp_path_factory, lines):
    """Whatever a transcript holds, reading it never fails, and what it reads as are
    hooks of known roles with tool uses of the one shape."""
    folder = tmp_path_factory.mktemp("any")
    (folder / ".project_root").write_text("/p")  # Gemini's: the chats' folder's parent
    (folder / "chats").mkdir()
    for module, first in ((gemini, {"sessionId": "s", "startTime": "2026-01-01T00:00:00Z"}),
                          (claude_code, {"type": "user", "cwd": "/p", "sessionId": "s",
                                         "timestamp": "2026-01-01T00:00:00Z",
                                         "message": {"content": "hi"}}),
                          (codex, {"type": "session_meta", "timestamp": "2026-01-01T00:00:00Z",
                                   "payload": {"id": "s", "cwd": "/p"}}),
                          (copilot, {"type": "session.start", "timestamp": "2026-01-01T00:00:00Z",
                                     "data": {"sessionId": "s", "context": {"cwd": "/p"}}})):
        path = folder / "chats" / "t.jsonl"
        path.write_text("\n".join(json.dumps(line) for line in [first, *lines]))
        transcript = module.read(path)
        assert {hook.role for _, hook in transcript.hooks} <= {
            "start", "prompt", "tool", "turn_end", "end"}
        for body in (tool for _, hook in transcript.hooks for tool in hook.tools):
            assert set(body["data"]) == {"tool_name", "tool_input", "tool_response"}


def test_import_sessions_through_the_daemon(daemon, tmp_path):
    """Both agents' sessions are imported into their project's memory and made into
    records; a run again stores nothing; a session its hooks captured live is left
    alone; ``--project`` keeps to one project; bad arguments change nothing."""
    ws = Workspace(tmp_path)
    env = ws.env()
    other = ws.home / "other"
    (other / ".git").mkdir(parents=True)
    place("claude-code.jsonl", ws.home, ws.project)
    place("codex.jsonl", ws.home, ws.project)
    place("claude-code.jsonl", ws.home, other, session="5e55107a-0000-4000-8000-000000000001")

    refused = kl("import-sessions", "--agent", "cursor", env=env)
    assert refused.returncode == 2 and "'cursor' is not one of" in refused.stderr
    assert stored_events() == []

    # a live Codex session the hooks captured: the import leaves it alone
    for hook in ({"hook_event_name": "UserPromptSubmit", "prompt": "Say hello"},
                 {"hook_event_name": "Stop", "last_assistant_message": "hello"}):
        live, _ = ws.hook("kirolearn-codex", {"session_id": CODEX_SESSION,
                                              "cwd": str(ws.project), **hook})
        assert live.returncode == 0, live.stderr
    done = kl("import-sessions", "--agent", "codex", env=env, cwd=str(ws.project), check=True)
    assert "imported 0 session(s)" in done.stdout, done.stdout
    assert "left out 1 session(s): 1 captured live by its hooks" in done.stdout, done.stdout

    done = kl("import-sessions", "--agent", "claude-code", "--project", str(ws.project),
              env=env, check=True)
    assert "imported 1 session(s) of claude-code" in done.stdout, done.stdout
    assert "events stored 5, duplicate 0" in done.stdout
    assert "left out 1 session(s): 1 another project's" in done.stdout
    imported = [e for e in stored_events() if e["session_id"] == CLAUDE_SESSION]
    assert [e["kind"] for e in imported] == ["note", "prompt", "tool_use", "session_summary",
                                             "note"]
    assert {e["namespace"] for e in imported} == {ws.namespace}

    def records() -> list[dict]:
        lines = map(json.loads, kl("export", check=True).stdout.splitlines())
        return [r for r in lines if "record_id" in r and r["namespace"] == ws.namespace]

    ids = {e["event_id"] for e in imported}
    [made] = wait_for(lambda: [r for r in records() if ids & set(r["source_event_ids"])],
                      30, 0.2, "the imported session's record")
    assert made["title"] == "Say hello with a shell command"
    assert "echo hello" in json.dumps(made)

    again = kl("import-sessions", "--agent", "claude-code", env=env, check=True)
    assert "imported 2 session(s)" in again.stdout  # this project's again, and the other's
    assert "events stored 5, duplicate 5" in again.stdout, again.stdout
