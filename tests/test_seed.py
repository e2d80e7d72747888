"""``kirolearn seed --git``: a repository's history as memory on day one, through the
real daemon and a real git repository made here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers.cli import kl
from helpers.waits import wait_for
from helpers.workspace import Workspace
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import contract, project, seed

PARSER = '''def parse_header(line):
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()
'''


def git(repo: Path, *args: str, author: str = "Ada Lovelace <ada@example.com>",
        when: str = "2024-03-01T10:00:00+00:00") -> str:
    name, _, email = author.partition(" <")
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"),
           "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email.rstrip(">"),
           "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout


def commit(repo: Path, files: dict[str, str], message: str, **who) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message, **who)


def records() -> list[dict]:
    lines = map(json.loads, kl("export", check=True).stdout.splitlines())
    return [line for line in lines if "record_id" in line]


def test_a_seeded_repository_recalls_its_past_on_day_one(home, tmp_path):
    """Commits become records as old as the commits, by their authors, anchored to the
    code they wrote; bots' commits and merges are left out; a second run stores
    nothing; a new commit is all the next run reads; a lost record of where a run
    ended (a kill) costs only duplicates."""
    ws = Workspace(tmp_path)
    repo = ws.home / "shop"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"README.md": "# shop\n"}, "Start the shop")
    commit(repo, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines",
           when="2024-03-02T10:00:00+00:00")
    commit(repo, {"requirements.txt": "httpx==0.27\n"}, "Bump httpx from 0.26 to 0.27",
           author="dependabot[bot] <support@github.com>", when="2024-03-03T10:00:00+00:00")
    git(repo, "checkout", "-qb", "feature")
    commit(repo, {"src/cart.py": "def cart_total(items):\n    return sum(items)\n"},
           "Total the cart", author="Grace Hopper <grace@example.com>",
           when="2024-03-04T10:00:00+00:00")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'feature'", "feature",
        when="2024-03-05T10:00:00+00:00")

    refused = kl("seed", "--git", "--project", str(tmp_path))
    assert refused.returncode == 1
    assert f"{tmp_path} is not in a git repository" in refused.stderr  # the folder asked
    assert "say what to seed from" in kl("seed", "--project", str(repo)).stderr

    (repo / "AGENTS.md").write_text("- Prices are kept in cents.\n")  # not committed yet
    kl("start", check=True)
    try:
        done = kl("seed", "--git", "--project", str(repo), check=True).stdout
        assert "seeded 3 commit(s)" in done and "left out 1 commit(s): 1 by a bot" in done
        assert "rule files: AGENTS.md stored" in done
        made = wait_for(lambda: (found := [r for r in records() if r["strategy"] != "rule_file"]
                                 ) and len(found) == 3 and found, 30, 0.2,
                        "a record of each commit")
        parser = next(r for r in made if r["title"] == "Add a parser for the HTTP header lines")
        assert parser["created_at"].startswith("2024-03-02T10:00:00")
        assert parser["anchors"] == {"src/http.py": ["parse_header"]}
        assert parser["code"]["branch"] == "main"
        cart = next(r for r in made if r["title"] == "Total the cart")
        # one project, whatever the number of authors: the user's, each commit's author kept
        user = project.resolve_project(str(repo)).namespace(project.actor_id())
        assert {r["namespace"] for r in made} == {user}
        assert (parser["code"]["author"], cart["code"]["author"]) == ("Ada Lovelace",
                                                                     "Grace Hopper")

        result, _ = ws.hook("kirolearn-claude-code", {
            "session_id": "s-1", "transcript_path": "/x/s.jsonl", "cwd": str(repo),
            "hook_event_name": "UserPromptSubmit",
            "prompt": "how do we parse an HTTP header line?"}, cwd=repo)
        assert "Add a parser for the HTTP header lines" in result.stdout

        again = kl("seed", "--git", "--project", str(repo), check=True).stdout
        assert again.startswith("seeded 0 commit(s)") and "events stored 0" in again
        commit(repo, {"src/http.py": PARSER + "\nMAX_LINE = 8190\n"}, "Cap a header line",
               when="2024-03-06T10:00:00+00:00")
        newer = kl("seed", "--git", "--project", str(repo), check=True).stdout
        assert newer.startswith("seeded 1 commit(s)")
        (Path(home) / "seeded.json").unlink()  # as if the run before had been killed
        redone = kl("seed", "--git", "--project", str(repo), check=True).stdout
        assert "seeded 4 commit(s)" in redone and "events stored 0" in redone
        wait_for(lambda: len(records()) == 5, 30, 0.2, "the new commit's record")
    finally:
        kl("stop", check=True)


def test_a_home_seeded_by_author_is_made_one_project_again(store, tmp_path):
    """An earlier version seeded each commit into its author's namespace. At the next
    start those namespaces move into the user's: one project, each record and event
    keeping its author; nothing is extracted again, and seeding again stores nothing."""
    repo = tmp_path / "shop"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines")
    commit(repo, {"src/cart.py": "def cart_total(items):\n    return sum(items)\n"},
           "Total the cart", author="Grace Hopper <grace@example.com>",
           when="2024-03-04T10:00:00+00:00")
    here = project.resolve_project(str(repo))
    old = []
    for made in seed.history(str(repo)):
        actor = made.author.replace(" ", "-")  # as the earlier version named them
        for event in seed.session_events(str(repo), made, here, actor, "main"):
            del event["source"]["author"]
            old.append({**event, "namespace": here.namespace(actor)})
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(e) + "\n" for e in old))
    user = here.namespace(project.actor_id())
    kl("start", check=True)
    try:
        kl("import", str(tmp_path / "old.jsonl"), check=True)
        wait_for(lambda: len(records()) == 2, 30, 0.2, "a record of each commit")
    finally:
        kl("stop", check=True)
    assert len({r["namespace"] for r in records()}) == 2
    kl("start", check=True)
    try:
        stats = json.loads(kl("stats", "--json", check=True).stdout)
        assert [n["namespace"] for n in stats["namespaces"]] == [user]
        assert stats["namespaces"][0]["pending_events"] == 0  # nothing to extract again
        made = records()
        assert len(made) == 2 and {r["namespace"] for r in made} == {user}
        assert {r["title"]: r["code"]["author"] for r in made} == {
            "Add a parser for the HTTP header lines": "Ada-Lovelace",
            "Total the cart": "Grace-Hopper"}
        moved = [line for line in map(json.loads, kl("export", check=True).stdout.splitlines())
                 if "kind" in line]
        assert {(e["actor_id"], e["source"]["author"]) for e in moved} == {
            (project.actor_id(), "Ada-Lovelace"), (project.actor_id(), "Grace-Hopper")}
        again = kl("seed", "--git", "--project", str(repo), check=True).stdout
        assert "seeded 2 commit(s)" in again and "events stored 0" in again
    finally:
        kl("stop", check=True)


def test_a_change_made_twice_in_a_commit_is_one_event(tmp_path):
    """Two hunks alike (the same lines changed the same way in two places of a file)
    are one edit: a first run reports no duplicates."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    block = "# one\n# two\n# three\nLIMIT = 1\n# four\n# five\n# six\n"
    filler = "".join(f"x{n} = {n}\n" for n in range(10))
    commit(repo, {"a.py": filler + block + filler + block}, "Start")
    changed = block.replace("= 1", "= 2")
    commit(repo, {"a.py": filler + changed + filler + changed}, "Raise the limit",
           when="2024-03-02T10:00:00+00:00")
    newest = seed.history(str(repo))[-1]
    here = project.resolve_project(str(repo))
    events = seed.session_events(str(repo), newest, here, "ada", "main")
    edits = [e for e in events if e["kind"] == "tool_use"
             and e["body"]["data"]["tool_name"] == "Edit"]
    assert len(edits) == 1
    assert len({e["content_hash"] for e in events}) == len(events)
    assert {e["source"]["author"] for e in events} == {"Ada Lovelace"}


def test_bots_formatting_and_mass_changes_are_left_out():
    def made(**fields) -> seed.Commit:
        return seed.Commit(**{"sha": "a" * 40, "when": "2024-03-02T10:00:00+00:00",
                              "author": "Ada", "email": "ada@example.com",
                              "message": "Fix the cart", "files": 3, **fields})
    assert seed.left_out(made()) is None
    assert seed.left_out(made(author="renovate[bot]")) == "by a bot"
    assert seed.left_out(made(message="Reformat with black", files=120)) == "formatting"
    assert seed.left_out(made(message="Reformat the cart", files=2)) is None
    assert seed.left_out(made(files=seed.MAX_FILES + 1)) == "mass change"


@given(st.text(alphabet="0123456789abcdef", min_size=40, max_size=40),
       st.integers(0, 10_000), st.integers(0, 2_000_000_000))
def test_an_event_of_a_commit_has_the_same_ulid_every_run(sha, place, seconds):
    from datetime import UTC, datetime
    when = datetime.fromtimestamp(seconds, UTC).isoformat()
    made = seed.Commit(sha, when, "Ada", "ada@example.com", "Fix it")
    found = seed.event_id(made, place)
    assert contract.is_ulid(found) and found == seed.event_id(made, place)
    assert contract.ulid_timestamp_ms(found) == seconds * 1000
    assert found != seed.event_id(made, place + 1)


def test_install_seeds_a_project_when_asked_starting_the_daemon(home, tmp_path):
    ws = Workspace(tmp_path)
    repo = ws.home / "shop"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines")
    quiet = kl("install", "--agent", "claude-code", "--project", str(repo), check=True)
    assert "seeded" not in quiet.stdout and "not running" in quiet.stdout  # no terminal
    try:
        done = kl("install", "--agent", "claude-code", "--project", str(repo), "--seed",
                  check=True).stdout
        assert "seeded 1 commit(s)" in done
        wait_for(lambda: [r for r in records()
                          if r["title"] == "Add a parser for the HTTP header lines"], 30, 0.2,
                 "the seeded record")
    finally:
        kl("stop", check=True)


def fast_history(repo: Path, commits: int) -> None:
    """A repository of ``commits`` commits, each adding a function, made at once."""
    stream = []
    for n in range(commits):
        body = f"def step_{n}(value):\n    return value + {n}\n"
        stream += [f"commit refs/heads/main\nmark :{n + 1}\n"
                   f"author Ada Lovelace <ada@example.com> {1700000000 + n * 60} +0000\n"
                   f"committer Ada Lovelace <ada@example.com> {1700000000 + n * 60} +0000\n"
                   f"data {len(f'Add step {n}')}\nAdd step {n}\n"
                   + (f"from :{n}\n" if n else "")
                   + f"M 100644 inline src/step_{n}.py\ndata {len(body)}\n{body}\n"]
    git(repo, "init", "-q", "-b", "main")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input="".join(stream),
                   text=True, check=True)
    git(repo, "checkout", "-q", "-f", "main")


def test_a_killed_seed_goes_on_after_what_ingest_had_answered(home, tmp_path):
    """A seed killed half-way is taken up after the last commit ingest had answered: the
    next run reads only the rest, and stores each event once."""
    import os
    import signal

    from helpers.cli import KL, here

    repo = tmp_path / "big"
    repo.mkdir()
    fast_history(repo, 300)
    kl("start", check=True)
    try:
        seeding = subprocess.Popen([*KL, "seed", "--git", "--project", str(repo)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: seed.last_seeded(here(), str(repo)), 60, 0.01,
                     "a first commit answered")
            os.kill(seeding.pid, signal.SIGSTOP)  # where it is: then killed
            reached = seed.last_seeded(here(), str(repo))
            seeding.kill()
        finally:
            seeding.wait()
        assert seeding.returncode == -signal.SIGKILL  # killed half-way, not done
        shas = git(repo, "log", "--format=%H").split()[::-1]
        assert reached in shas and reached != shas[-1]
        rest = len(shas) - 1 - shas.index(reached)
        done = kl("seed", "--git", "--project", str(repo), check=True).stdout
        assert done.startswith(f"seeded {rest} commit(s)")
        assert seed.last_seeded(here(), str(repo)) == shas[-1]
        events = [line for line in map(json.loads, kl("export", check=True).stdout.splitlines())
                  if "event_id" in line and "record_id" not in line]
        assert len(events) == len({e["event_id"] for e in events}) == 4 * len(shas)
    finally:
        kl("stop", check=True)
