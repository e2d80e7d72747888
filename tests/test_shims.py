"""The installed shims, run as the agents run them, against a real daemon.

Payloads are the ones each agent documents (../shared/reference/hook-payloads.md):
every hook of every surface is checked for the stored event's kind, body,
surface, namespace and session, and for the exact stdout.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers.cli import BIN, kl
from helpers.events import (
    ACTOR,
    check_prompt_answer,
    retrieval,
    settled_context,
    stored_events,
    wait_events,
    wait_records,
)
from helpers.waits import wait_for
from helpers.workspace import Workspace, call, serve

from kirolearn import contract, project


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path)


def check_event(event: dict, ws: Workspace, kind: str, surface: str, session_id: str) -> None:
    contract.validate_event(event)
    assert event["kind"] == kind
    assert event["source"]["surface"] == surface
    assert event["source"]["project_path"] == ws.root
    assert event["namespace"] == ws.namespace
    assert event["actor_id"] == "tester"
    assert event["session_id"] == session_id


def kiro_cli(ws: Workspace, hook: str, **fields) -> str:
    result, _ = ws.hook("kirolearn-kiro-cli",
                        {"hook_event_name": hook, "cwd": str(ws.project), **fields})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


BASH_USE = {
    "tool_name": "execute_bash",
    "tool_input": {"command": "pytest tests/test_client.py", "summary": "run the tests"},
    "tool_response": {"success": True, "result": [
        {"exit_status": "0", "stdout": "3 passed in 0.41s\n", "stderr": ""}]},
}


def test_kiro_cli_every_hook(daemon, ws):
    assert kiro_cli(ws, "agentSpawn") == ""  # nothing remembered yet
    assert kiro_cli(ws, "userPromptSubmit", prompt="Add retries to the zmq client") == ""
    assert kiro_cli(ws, "postToolUse", **BASH_USE) == ""
    assert kiro_cli(ws, "stop", assistant_response="Added retries with backoff.") == ""
    assert kiro_cli(ws, "stop", assistant_response="") == ""  # posted even when empty

    spawn, prompt, tool, stop, empty_stop = wait_events(5)
    session = spawn["session_id"]
    check_event(spawn, ws, "note", "kiro-cli", session)
    check_event(prompt, ws, "prompt", "kiro-cli", session)
    assert prompt["body"] == {"type": "text", "content": "Add retries to the zmq client"}
    check_event(tool, ws, "tool_use", "kiro-cli", session)
    assert tool["body"] == {"type": "json", "data": BASH_USE}
    check_event(stop, ws, "session_summary", "kiro-cli", session)
    assert stop["body"] == {"type": "text", "content": "Added retries with backoff."}
    assert empty_stop["body"] == {"type": "text", "content": ""}
    assert tool["parent_event_id"] == stop["parent_event_id"] == prompt["event_id"]
    assert "parent_event_id" not in prompt

    # The turn is remembered: the next session starts with it, and a prompt on the
    # same subject gets it back, exactly as retrieval answers.
    wait_records(ws.namespace)
    expected = retrieval("session_context", {"namespace": ws.namespace})["context"]
    assert "\n## Where the last session left off (from kirolearn)" in expected
    assert kiro_cli(ws, "agentSpawn") == expected
    question = "why do zmq client retries matter"
    hybrid = settled_context(ws.namespace, question)
    context = kiro_cli(ws, "userPromptSubmit", prompt=question)
    assert "\n## Prior observations from kirolearn" in context
    check_prompt_answer(context, ws.namespace, question, hybrid)
    events = stored_events()
    assert events[-2]["kind"] == "note" and events[-2]["session_id"] != session  # a new one


def test_kiro_cli_v3_names_session_id_and_deferred_tool_uses(daemon, ws):
    assert kiro_cli(ws, "UserPromptSubmit", prompt="list files", session_id="v3-session") == ""
    deferred = [{"hook_event_name": "postToolUse", "cwd": str(ws.project), **BASH_USE},
                {"hook_event_name": "postToolUse", "cwd": str(ws.project),
                 "tool_name": "fs_read", "tool_input": {"path": "src/a.py"},
                 "tool_response": {"success": True, "result": ["print(1)"]}}]
    assert kiro_cli(ws, "postToolUse", hook_events=deferred, session_id="v3-session") == ""
    prompt, first, second = wait_events(3)
    for event in (prompt, first, second):
        assert event["session_id"] == "v3-session"
    assert [first["body"]["data"]["tool_name"], second["body"]["data"]["tool_name"]] == [
        "execute_bash", "fs_read"]
    assert first["parent_event_id"] == second["parent_event_id"] == prompt["event_id"]


def kiro_ide(ws: Workspace, hook: str, user_prompt: str | None = None,
             stdin: dict | None = None) -> str:
    env = {"USER_PROMPT": user_prompt} if user_prompt is not None else {}
    result, _ = ws.hook("kirolearn-kiro-ide", stdin, hook, **env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_kiro_ide_every_hook(daemon, ws):
    assert kiro_ide(ws, "promptSubmit", user_prompt="Refactor the storage layer") == ""
    # Some IDE versions leave USER_PROMPT empty and put the prompt on stdin instead.
    assert kiro_ide(ws, "promptSubmit", user_prompt="",
                    stdin={"hook_event_name": "promptSubmit", "prompt": "Use WAL mode"}) == ""
    tool = {"toolName": "fsWrite", "toolArgs": {"path": "src/db.py", "text": "x = 1"},
            "toolResult": "wrote 5 bytes", "toolSuccess": True}
    assert kiro_ide(ws, "postToolUse", user_prompt=json.dumps(tool)) == ""
    assert kiro_ide(ws, "postToolUse", user_prompt="not json {") == ""
    assert kiro_ide(ws, "agentStop", user_prompt="") == ""  # empty: nothing posted
    assert kiro_ide(ws, "agentStop", user_prompt="Switched the database to WAL.") == ""

    first, second, mapped, unknown, stop = wait_events(5)
    assert len(stored_events()) == 5
    session = first["session_id"]
    check_event(first, ws, "prompt", "kiro-ide", session)
    assert first["body"]["content"] == "Refactor the storage layer"
    check_event(second, ws, "prompt", "kiro-ide", session)
    assert second["body"]["content"] == "Use WAL mode"
    check_event(mapped, ws, "tool_use", "kiro-ide", session)
    assert mapped["body"]["data"] == {
        "tool_name": "fsWrite", "tool_input": {"path": "src/db.py", "text": "x = 1"},
        "tool_response": {"success": True, "result": "wrote 5 bytes"}}
    assert unknown["body"]["data"] == {"tool_name": "unknown", "tool_input": {},
                                       "tool_response": {"result": "not json {"}}
    check_event(stop, ws, "session_summary", "kiro-ide", session)
    assert stop["body"]["content"] == "Switched the database to WAL."
    assert mapped["parent_event_id"] == stop["parent_event_id"] == second["event_id"]

    wait_records(ws.namespace)
    question = "storage layer WAL mode"
    in_play = ("src/db.py",)  # the session wrote it: records of it rank higher
    hybrid = settled_context(ws.namespace, question, files=in_play)
    context = kiro_ide(ws, "promptSubmit", user_prompt=question)
    assert context
    check_prompt_answer(context, ws.namespace, question, hybrid, in_play)


def claude(ws: Workspace, hook: str, session_id: str = "5f1c9a2e-claude", **fields) -> str:
    payload = {"session_id": session_id, "transcript_path": f"/x/{session_id}.jsonl",
               "cwd": str(ws.project), "hook_event_name": hook, **fields}
    result, _ = ws.hook("kirolearn-claude-code", payload)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def additional_context(hook: str, context: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": hook,
                                              "additionalContext": context}})


def test_claude_code_every_hook(daemon, ws):
    write = {"tool_name": "Write",
             "tool_input": {"file_path": str(ws.project / "src/retry.py"),
                            "content": "RETRIES = 3\n"},
             "tool_response": {"filePath": str(ws.project / "src/retry.py"), "success": True},
             "tool_use_id": "toolu_01", "duration_ms": 12}
    assert claude(ws, "SessionStart", source="startup", model="claude-x") == ""
    assert claude(ws, "UserPromptSubmit", prompt="Add retries to the zmq client",
                  prompt_id="550e", permission_mode="default") == ""
    assert claude(ws, "PostToolUse", **write) == ""
    assert claude(ws, "Stop", stop_hook_active=False,
                  last_assistant_message="Done. Retries are in src/retry.py.") == ""
    assert claude(ws, "SessionEnd", reason="other") == ""

    start, prompt, tool, stop, end = wait_events(5)
    for event, kind in ((start, "note"), (prompt, "prompt"), (tool, "tool_use"),
                        (stop, "session_summary"), (end, "note")):
        check_event(event, ws, kind, "claude-code", "5f1c9a2e-claude")
    assert start["body"]["content"] == "claude-code session started (startup)"
    assert prompt["body"]["content"] == "Add retries to the zmq client"
    assert tool["body"]["data"] == {key: write[key] for key in
                                    ("tool_name", "tool_input", "tool_response")}
    assert stop["body"]["content"] == "Done. Retries are in src/retry.py."
    assert end["body"]["content"] == "claude-code session ended (other)"
    assert tool["parent_event_id"] == stop["parent_event_id"] == prompt["event_id"]

    wait_records(ws.namespace)
    session = retrieval("session_context", {"namespace": ws.namespace})["context"]
    assert session
    assert claude(ws, "SessionStart", "second", source="startup") == additional_context(
        "SessionStart", session)
    question = "zmq client retries"
    hybrid = settled_context(ws.namespace, question)
    printed = claude(ws, "UserPromptSubmit", "second", prompt=question)
    context = json.loads(printed)["hookSpecificOutput"]["additionalContext"]
    assert context and printed == additional_context("UserPromptSubmit", context)
    check_prompt_answer(context, ws.namespace, question, hybrid)


def test_the_next_session_starts_where_the_last_one_left_off(daemon, ws):
    """A session of two turns, the second ending on a failing test and a next step: the
    next session's context leads with its checkpoint, and resume_session gives it."""
    export = str(ws.project / "src/export.py")
    claude(ws, "SessionStart", source="startup")
    claude(ws, "UserPromptSubmit", prompt="Add a CSV export of invoices")
    claude(ws, "PostToolUse", tool_name="Write", tool_input={
        "file_path": export, "content": "def export_invoices(rows):\n    return rows\n"},
        tool_response={"filePath": export, "success": True})
    claude(ws, "Stop", stop_hook_active=False, last_assistant_message="Wrote export_invoices.")
    claude(ws, "UserPromptSubmit", prompt="Make the export tests pass")
    claude(ws, "PostToolUse", tool_name="Bash",
           tool_input={"command": "pytest -q tests/test_export.py"},
           tool_response={"stdout": "F..\n1 failed, 2 passed in 0.2s", "stderr": "",
                          "interrupted": False, "isImage": False})
    claude(ws, "Stop", stop_hook_active=False,
           last_assistant_message="Totals are rounded wrong. Next, fix the rounding in"
                                  " export_invoices and run the tests again.")
    claude(ws, "SessionEnd", reason="logout")

    def resumed() -> dict | None:
        reply = retrieval("resume_session", {"namespace": ws.namespace})
        done = reply["checkpoint"] and len(reply["checkpoint"]["progress"]) == 2
        return reply if done else None

    reply = wait_for(resumed, message="the second turn's record")
    last = reply["checkpoint"]
    assert last["session_id"] == "5f1c9a2e-claude"
    assert last["task"] == "Add a CSV export of invoices"
    assert last["progress"] == ["Add a CSV export of invoices (edited 1 file)",
                                "Make the export tests pass (ran 1 command)"]
    assert last["next_steps"] == [
        "Next, fix the rounding in export_invoices and run the tests again.",
        "`pytest -q tests/test_export.py` failed the last time it ran"]
    assert last["files"] == ["src/export.py"]
    started = json.loads(claude(ws, "SessionStart", "the-next-one", source="startup"))
    context = started["hookSpecificOutput"]["additionalContext"]
    assert context.split("\n\n", 1)[1].startswith(reply["context"])  # all that session's
    assert reply["context"].startswith("## Where the last session left off")

    async def scenario(client) -> tuple[bool, str]:
        return await call(client, "resume_session")

    assert serve(ws, scenario) == (False, reply["context"])


def test_a_read_is_stored_as_its_path_and_an_excerpt(daemon, ws):
    """What a Read saw is in the repository already: a whole file is not kept for ever."""
    source = "".join(f"def handler_{n}(request):\n    return {n}\n" for n in range(5_000))
    path = str(ws.project / "src/handlers.py")
    assert claude(ws, "PostToolUse", tool_name="Read", tool_input={"file_path": path},
                  tool_response={"type": "text", "file": {
                      "filePath": path, "content": source, "numLines": 10_000,
                      "startLine": 1, "totalLines": 10_000}}) == ""
    assert claude(ws, "PostToolUse", tool_name="Write",
                  tool_input={"file_path": path, "content": source},
                  tool_response={"filePath": path, "success": True}) == ""
    read, write = wait_events(2)
    assert contract.body_size(read["body"]) <= 4096
    data = read["body"]["data"]
    assert data["tool_input"] == {"file_path": path}
    assert data["tool_response"]["file"]["filePath"] == path
    assert data["tool_response"]["file"]["content"].startswith("def handler_0(request):")
    assert write["body"]["data"]["tool_input"]["content"] == source  # an edit is kept whole


def test_a_shim_never_fails_the_agent(daemon, ws):
    """Garbage in: exit 0, nothing on stdout, nothing on stderr unless debugging."""
    for script, stdin, args in (("kirolearn-kiro-cli", "not json", ()),
                                ("kirolearn-kiro-cli", "[1, 2]", ()),
                                ("kirolearn-kiro-cli", "", ()),
                                ("kirolearn-claude-code", '{"hook_event_name": 7}', ()),
                                ("kirolearn-kiro-ide", "", ("noSuchHook",)),
                                ("kirolearn-kiro-ide", "", ())):
        result, _ = ws.hook(script, stdin, *args)
        assert result.returncode == 0, (script, stdin)
        assert result.stdout == "" and result.stderr == "", (script, stdin, result.stderr)
    debug, _ = ws.hook("kirolearn-kiro-ide", None, "noSuchHook", KIROLEARN_DEBUG="1")
    assert debug.returncode == 0 and "ignored hook 'noSuchHook'" in debug.stderr
    assert stored_events() == []
    # Text no database can store (a lone surrogate; bytes that are not UTF-8) is
    # replaced, not refused: the event is kept.
    result, _ = ws.hook("kirolearn-claude-code", '{"hook_event_name": "Stop",'
                        ' "last_assistant_message": "a\\ud800b"}')
    assert result.returncode == 0 and result.stdout == result.stderr == ""
    not_utf8 = b"caf\xe9".decode("utf-8", "surrogateescape")
    raw = subprocess.run([str(BIN / "kirolearn-kiro-ide"), "agentStop"], cwd=ws.project,
                         env={**ws.env(), "USER_PROMPT": not_utf8},
                         capture_output=True, timeout=30)
    assert raw.returncode == 0 and raw.stdout == raw.stderr == b""
    assert [e["body"]["content"] for e in wait_events(2)] == ["a?b", "caf\ufffd"]


def test_a_prompt_gets_the_global_memories_that_clear_their_floor(daemon, ws):
    """What was learnt outside any project (in $HOME) comes back in a project when it is
    close in meaning to the prompt, and stays out when it is not."""
    home = project.resolve_project(ws.home, home=str(ws.home), override="")
    gitconfig = str(ws.home / ".gitconfig")
    claude(ws, "UserPromptSubmit", "in-home", cwd=str(ws.home),
           prompt="Configure git to sign every commit with my SSH key")
    claude(ws, "PostToolUse", "in-home", cwd=str(ws.home), tool_name="Write",
           tool_input={"file_path": gitconfig, "content": "[gpg]\n\tformat = ssh\n"},
           tool_response={"filePath": gitconfig, "success": True})
    claude(ws, "Stop", "in-home", cwd=str(ws.home), stop_hook_active=False,
           last_assistant_message="Commits are now signed with the SSH key.")
    wait_records(home.namespace(ACTOR))

    def context(prompt: str) -> str:
        printed = claude(ws, "UserPromptSubmit", prompt=prompt)
        return json.loads(printed)["hookSpecificOutput"]["additionalContext"] if printed else ""

    # (answers are lexical, and hold no global memory, until its vectors are loaded)
    asked = "How do I sign my git commits with an SSH key?"
    wait_for(lambda: "sign every commit" in context(asked), message="the global memory")
    assert "sign every commit" not in context("Refactor the invoice CSV exporter")
    # What `kirolearn search` prints there is what the hook injected, global memory and all.
    searched = kl("search", asked, cwd=str(ws.project), env=ws.env(), check=True).stdout
    assert searched.rstrip("\n") == context(asked)
    found = json.loads(kl("search", asked, "--json", cwd=str(ws.project), env=ws.env(),
                          check=True).stdout)
    assert home.namespace(ACTOR) in {r["namespace"] for r in found["records"]}


def test_a_file_opened_brings_back_what_is_known_of_it_once(daemon, ws):
    """The first time a session reads or edits a file, Claude Code's PostToolUse hook is
    given what is known of that file, once per file and session, never a record the
    session was given already; a file nothing is known of adds nothing."""
    retry, export = ws.project / "src/retry.py", ws.project / "src/export.py"
    for session, prompt, path, reply in (
            ("s1", "Make the zmq client back off exponentially", retry, "Retries back off."),
            ("s2", "Add a CSV export of the invoices", export, "Wrote export_invoices.")):
        claude(ws, "UserPromptSubmit", session, prompt=prompt)
        claude(ws, "PostToolUse", session, tool_name="Write",
               tool_input={"file_path": str(path), "content": "pass\n"},
               tool_response={"filePath": str(path), "success": True})
        claude(ws, "Stop", session, stop_hook_active=False, last_assistant_message=reply)
    wait_for(lambda: json.loads(kl("stats", "--namespace", ws.namespace, "--json",
                                   check=True).stdout)["namespaces"][0]["records"] == 2,
             message="two records")

    def read(session: str, path) -> str:
        printed = claude(ws, "PostToolUse", session, tool_name="Read",
                         tool_input={"file_path": str(path)},
                         tool_response={"type": "text", "file": {"filePath": str(path),
                                                                 "content": "pass\n"}})
        if not printed:
            return ""
        output = json.loads(printed)["hookSpecificOutput"]
        assert output["hookEventName"] == "PostToolUse"
        return output["additionalContext"]

    first = read("s3", retry)
    assert "back off exponentially" in first and "CSV export" not in first
    searched = kl("search", "", "--opened", "src/retry.py", cwd=str(ws.project), env=ws.env(),
                  check=True).stdout
    assert searched.rstrip("\n") == first  # what `kirolearn search --opened` shows
    assert read("s3", retry) == ""  # once per file and session
    assert "CSV export" in read("s3", export)
    assert read("s3", ws.project / "src/unknown.py") == ""
    # what the session's prompt was given, the file does not give again
    printed = claude(ws, "UserPromptSubmit", "s4", prompt="zmq client back off exponentially")
    assert "back off exponentially" in printed
    assert read("s4", retry) == ""
