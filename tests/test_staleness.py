"""Memories checked against the code as it is: anchors made from a turn's edits, checked
against the working tree before a record is recalled (left out, or marked), a renamed
file followed; through the real daemon, with a real git repository."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from helpers.cli import kl
from helpers.events import retrieval
from helpers.waits import wait_for
from helpers.workspace import Workspace
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import project
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
    assert checkout.check(staleness.Tree(root, {}), [record()], time.monotonic()) == {}
    # (no time left: unchecked)


def test_a_file_still_its_blob_stands_one_changed_a_lot_ranks_down(tmp_path):
    checkout = staleness.Checkout()
    root = str(tmp_path)
    module = tmp_path / "http.py"
    module.write_text(HEADER_MODULE)
    names = {"http.py": ["MAX_LINE", "parse_header", "Headers"]}
    blob = project.blob_id(HEADER_MODULE.encode())
    as_left = record(files_touched=["http.py"], anchors=names,
                     code={"blobs": {"http.py": blob}})
    assert blob == subprocess.run(["git", "hash-object", str(module)], capture_output=True,
                                  text=True, check=True).stdout.strip()
    assert checkout.find(root, as_left, {}) == staleness.Finding()
    module.write_text(HEADER_MODULE.replace("parse_header", "parse_field")
                      .replace("Headers", "Fields"))  # one of three names left
    assert checkout.find(root, as_left, {}) == staleness.Finding(changed=True)
    module.write_text("")
    assert checkout.find(root, as_left, {}) == staleness.Finding(
        "`MAX_LINE`, `parse_header`, `Headers` no longer in `http.py`", committed=True)
    assert checkout.find(root, as_left, {}, changed=["http.py"]).committed is False


def test_a_record_of_a_branch_not_merged_is_hidden_after_its_fork():
    tree = staleness.Tree("/repo", {}, branch="main", forked={"feature": 1_700_000_000.0})
    made = {"created_at": "2023-11-14T22:13:21+00:00"}  # 1 s after the fork

    def on(branch: str | None, **fields) -> dict:
        return {**made, **fields, "code": {"branch": branch} if branch else {}}
    assert tree.hides(on("feature")) == "made on branch `feature`, not merged into `main`"
    assert tree.hides(on("feature", created_at="2023-11-14T22:13:19+00:00")) is None
    assert tree.hides(on("main")) is None
    assert tree.hides(on("merged-long-ago")) is None
    assert tree.hides(on(None)) is None
    assert tree._replace(branch=None).hides(on("feature")) is None  # detached, shallow


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


class Repo:
    """A git repository in a user's home, and a Claude Code session's turns in it."""

    def __init__(self, tmp_path: Path, monkeypatch):
        monkeypatch.setenv("KIROLEARN_STORAGE_BATCH_IDLE_S", "3600")  # turns end batches
        self.ws = Workspace(tmp_path)
        self.path = self.ws.home / "shop"
        (self.path / "src").mkdir(parents=True)
        git(self.path, "init", "-q", "-b", "main")
        (self.path / "README.md").write_text("# shop\n")
        git(self.path, "add", ".")
        git(self.path, "commit", "-qm", "start")

    def turn(self, session: str, prompt: str, path: str, content: str, reply: str) -> str:
        """One turn that writes ``content`` to ``path``: the context its prompt got."""
        common = {"session_id": session, "transcript_path": "/x/s.jsonl",
                  "cwd": str(self.path)}
        target = self.path / path

        def claude(event: str, **fields) -> str:
            result, _ = self.ws.hook("kirolearn-claude-code", {
                **common, "hook_event_name": event, **fields}, cwd=self.path)
            assert result.returncode == 0 and result.stderr == "", result.stderr
            return result.stdout
        given = claude("UserPromptSubmit", prompt=prompt)
        target.write_text(content)
        claude("PostToolUse", tool_name="Write",
               tool_input={"file_path": str(target), "content": content},
               tool_response={"type": "create", "filePath": str(target)})
        claude("Stop", stop_hook_active=False, last_assistant_message=reply)
        return given

    def search(self, query: str) -> dict:
        return json.loads(kl("search", query, "--project", str(self.path), "--json",
                             "--mode", "lexical", check=True).stdout)

    def records(self) -> dict[str, dict]:
        """The stored records, by title."""
        lines = map(json.loads, kl("export", check=True).stdout.splitlines())
        return {line["title"]: line for line in lines if "record_id" in line}


def test_a_record_whose_code_is_gone_from_its_branch_is_marked_stale_and_back_when_it_is(
        home, tmp_path, monkeypatch):
    """Deleting a function and committing it marks the record about it stale in the
    store (why and when): export, `stats` and the viewer say so, no search recalls it;
    the function brought back, the mark goes."""
    repo = Repo(tmp_path, monkeypatch)
    kl("start", check=True)
    try:
        repo.turn("s-1", "Add a parser for the HTTP header lines", "src/http.py", PARSER,
                  "parse_header splits a header line at its colon.")
        made = wait_for(lambda: repo.records().get("Add a parser for the HTTP header lines"),
                        30, 0.2, "the turn's record")
        head = subprocess.run(["git", "-C", str(repo.path), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert made["code"] == {"branch": "main", "commit": head,
                                "blobs": {"src/http.py": project.blob_id(PARSER.encode())}}
        git(repo.path, "add", ".")
        git(repo.path, "commit", "-qm", "parser")
        assert repo.search("header parser")["record_ids"] == [made["record_id"]]

        (repo.path / "src" / "http.py").write_text(PARSER.replace("parse_header", "split_line"))
        git(repo.path, "commit", "-qam", "rename the function")

        def marked() -> dict | None:  # once git's reading of the tree has the commit
            repo.search("header parser")
            return repo.records()[made["title"]].get("stale")
        stale = wait_for(marked, 40, 0.5, "the record marked stale in the store")
        assert stale["why"] == "`parse_header` no longer in `src/http.py`"
        assert json.loads(kl("stats", "--json", check=True).stdout)["totals"]["stale"] == 1
        assert "stale 1, superseded 0" in kl("stats", check=True).stdout
        reply = repo.search("header parser")
        assert reply["record_ids"] == []
        assert reply["left_out"][0]["why"].startswith("`parse_header` no longer in")
        started = retrieval("session_context", {"namespace": made["namespace"]})
        assert made["record_id"] not in started["record_ids"]  # nor at a session's start

        (repo.path / "src" / "http.py").write_text(PARSER)
        git(repo.path, "commit", "-qam", "the parser back")
        wait_for(lambda: repo.search("header parser")["record_ids"] == [made["record_id"]]
                 and "stale" not in repo.records()[made["title"]], 40, 0.5,
                 "the record recalled and its mark gone")
    finally:
        kl("stop", check=True)


def test_a_record_made_on_a_branch_is_recalled_on_main_once_the_branch_is_merged(
        home, tmp_path, monkeypatch):
    repo = Repo(tmp_path, monkeypatch)
    kl("start", check=True)
    try:
        git(repo.path, "checkout", "-qb", "feature")
        repo.turn("s-1", "Add a parser for the HTTP header lines", "src/http.py", PARSER,
                  "parse_header splits a header line at its colon.")
        made = wait_for(lambda: repo.records().get("Add a parser for the HTTP header lines"),
                        30, 0.2, "the turn's record")
        assert made["code"]["branch"] == "feature"
        git(repo.path, "add", ".")
        git(repo.path, "commit", "-qm", "parser")
        git(repo.path, "checkout", "-q", "main")

        def hidden() -> dict | None:  # once git's reading of the tree is of main
            left = repo.search("header parser").get("left_out", [])
            return left[0] if left and "branch" in left[0]["why"] else None
        assert wait_for(hidden, 40, 0.5, "the record left out on main")["why"] == (
            "made on branch `feature`, not merged into `main`")
        assert "stale" not in repo.records()[made["title"]]  # not stale: elsewhere

        git(repo.path, "merge", "-q", "feature")
        wait_for(lambda: repo.search("header parser")["record_ids"] == [made["record_id"]],
                 40, 0.5, "the record recalled once merged")
        asked = "how do we parse an HTTP header line?"
        assert "parse_header splits" in repo.turn("s-2", asked, "notes.txt", "-", "Done.")
    finally:
        kl("stop", check=True)


RETRY = '''def retry_request(send, attempts=3):
    for attempt in range(attempts):
        try:
            return send()
        except OSError:
            time.sleep({delay})
'''


def test_a_revert_supersedes_the_work_it_undoes_and_ranks_above_it(home, tmp_path,
                                                                  monkeypatch):
    repo = Repo(tmp_path, monkeypatch)
    kl("start", check=True)
    try:
        repo.turn("s-1", "Use exponential backoff in retry_request", "src/client.py",
                  RETRY.format(delay="2 ** attempt"), "retry_request now backs off.")
        first = wait_for(lambda: repo.records().get(
            "Use exponential backoff in retry_request"), 30, 0.2, "the first record")
        repo.turn("s-2", "Revert the exponential backoff in retry_request", "src/client.py",
                  RETRY.format(delay="1"), "retry_request waits a second again.")
        later = wait_for(lambda: repo.records().get(
            "Revert the exponential backoff in retry_request"), 30, 0.2, "the revert's record")
        assert repo.records()[first["title"]]["superseded_by"] == later["record_id"]
        assert "superseded_by" not in later
        reply = repo.search("exponential backoff retry_request")
        assert reply["record_ids"] == [later["record_id"], first["record_id"]]
        assert reply["records"][1]["superseded_by"] == later["record_id"]
        assert "stale 0, superseded 1" in kl("stats", check=True).stdout
    finally:
        kl("stop", check=True)


@given(st.text(alphabet="ab_$ (.\n", max_size=40), st.sampled_from(["ab", "a_b", "$a"]))
def test_a_name_is_held_as_a_word_of_code_exactly_as_a_pattern_says(text, name):
    word = re.compile(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])")
    assert staleness.holds(text, name) == bool(word.search(text))
