"""A repository is untrusted input: nothing in its tree or its ``.git`` can make
kirolearn run its programs, follow a link out of it, or hang a role (real git
repositories, FIFOs and links made here)."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from helpers.waits import wait_for
from test_seed import commit, git

from kirolearn import project, rules, seed
from kirolearn.code import files
from kirolearn.code.git import Git
from kirolearn.search import staleness, worktree

# Each setting whose value is a program git may run, planted to leave a mark.
PROGRAMS = (
    "filter.evil.clean", "filter.evil.smudge", "filter.evil.process", "diff.evil.textconv",
    "diff.evil.command", "diff.external", "core.fsmonitor", "core.pager", "pager.log",
    "pager.show", "pager.status", "gpg.program", "gpg.openpgp.program", "gpg.x509.program",
    "gpg.ssh.program", "core.sshCommand", "core.askPass", "credential.helper", "core.editor",
    "sequence.editor", "core.alternateRefsCommand", "merge.evil.driver",
    "uploadpack.packObjectsHook")
HOOKS = ("post-index-change", "reference-transaction", "post-checkout", "pre-auto-gc")
SIGNATURE = ("-----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n"
             " -----END PGP SIGNATURE-----")


def mark(marks: Path, name: str) -> Path:
    """A program that leaves the mark ``name`` in ``marks`` and passes its input on."""
    program = marks.parent / "bin" / name
    program.parent.mkdir(exist_ok=True)
    program.write_text(f'#!/bin/sh\ntouch "{marks}/{name}"\ncat\n')
    program.chmod(0o755)
    return program


def planted(repo: Path, marks: Path, settings: tuple[str, ...]) -> None:
    """Those program settings and every hook of the repository set to leave a mark in
    ``marks`` (named after it); a signed commit on top, so that a signature check would
    run its program."""
    (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    for setting in settings:
        git(repo, "config", setting, str(mark(marks, setting)))
    git(repo, "config", "log.showSignature", "true")
    git(repo, "config", "filter.evil.required", "true")
    if git(repo, "log", "-1", "--no-show-signature", "--format=%s").strip() != "A signed change":
        tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
        parent = git(repo, "rev-parse", "HEAD").strip()
        who = "Ada Lovelace <ada@example.com> 1709287200 +0000"
        body = (f"tree {tree}\nparent {parent}\nauthor {who}\ncommitter {who}\n"
                f"gpgsig {SIGNATURE}\n\nA signed change\n")
        signed = subprocess.run(["git", "-C", str(repo), "hash-object", "-t", "commit", "-w",
                                 "--stdin"], input=body, text=True, capture_output=True,
                                check=True).stdout.strip()
        git(repo, "update-ref", "refs/heads/main", signed)
    hooks = repo / ".git" / "evil-hooks"
    for folder in (repo / ".git" / "hooks", hooks):
        folder.mkdir(exist_ok=True)
        for hook in HOOKS:
            mark(marks, hook).rename(folder / hook)
    for path in repo.rglob("*.py"):  # its index entry out of date: status reads the file
        os.utime(path, (1, 1))


def test_git_runs_none_of_the_repositorys_programs(tmp_path):
    """The repository plants 23 program settings and 4 hooks (in .git/hooks and in a
    core.hooksPath of its own). Plain git runs several of them on the very reads
    kirolearn makes; kirolearn's readers (the worktree reading, the seed's history and
    diffs) run none."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"src/http.py": "def parse_header(line):\n    return line\n"}, "parser")
    git(repo, "checkout", "-qb", "side")
    commit(repo, {"src/cart.py": "def cart_total(items):\n    return sum(items)\n"}, "cart")
    git(repo, "checkout", "-q", "main")
    marks = tmp_path / "marks"
    marks.mkdir()
    # the plants are live: plain git runs them (first without the process filter and
    # the diff command, which take over from the clean filter and textconv)
    taking_over = ("filter.evil.process", "diff.evil.command")
    planted(repo, marks, tuple(p for p in PROGRAMS if p not in taking_over))
    for command in (["status"], ["log", "-p", "-2"]):
        subprocess.run(["git", "-C", str(repo), *command], capture_output=True, check=False)
    ran = {p.name for p in marks.iterdir()}
    assert {"filter.evil.clean", "filter.evil.smudge", "diff.evil.textconv",
            "core.fsmonitor", "gpg.openpgp.program", "post-index-change"} <= ran, ran
    for done in marks.iterdir():
        done.unlink()
    planted(repo, marks, PROGRAMS)
    git(repo, "config", "core.hooksPath", str(repo / ".git" / "evil-hooks"))

    _, renamed = worktree.read(str(repo), renames=True)
    assert renamed is not None  # git read it
    assert worktree.branches(str(repo))[0] == "main"
    assert "side" in worktree.branches(str(repo))[1]
    assert seed.head(str(repo))
    commits = seed.history(str(repo))
    assert [c.message for c in commits] == ["parser", "A signed change"]
    assert seed.hunks(str(repo), commits[0].sha)
    assert seed.since_time(str(repo), "2024-01-01")
    assert Git(str(repo)).output("log", "-p", "--no-textconv", "--no-ext-diff") is not None
    assert sorted(p.name for p in marks.iterdir()) == []


def test_git_runs_in_a_clean_environment(tmp_path, monkeypatch):
    """What the agent's environment says of git (another repository, an external diff,
    a configuration of its own) does not reach kirolearn's git."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"a.py": "A = 1\n"}, "one")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "/bin/false")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "/bin/false")
    assert [c.message for c in seed.history(str(repo))] == ["one"]
    assert seed.hunks(str(repo), seed.head(str(repo))) == [("a.py", "", "A = 1", True)]


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    return path


def returns(call, timeout: float = 30):
    """call()'s answer, made on a thread: the test fails (rather than hang) when it
    never comes."""
    answer: list = []
    worker = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    worker.start()
    wait_for(lambda: answer, timeout, 0.01, "the call to return")
    return answer[0]


def test_a_file_is_read_only_when_regular_and_inside_its_tree(tmp_path):
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "ok.py").write_text("x = 1\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("TOKEN=abc\n")
    fifo(root / "src" / "pipe.py")
    (root / "src" / "out.py").symlink_to(outside)
    (root / "src" / "zero.py").symlink_to("/dev/zero")
    (root / "src" / "fd.py").symlink_to("/proc/self/fd/1")
    (root / "src" / "in.py").symlink_to(root / "src" / "ok.py")
    (root / "loop.py").symlink_to(root / "loop.py")
    (root / "up").symlink_to(tmp_path)
    assert files.read_in(str(root), "src/ok.py", 100) == b"x = 1\n"
    assert files.read_in(str(root), "src/in.py", 100) == b"x = 1\n"  # a link inside
    assert files.read_in(str(root), "src/ok.py", 3) == b"x ="
    for name in ("src/pipe.py", "src/out.py", "src/zero.py", "src/fd.py", "loop.py",
                 "up/secret.txt", "../secret.txt", "src", "missing.py", "/etc/passwd"):
        assert returns(lambda n=name: files.read_in(str(root), n, 100)) is None, name
    assert files.read_regular(str(root / "src" / "pipe.py"), 10) is None
    assert files.read_regular(str(root / "src" / "in.py"), 10) is None  # a link last
    assert files.read_regular("/dev/zero", 10) is None


def test_a_bounded_call_is_abandoned_at_its_budget():
    release = threading.Event()
    with pytest.raises(files.Abandoned):
        files.bounded(0.05, release.wait)
    release.set()
    assert files.bounded(30, lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        files.bounded(30, lambda: 1 / 0)


def test_the_check_of_a_record_never_waits_on_a_fifo_or_follows_a_link_out(tmp_path):
    """An anchored file replaced by a FIFO, or by a link to a FIFO or to a file out of
    the tree that holds the record's names: the check answers, and judges nothing."""
    root = tmp_path / "repo"
    record = {"record_id": "mr_1", "files_touched": ["src/parser.py"],
              "anchors": {"src/parser.py": ["parse_header"]}}
    checkout = staleness.Checkout()
    tree = staleness.Tree(str(root), {})
    fifo(root / "src" / "parser.py")
    assert returns(lambda: checkout.check(tree, [record], float("inf"))) == {
        "mr_1": staleness.Finding()}
    (root / "src" / "parser.py").unlink()
    (root / "src" / "parser.py").symlink_to(fifo(tmp_path / "elsewhere"))
    assert returns(lambda: checkout.find(str(root), record, {})) == staleness.Finding()
    outside = tmp_path / "out.py"
    outside.write_text("def other():\n    pass\n")
    (root / "src" / "parser.py").unlink()
    (root / "src" / "parser.py").symlink_to(outside)
    assert checkout.find(str(root), record, {}) == staleness.Finding()  # not read: stands
    (root / "src" / "parser.py").unlink()
    (root / "src" / "parser.py").write_text("def other():\n    pass\n")
    assert checkout.find(str(root), record, {}).stale  # a regular file is judged


def test_a_stuck_check_is_abandoned_and_its_tree_not_checked_again_until_it_returns(
        tmp_path, monkeypatch):
    """A filesystem that hangs in a read (as a stale network mount does) holds neither
    the search nor the ones after it."""
    release = threading.Event()
    monkeypatch.setattr(staleness.Checkout, "find",
                        lambda self, *args: release.wait() and staleness.Finding())
    checkout = staleness.Checkout()
    tree = staleness.Tree(str(tmp_path), {})
    record = {"record_id": "mr_1", "files_touched": ["a.py"], "anchors": {"a.py": ["x"]}}
    assert returns(lambda: checkout.check(tree, [record], float("inf"))) == {}
    assert returns(lambda: checkout.check(tree, [record], float("inf"))) == {}
    release.set()
    wait_for(lambda: checkout.check(tree, [record], float("inf")), 30, 0.05,
             "the tree checked again")


def test_blob_ids_are_read_only_from_regular_files_inside_the_project(tmp_path):
    from kirolearn.extract import anchors

    root = tmp_path / "repo"
    fifo(root / "src" / "pipe.py")
    (root / "src" / "ok.py").write_text("OK = 1\n")
    (root / "src" / "out.py").symlink_to("/etc/hostname")
    record = {"source_event_ids": ["e1"],
              "anchors": {"src/pipe.py": [], "src/ok.py": [], "src/out.py": []}}
    events = [{"event_id": "e1", "commit": "a" * 40, "project_path": str(root)}]
    found = returns(lambda: anchors.code(record, events))
    assert found == {"commit": "a" * 40,
                     "blobs": {"src/ok.py": project.blob_id(b"OK = 1\n")}}


@pytest.mark.parametrize("head", [
    "ref: refs/heads/../../../../{fifo}", "ref: refs/heads/../../{zero}",
    "ref: refs/heads/main/../../../../{fifo}", "ref: ../../{fifo}", "ref: refs/heads/a b",
    "ref: refs/heads/.hidden", "ref: refs/heads/x.lock"])
def test_a_head_is_followed_only_to_a_ref_git_would_take(tmp_path, head):
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    link = repo / ".git" / "zero"
    link.symlink_to("/dev/zero")
    (repo / ".git" / "HEAD").write_text(
        head.format(fifo=fifo(tmp_path / "fifo"), zero=link) + "\n")
    assert returns(lambda: project.git_head(repo)) == (None, None)


def test_head_files_that_are_no_regular_files_are_not_read(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    fifo(repo / ".git" / "HEAD")
    assert returns(lambda: project.git_head(repo)) == (None, None)
    (repo / ".git" / "HEAD").unlink()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    fifo(repo / ".git" / "refs" / "heads" / "main")
    assert returns(lambda: project.git_head(repo)) == ("main", None)
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    (repo / ".git" / "refs" / "heads" / "main").write_text("a" * 40 + "\n")
    assert project.git_head(repo) == ("main", "a" * 40)
    worktree_file = tmp_path / "wt"
    worktree_file.mkdir()
    fifo(worktree_file / ".git")  # a worktree's .git file that is a FIFO
    assert returns(lambda: project.git_head(worktree_file)) == (None, None)


def test_valid_refs_follow_gits_rules():
    for ref in ("refs/heads/main", "refs/heads/feature/x-1", "refs/tags/v1.0"):
        assert project.valid_ref(ref), ref
    for ref in ("refs/heads/../x", "HEAD", "refs/heads/", "refs/heads//x", "refs/heads/x.",
                "refs/heads/.x", "refs/heads/x.lock", "refs/heads/a@{1}", "refs/heads/a\\b",
                "refs/heads/a\x00b", "refs/heads/a~1", "refs/heads/a:b", "/etc/passwd"):
        assert not project.valid_ref(ref), ref


def test_rule_files_are_read_only_inside_the_checkout(tmp_path):
    """A rule file that links out of the tree (the hook's environment, any file of the
    user's) is no rule file; one that links inside is; a FIFO is skipped."""
    checkout = tmp_path / "repo"
    (checkout / ".cursor" / "rules").mkdir(parents=True)
    secret = tmp_path / "secret.md"
    secret.write_text("the user's notes\n")
    (checkout / "AGENTS.md").write_text("# Agents\nUse tabs.\n")
    (checkout / "CLAUDE.md").symlink_to(checkout / "AGENTS.md")  # inside: kept
    (checkout / "GEMINI.md").symlink_to("/proc/self/environ")
    (checkout / "QWEN.md").symlink_to(secret)
    fifo(checkout / ".cursorrules")
    (checkout / ".cursor" / "rules" / "out.md").symlink_to(secret)
    (checkout / ".cursor" / "rules" / "ok.md").write_text("ok\n")
    (checkout / ".windsurf").mkdir()
    (checkout / ".windsurf" / "rules").symlink_to(tmp_path)  # a folder out of the tree
    (tmp_path / "x.md").write_text("outside\n")
    found = returns(lambda: rules.found(str(checkout), str(tmp_path / "home")))
    assert sorted(found) == [".cursor/rules/ok.md", "AGENTS.md", "CLAUDE.md"]
    assert rules.read(found["CLAUDE.md"]) == "# Agents\nUse tabs.\n"
    assert stat.S_ISREG(os.lstat(found["CLAUDE.md"]).st_mode)


def test_a_fifo_in_the_tree_or_behind_head_hangs_no_hook_and_no_search(home, tmp_path,
                                                                        monkeypatch):
    """Through the real daemon: a turn's file replaced by a FIFO, then by a link to the
    hook's own output; HEAD pointed at a FIFO outside ``.git``. Every prompt is still
    answered with its context, in this project and in another, and the daemon stays
    whole (no role restarted)."""
    from helpers.cli import kl, status
    from test_staleness import PARSER, Repo

    repo = Repo(tmp_path, monkeypatch)
    other = Repo(tmp_path / "other", monkeypatch)
    kl("start", check=True)
    try:
        repo.turn("s-1", "Add a parser for the HTTP header lines", "src/http.py", PARSER,
                  "parse_header splits a header line at its colon.")
        other.turn("s-2", "Add a cart total", "src/cart.py", "def cart_total(x):\n"
                   "    return sum(x)\n", "cart_total adds the prices of the items.")
        wait_for(lambda: repo.records().get("Add a parser for the HTTP header lines")
                 and other.records().get("Add a cart total"), 30, 0.2, "the records")
        asked = {"session_id": "s-3", "transcript_path": "/x/s.jsonl",
                 "hook_event_name": "UserPromptSubmit"}

        def prompt(where: Repo, text: str) -> str:
            result, _ = where.ws.hook("kirolearn-claude-code", {
                **asked, "cwd": str(where.path), "prompt": text}, cwd=where.path)
            assert result.returncode == 0, result.stderr
            return result.stdout

        fifo(repo.path / "src" / "http.py")
        for _ in range(2):
            assert "parse_header splits" in prompt(repo, "how do we parse a header line?")
            assert "cart_total adds" in prompt(other, "how is the cart total made?")
        (repo.path / "src" / "http.py").unlink()
        (repo.path / "src" / "http.py").symlink_to("/proc/self/fd/1")
        assert "parse_header splits" in prompt(repo, "how do we parse a header line?")
        head = repo.path / ".git" / "HEAD"
        head.write_text(f"ref: refs/heads/../../../{fifo(tmp_path / 'head-fifo')}\n")
        assert "parse_header splits" in prompt(repo, "how do we parse a header line?")
        assert "cart_total adds" in prompt(other, "how is the cart total made?")
        roles = status()["roles"]
        assert all(role["restarts"] == 0 and role["state"] in ("RUNNING", "WAITING")
                   for role in roles), roles
    finally:
        kl("stop", check=True)


def test_stored_transcripts_are_regular_files_found_without_following_a_link(tmp_path):
    """A FIFO named like a transcript, a link loop and a link out of the folder: the
    listing passes over them (it used to hang, or abort the whole import), and the
    transcripts beside them are found and read a line at a time."""
    from kirolearn.transcripts import claude_code, codex
    from kirolearn.transcripts.replay import Transcript, json_lines

    projects = tmp_path / ".claude" / "projects" / "-work-app"
    projects.mkdir(parents=True)
    (projects / "good.jsonl").write_text('{"a": 1}\nnot json\n[1]\n{"b": 2}\n')
    fifo(projects / "pipe.jsonl")
    (projects / "loop").symlink_to(projects)
    (projects / "out.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    (tmp_path / "elsewhere.jsonl").write_text('{"secret": 1}\n')
    assert returns(lambda: claude_code.stored(tmp_path)) == [projects / "good.jsonl"]
    sessions = tmp_path / ".codex" / "sessions" / "2025" / "01"
    sessions.mkdir(parents=True)
    (sessions / "rollout-1.jsonl").write_text("{}\n")
    fifo(sessions / "rollout-2.jsonl")
    (sessions / "deeper").symlink_to(tmp_path / ".codex")  # a loop through the tree
    assert returns(lambda: codex.stored(tmp_path)) == [sessions / "rollout-1.jsonl"]
    transcript = Transcript("claude-code", projects / "good.jsonl")
    assert list(json_lines(projects / "good.jsonl", transcript)) == [(1, {"a": 1}),
                                                                     (4, {"b": 2})]
    assert transcript.problems == ["line 2: not JSON", "line 3: not a JSON object"]
    piped = Transcript("claude-code", projects / "pipe.jsonl")
    assert returns(lambda: list(json_lines(projects / "pipe.jsonl", piped))) == []
    assert piped.problems == ["cannot be read: not a regular file"]


def test_a_link_in_the_home_is_never_written_through(home, tmp_path):
    """A link left where the spool or a log file goes: kirolearn removes the link and
    writes in its home, never where the link leads."""
    from helpers.cli import kl

    from kirolearn import paths, spool

    where = paths.Home(home)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where.ensure_layout()
    where.spool_dir.symlink_to(elsewhere, target_is_directory=True)
    written = spool.write({"event_id": "01M8JJD3E62TA0VS8DYS9TN142", "kind": "note"}, where)
    assert written.parent == where.spool_dir and not where.spool_dir.is_symlink()
    assert list(elsewhere.iterdir()) == []
    (where.log_dir / "storage.log").symlink_to(elsewhere / "stolen.log")
    (where.log_dir / "supervisor.log").symlink_to(elsewhere / "stolen-too.log")
    kl("start", check=True)
    try:
        assert "storage" in kl("logs", "storage", check=True).stdout
    finally:
        kl("stop", check=True)
    assert list(elsewhere.iterdir()) == []
    assert not (where.log_dir / "storage.log").is_symlink()


def test_the_reading_of_renames_walks_only_the_last_commits(tmp_path):
    """Renames are followed over the last ``RENAME_COMMITS`` commits, whatever they hold:
    git is not sent to walk a whole long history for renames (one of 100,000 commits
    took it past its time limit, and the checks of the repository went off)."""
    repo = tmp_path / "long"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    stream = []
    for n in range(worktree.RENAME_COMMITS + 100):
        change = ("R old.py new.py\n" if n == 10 else "R lib.py core.py\n"
                  if n == worktree.RENAME_COMMITS + 90 else "")
        if n == 0:
            change = ("M 100644 inline old.py\ndata 6\nA = 1\n\n"
                      "M 100644 inline lib.py\ndata 6\nB = 1\n\n")
        body = f"N = {n}\n"
        stream.append(f"commit refs/heads/main\nmark :{n + 1}\ncommitter A <a@b.c> "
                      f"{1700000000 + n} +0000\ndata 3\nc{n % 10}\n"
                      + (f"from :{n}\n" if n else "") + change
                      + f"M 100644 inline n.py\ndata {len(body)}\n{body}\n")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input="".join(stream),
                   text=True, check=True)
    git(repo, "checkout", "-q", "-f", "main")
    assert worktree.read(str(repo), renames=True)[1] == {"lib.py": "core.py"}


def test_a_head_read_that_hangs_is_abandoned_and_not_tried_again_until_it_returns(
        tmp_path, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(project, "git_head", lambda root: release.wait() and ("main", None))
    trees = worktree.Worktrees()
    assert returns(lambda: trees.head(str(tmp_path))) is None
    assert returns(lambda: trees.head(str(tmp_path))) is None  # still out: not read again
    release.set()
    wait_for(lambda: trees.head(str(tmp_path)) == ("main", None), 30, 0.05, "HEAD read again")


def test_git_reads_the_checkouts_own_tree_whatever_core_worktree_says(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"a.py": "A = 1\n"}, "one")
    (repo / "a.py").write_text("A = 2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.py").write_text("A = 1\n")
    git(repo, "config", "core.worktree", str(elsewhere))
    assert worktree.read(str(repo))[0] == ("a.py",)  # the change here, not the folder there


def test_a_transcripts_hooks_are_handed_on_as_its_reader_finds_them():
    """import-sessions holds no whole transcript: the first hook of a session comes out
    while its reader is still in the middle of it (a 100 MB transcript: 472 MB peak
    before, 55 MB now), and the hooks come in their order."""
    from kirolearn.shims.common import Hook
    from kirolearn.transcripts import replay

    release = threading.Event()

    def transcripts():
        transcript = replay.Transcript("claude-code", Path("s.jsonl"), session_id="s",
                                       cwd="/tmp")
        transcript.add("2026-01-01T00:00:00Z", Hook("prompt", text="first"))
        release.wait(60)
        transcript.add("2026-01-01T00:00:01Z", Hook("prompt", text="second"))
        yield transcript

    found = replay.streamed(transcripts())
    transcript, (_, hook) = returns(lambda: next(found))
    assert hook.text == "first" and not release.is_set()  # the reader is still in it
    release.set()
    rest = list(found)
    assert [h.text for _, (_, h) in rest[:1]] == ["second"]
    assert rest[-1] == (transcript, None)  # then the transcript, once read
