"""Memories checked against the code as it is: anchors made from a turn's edits, checked
against the working tree before a record is recalled (left out, or marked), a renamed
file followed; through the real daemon, with a real git repository."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from helpers import Workspace, kl, wait_for
from hypothesis import given
from hypothesis import strategies as st

from kirolearn.extract import anchors
from kirolearn.search import staleness
from kirolearn.tooluse import observe

HEADER_MODULE = '''MAX_LINE = 8190


def parse_header(line):
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()


class Headers:
    def get(self, name):
        return None
'''
PARSER = '''def parse_header(line):
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()
'''


def test_an_edit_anchors_what_it_defines_in_python_by_its_syntax_elsewhere_by_pattern():
    assert anchors.definitions("src/http.py", [HEADER_MODULE]) == [
        "MAX_LINE", "parse_header", "Headers"]  # `get` is too short to tell
    fragment = "    def parse_cookie(self, line):\n        return line.split(';')\n"
    assert anchors.definitions("src/http.py", [fragment]) == ["parse_cookie"]
    assert anchors.definitions("web/app.ts", [
        "export function renderCart(items) {}\nconst API_ROOT = '/v1'\nclass CartView {}"]) \
        == ["renderCart", "API_ROOT", "CartView"]
    assert anchors.definitions("svc/main.go", ["func (s *Server) ServeLogin() {}"]) == [
        "ServeLogin"]
    edit = observe({"tool_name": "Edit", "tool_input": {
        "file_path": "/repo/src/http.py", "old_string": "", "new_string": HEADER_MODULE}})
    read = observe({"tool_name": "Read", "tool_input": {"file_path": "/repo/README.md"}})
    assert anchors.of_actions([edit, read], "/repo") == {
        "src/http.py": ["MAX_LINE", "parse_header", "Headers"]}
    elsewhere = observe({"tool_name": "Write", "tool_input": {
        "file_path": "/etc/hosts", "content": "def x(): pass"}})
    assert anchors.of_actions([elsewhere], "/repo") == {}


@given(st.text(max_size=300), st.sampled_from(["a.py", "b.ts", "c.go", "d"]))
def test_definitions_never_fail_and_are_names_of_the_text(text, path):
    found = anchors.definitions(path, [text])
    assert len(found) == len(set(found)) <= anchors.MAX_SYMBOLS
    assert all(name in text for name in found)


def record(**fields) -> dict:
    return {"record_id": "mr_1", "files_touched": ["src/http.py"],
            "anchors": {"src/http.py": ["parse_header"]}, **fields}


def test_a_record_is_stale_only_when_all_its_code_is_gone(tmp_path):
    checkout = staleness.Checkout()
    root = str(tmp_path)
    (tmp_path / "src").mkdir()
    module = tmp_path / "src" / "http.py"
    module.write_text(HEADER_MODULE)
    assert checkout.gone(root, record(), {}) is None
    module.write_text(HEADER_MODULE.replace("parse_header", "parse_field"))
    assert checkout.gone(root, record(), {}) == "`parse_header` no longer in `src/http.py`"
    assert checkout.gone(root, record(files_touched=["src/http.py", "README.md"]), {}) \
        == "`parse_header` no longer in `src/http.py`; `README.md` no longer exists"
    (tmp_path / "README.md").write_text("# shop\n")  # one anchor stands: not stale
    assert checkout.gone(root, record(files_touched=["src/http.py", "README.md"]), {}) is None
    module.unlink()
    assert checkout.gone(root, record(), {}) == "`src/http.py` no longer exists"
    (tmp_path / "src" / "headers.py").write_text(HEADER_MODULE)
    assert checkout.gone(root, record(), {"src/http.py": "src/headers.py"}) is None
    assert checkout.gone(root, record(files_touched=["../other/x.py"], anchors={}), {}) is None
    assert checkout.gone(root, record(files_touched=["/abs/x.py"], anchors={}), {}) is None
    assert checkout.check(root, [record()], {}, time.monotonic()) == {}  # no time: unchecked


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=dev", "-c",
                    "user.email=dev@example.com", *args], check=True, capture_output=True)


def search_json(repo: Path, query: str) -> dict:
    return json.loads(kl("search", query, "--project", str(repo), "--json", "--mode",
                         "lexical", check=True).stdout)


def test_a_record_whose_function_is_gone_is_left_out_and_a_rename_keeps_it(home, tmp_path,
                                                                          monkeypatch):
    """A turn adds `parse_header()`; the next prompt is given it. Once the function is
    deleted (not yet committed) the prompt's context leaves it out and `search --json`
    says why; renaming the file instead keeps it; with `retrieval.stale_records = mark`
    it is shown, marked."""
    # the turn's end forms its batch; a quiet moment between its hooks on a busy machine
    # must not (an idle cut takes an unfinished turn as it is)
    monkeypatch.setenv("KIROLEARN_STORAGE_BATCH_IDLE_S", "3600")
    ws = Workspace(tmp_path)
    repo = ws.home / "shop"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q")
    module = repo / "src" / "http.py"
    module.write_text("")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    common = {"session_id": "s-anchor", "transcript_path": "/x/s.jsonl", "cwd": str(repo)}

    def claude(event: str, **fields) -> str:
        result, _ = ws.hook("kirolearn-claude-code", {**common, "hook_event_name": event,
                                                      **fields}, cwd=repo)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout

    kl("start", check=True)
    try:
        claude("UserPromptSubmit", prompt="Add a parser for the HTTP header lines")
        module.write_text(PARSER)
        claude("PostToolUse", tool_name="Write",
               tool_input={"file_path": str(module), "content": PARSER},
               tool_response={"type": "create", "filePath": str(module)})
        claude("Stop", stop_hook_active=False,
               last_assistant_message="parse_header splits a header line at its colon.")
        found = wait_for(lambda: search_json(repo, "header parser")["record_ids"] or None,
                         30, 0.2, "the turn's record")
        [made] = [line for line in map(json.loads, kl("export", check=True).stdout.splitlines())
                  if "record_id" in line]
        assert made["anchors"] == {"src/http.py": ["parse_header"]}
        asked = "how do we parse an HTTP header line?"
        assert "parse_header splits" in claude("UserPromptSubmit", prompt=asked)

        module.write_text(PARSER.replace("parse_header", "split_header"))
        assert "parse_header splits" not in claude("UserPromptSubmit", prompt=asked)
        reply = search_json(repo, "header parser")
        assert reply["record_ids"] == []
        assert reply["left_out"] == [{"record_id": found[0],
                                      "title": "Add a parser for the HTTP header lines",
                                      "why": "`parse_header` no longer in `src/http.py`"}]

        module.write_text(PARSER)  # back and committed, then renamed and committed
        git(repo, "commit", "-qam", "parser")
        git(repo, "mv", "src/http.py", "src/headers.py")
        git(repo, "commit", "-qam", "rename")

        def kept() -> bool:  # once the rename is read (git runs in the background)
            return search_json(repo, "header parser")["record_ids"] == found
        wait_for(kept, 30, 0.5, "the renamed file followed")
    finally:
        kl("stop", check=True)
    (Path(home) / "config.toml").write_text('[retrieval]\nstale_records = "mark"\n')
    (repo / "src" / "headers.py").unlink()
    kl("start", check=True)
    try:
        def marked() -> bool:  # once git has read the tree (the first search does not wait)
            return "*May be stale: `src/http.py` no longer exists.*" in kl(
                "search", "header parser", "--project", str(repo), "--mode", "lexical",
                check=True).stdout
        wait_for(marked, 30, 0.2, "the record shown marked")
    finally:
        kl("stop", check=True)
