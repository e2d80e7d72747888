"""Why is this line like this: the records of the commits that wrote a file's lines,
through the real daemon and a real git repository, for a seeded history and for a live
session whose change was committed later; from ``kirolearn why``, and before an agent's
Read of a range or Edit (Claude Code's PreToolUse)."""

from __future__ import annotations

import json

from helpers.cli import kl
from helpers.waits import wait_for
from helpers.workspace import Workspace, call, serve
from hypothesis import given
from hypothesis import strategies as st
from test_seed import commit, git, records

from kirolearn import tooluse
from kirolearn.code import blame
from kirolearn.search import why as why_search

PARSER = '''def parse_header(line):
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()
'''
CAP = "\nMAX_LINE = 8190\n"
QUOTED = PARSER.replace("value.strip()", "value.strip().strip('\"')")


def claude_hook(ws: Workspace, repo, event: str, session: str = "s-why", **fields) -> str:
    result, _ = ws.hook("kirolearn-claude-code", {
        "session_id": session, "transcript_path": "/x/s.jsonl", "cwd": str(repo),
        "hook_event_name": event, **fields},
                        cwd=repo, KIROLEARN_RETRIEVAL_BUDGET_MS="20000")
    assert result.returncode == 0, result.stderr
    return result.stdout


def live_session(ws: Workspace, repo) -> None:
    """An agent's turn that changes line 3 of src/http.py, its change not committed."""
    claude_hook(ws, repo, "UserPromptSubmit",
                prompt="Strip the quotes around a header value when parsing headers")
    (repo / "src" / "http.py").write_text(QUOTED + CAP)
    claude_hook(ws, repo, "PostToolUse", tool_name="Edit", tool_input={
        "file_path": str(repo / "src" / "http.py"),
        "old_string": "    return name.strip().lower(), value.strip()\n",
        "new_string": "    return name.strip().lower(), value.strip().strip('\"')\n"},
        tool_response={"success": True})
    claude_hook(ws, repo, "Stop", last_assistant_message="Header values lose their quotes.")


def before(ws: Workspace, repo, tool: str, **tool_input) -> str:
    """What Claude Code is told before the tool runs, in a session that was not given
    anything at its prompt."""
    return claude_hook(ws, repo, "PreToolUse", "s-later", tool_name=tool, tool_input={
        "file_path": str(repo / "src" / "http.py"), **tool_input})


def why(repo, where: str, *more: str):
    return kl("why", where, *more, cwd=str(repo))


def test_why_brings_back_the_work_of_the_commits_that_wrote_the_lines(store, tmp_path):
    ws = Workspace(tmp_path)
    repo = ws.home / "shop"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines",
           when="2024-03-02T10:00:00+00:00")
    commit(repo, {"src/http.py": PARSER + CAP}, "Cap a header line at 8190 bytes",
           when="2024-03-03T10:00:00+00:00")
    kl("start", check=True)
    try:
        kl("seed", "--git", "--project", str(repo), check=True)
        wait_for(lambda: len(records()) == 2, 30, 0.2, "a record of each commit")
        assert "Add a parser for the HTTP header lines" in why(repo, "src/http.py:3").stdout
        live_session(ws, repo)
        wait_for(lambda: any(r["title"].startswith("Strip the quotes") and
                             r.get("code", {}).get("blobs") for r in records()),
                 30, 0.2, "the live session's record, with the blob it left the file as")
        git(repo, "commit", "-qam", "Quote-free header values",
            when="2024-03-04T10:00:00+00:00")

        changed = why(repo, "src/http.py:3")  # written by the live session's change
        assert changed.returncode == 0, changed.stderr
        assert "Strip the quotes around a header value" in changed.stdout
        assert "Add a parser" not in changed.stdout and "Cap a header" not in changed.stdout
        assert "Lines 3–3 of src/http.py" in changed.stdout
        assert changed.stdout.startswith("<kirolearn-recall>")  # data, not instructions

        first = why(repo, "src/http.py:1-2").stdout
        assert "Add a parser for the HTTP header lines" in first and "Strip" not in first
        whole = json.loads(why(repo, "src/http.py", "--json").stdout)
        assert whole["outcome"] == "ok" and whole["path"] == "src/http.py"
        assert {c["path"] for c in whole["commits"]} == {"src/http.py"}
        lines = sorted(n for c in whole["commits"] for n in c["lines"])
        assert lines == [1, 2, 3, 4, 5]
        titles = {r["record_id"]: r["title"] for r in records()}
        assert [titles[c["record_ids"][0]][:12] for c in whole["commits"]] == [
            "Cap a header", "Add a parser", "Strip the qu"]  # the most lines, the newest first

        # before the agent's Read of the cap's line, and its Edit of the first line, in a
        # session that was not given them at its prompt
        said = json.loads(before(ws, repo, "Read", offset=5, limit=1))["hookSpecificOutput"]
        assert said["hookEventName"] == "PreToolUse"
        assert "Cap a header line at 8190 bytes" in said["additionalContext"]
        edit = {"old_string": "def parse_header(line):", "new_string": "def parse(line):"}
        said = json.loads(before(ws, repo, "Edit", **edit))["hookSpecificOutput"]
        assert "Add a parser for the HTTP header lines" in said["additionalContext"]
        assert before(ws, repo, "Edit", **edit) == ""  # given once in a session
        # a whole file's read tells of no lines in particular; text not in the file: none
        assert before(ws, repo, "Read") == ""
        assert before(ws, repo, "Edit", old_string="not there", new_string="x") == ""

        async def ask(client) -> list[tuple[bool, str]]:  # the MCP tool, as an agent calls it
            return [await call(client, "why", path="src/http.py", first=5),
                    await call(client, "why", path=str(repo / "src" / "http.py"), first=3),
                    await call(client, "why", path="src/http.py", first=3, last=1),
                    await call(client, "why", path="/etc/passwd")]
        cap, changed, backwards, outside = serve(ws, ask, cwd=repo)
        assert cap[0] is False and "Cap a header line at 8190 bytes" in cap[1]
        assert "Strip the quotes around a header value" in changed[1]
        assert backwards[0] and "is before first" in backwards[1]
        assert outside[0] and "is not in this project" in outside[1]

        assert "is not a range of lines" in why(repo, "src/http.py:5-2").stderr
        assert "is not a file" in why(repo, "src/none.py:1").stderr
        outside = tmp_path / "loose.py"
        outside.write_text("x = 1\n")
        assert "is not in a git working tree" in kl("why", str(outside)).stderr
    finally:
        kl("stop", check=True)


def test_blame_is_read_from_git_porcelain(tmp_path):
    """The commits of a range, the most lines first; uncommitted lines belong to none;
    a line past the end, or a file git does not track, to none."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"a.py": "one\ntwo\nthree\n"}, "First", when="2024-03-02T10:00:00+00:00")
    commit(repo, {"a.py": "one\n2\n3\nfour\n"}, "Second", when="2024-03-03T10:00:00+00:00")
    (repo / "a.py").write_text("one\n2\n3\nfour\nfive\n")
    (repo / "loose.py").write_text("x\n")
    from kirolearn.code.git import Git

    found = blame.blame(Git(str(repo)), "a.py", 10)
    assert [len(b.lines) for b in found] == [3, 1]
    assert found[0].lines == (2, 3, 4) and found[1].lines == (1,)
    assert blame.within(found, 1, 2)[0].lines in ((1,), (2,))
    assert blame.within(found, 5, 9) == []  # not committed yet
    assert blame.blame(Git(str(repo)), "loose.py", 10) == []
    assert blame.blame(Git(str(repo)), "../a.py", 10) == []
    blobs = blame.blobs(Git(str(repo)), found, 10)
    assert blobs[found[0].commit] == git(repo, "rev-parse", "HEAD:a.py").strip()


@given(st.text(max_size=200), st.integers(0, 50), st.integers(0, 20))
def test_an_edits_text_is_found_on_its_lines(text, start, length):
    """Where an edit's old text stands: the lines it spans, counted from 1."""
    old = text[start:start + length]
    found = blame.lines_of(text, old)
    if not old.strip():
        assert found is None
        return
    first, last = found
    at = text.find(old)
    assert first == text[:at].count("\n") + 1
    assert last - first == old.rstrip("\n").count("\n")


@given(st.dictionaries(st.sampled_from(["file_path", "offset", "limit", "old_string",
                                        "edits", "content"]),
                       st.one_of(st.integers(-5, 10_000), st.text(max_size=30), st.none(),
                                 st.booleans(), st.lists(st.dictionaries(
                                     st.just("old_string"), st.text(max_size=10))))),
       st.sampled_from(["Read", "Edit", "MultiEdit", "Write", "Bash"]))
def test_the_lines_a_tool_is_about_are_read_from_any_input(tool_input, tool):
    """Whatever the payload holds, a range from 1 up, or an edit's old text, or none."""
    asked = tooluse.lines_asked({"tool_name": tool, "tool_input": tool_input})
    if asked is not None:
        assert asked.path and (asked.text.strip() or 1 <= asked.first <= asked.last)


def test_a_record_given_already_is_named_in_a_line():
    """The commits' records in full, but one the session was given already: its title,
    its commit and lines, no summary; within the token cap, the first kept whatever."""
    def record(record_id: str, title: str) -> dict:
        return {"record_id": record_id, "title": title, "summary": f"{title}: the long story",
                "facts": [], "created_at": "2024-03-02T10:00:00+00:00"}
    found = [why_search.Written(blame.Blamed("a" * 40, "src/http.py", (1, 2, 3), 2),
                         [record("mr_1", "Add a parser")]),
             why_search.Written(blame.Blamed("b" * 40, "src/http.py", (5,), 1),
                         [record("mr_2", "Cap a header line")])]
    asked = tooluse.Lines("src/http.py", 1, 5)
    full, shown = why_search.block(asked, found, None)
    assert [w.commit.commit[0] for w in shown] == ["a", "b"]
    assert "Add a parser: the long story" in full and "Cap a header line: the long" in full
    assert "*Commit aaaaaaaaaa, lines 1–3 of src/http.py.*" in full
    assert "*Commit bbbbbbbbbb, line 5 of src/http.py.*" in full
    brief, _ = why_search.block(asked, found, None, {"mr_1"})
    assert "Add a parser: the long story" not in brief
    assert "(Given earlier in this session.)" in brief and "Cap a header line: the" in brief
    capped, shown = why_search.block(asked, found, 1)
    assert "Add a parser" in capped and "Cap a header" not in capped
    assert [r["record_id"] for w in shown for r in w.records] == ["mr_1"]
    assert why_search.block(asked, [], None) == ("", [])
