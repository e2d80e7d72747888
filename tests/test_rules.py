"""Rule files (CLAUDE.md, AGENTS.md, .cursorrules…) as memories: one record each,
versioned as the file changes, sent when a session starts; and the context an agent
is given leaves out the files it loads itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.cli import kl
from helpers.events import retrieval
from helpers.waits import wait_for
from helpers.workspace import Workspace
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import contract, paths, rules
from kirolearn.extract import rules as rule_records

NAMESPACE = "/actor/tester/project/abc/"
CLAUDE_MD = """# Shop conventions

This is the shop's backend. All money is kept in cents.

## Testing
- Run `pytest -q` before each commit.
- Never mock the database: use the sqlite fixture.

```bash
make lint
```
"""
AGENTS_MD = """# Agents

- Every zanzibar migration is reversible and reviewed.
"""


def test_a_rule_file_is_one_record_named_by_the_file():
    made = rule_records.record_of(NAMESPACE, "CLAUDE.md", CLAUDE_MD)
    assert made["title"] == "CLAUDE.md: Shop conventions"
    assert made["summary"] == "This is the shop's backend. All money is kept in cents."
    assert made["facts"] == ["Run `pytest -q` before each commit.",
                             "Never mock the database: use the sqlite fixture."]
    assert made["concepts"] == ["Shop conventions", "Testing"]
    assert made["files_touched"] == ["CLAUDE.md"]
    assert (made["observation_type"], made["strategy"]) == ("pattern", contract.RULE_FILE)
    changed = rule_records.record_of(NAMESPACE, "CLAUDE.md", CLAUDE_MD + "- Tag releases.\n")
    assert changed["record_id"] == made["record_id"]  # the same record, a new version
    assert changed["source_event_ids"] != made["source_event_ids"]
    assert rule_records.record_of(NAMESPACE, "AGENTS.md", CLAUDE_MD)["record_id"] != (
        made["record_id"])


@given(st.text(max_size=3000), st.sampled_from(["CLAUDE.md", ".cursor/rules/a b.mdc",
                                                 "~/.claude/projects/-x/memory/MEMORY.md"]))
def test_any_text_makes_a_valid_record(text, name):
    made = rule_records.record_of(NAMESPACE, name, text)
    contract.validate_record(made)
    assert made["files_touched"] == [name]


def test_which_agent_loads_which_file():
    assert rules.loads("claude-code", "CLAUDE.md")
    assert rules.loads("claude-code", "~/.claude/projects/-home-me-shop/memory/MEMORY.md")
    assert not rules.loads("claude-code", "AGENTS.md")
    assert rules.loads("codex", "AGENTS.md") and not rules.loads("codex", "CLAUDE.md")
    assert rules.loads("cursor", ".cursor/rules/style.mdc")
    assert not rules.loads(None, "CLAUDE.md") and not rules.loads("unknown", "AGENTS.md")


def test_the_files_that_changed_since_they_were_sent(tmp_path):
    home = paths.Home(tmp_path / "kl")
    checkout, user_home = tmp_path / "shop", tmp_path / "me"
    (checkout / ".cursor" / "rules").mkdir(parents=True)
    (checkout / "CLAUDE.md").write_text(CLAUDE_MD)
    (checkout / ".cursor" / "rules" / "style.mdc").write_text("---\nglobs: *\n---\n- Tabs.\n")
    (checkout / ".cursor" / "rules" / "notes.txt").write_text("not a rule")
    name, memory = rules.auto_memory(str(checkout), str(user_home))
    assert name == "~/.claude/projects/" + str(checkout).replace("/", "-").replace(
        "_", "-") + "/memory/MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_text("- The staging database is shop-staging.\n")

    first = rules.changed(home, str(checkout), str(user_home))
    assert sorted(n for n, _, _ in first) == sorted(
        ["CLAUDE.md", ".cursor/rules/style.mdc", name])
    for found_name, _, now in first:
        rules.remember(home, str(checkout), found_name, now)
    assert rules.changed(home, str(checkout), str(user_home)) == []
    (checkout / "CLAUDE.md").write_text(CLAUDE_MD + "- Tag releases.\n")
    (checkout / ".cursor" / "rules" / "style.mdc").unlink()
    assert [(n, p) for n, p, _ in rules.changed(home, str(checkout), str(user_home))] == [
        ("CLAUDE.md", checkout / "CLAUDE.md"), (".cursor/rules/style.mdc", None)]
    home.rules_file.write_text('{"' + str(checkout) + '": [1, 2]}')  # damaged: all again
    assert len(rules.changed(home, str(checkout), str(user_home))) == 2


def test_rule_files_through_the_daemon(daemon, tmp_path):
    """A session's start stores each rule file as a record once; a changed file is a new
    version of it; a removed one is marked invalid; a forgotten one stays forgotten.
    Claude Code is not given CLAUDE.md's record (it loads the file itself) but is given
    AGENTS.md's; Codex the other way round."""
    ws = Workspace(tmp_path)
    (ws.project / "CLAUDE.md").write_text(CLAUDE_MD)
    (ws.project / "AGENTS.md").write_text(AGENTS_MD)

    def start(agent: str = "kirolearn-claude-code") -> str:
        done, _ = ws.hook(agent, {"session_id": "s-1", "cwd": str(ws.project),
                                  "hook_event_name": "SessionStart", "source": "startup"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    def records() -> dict[str, dict]:
        lines = map(json.loads, kl("export", check=True).stdout.splitlines())
        return {r["files_touched"][0]: r for r in lines
                if "record_id" in r and r["strategy"] == contract.RULE_FILE}

    def context(agent: str, prompt: str) -> str:
        done, _ = ws.hook(agent, {"session_id": "s-2", "cwd": str(ws.project),
                                  "hook_event_name": "UserPromptSubmit", "prompt": prompt})
        assert done.returncode == 0, done.stderr
        return done.stdout

    start()
    made = wait_for(lambda: (found := records()) and len(found) == 2 and found, 30, 0.2,
                    "a record of each rule file")
    assert made["CLAUDE.md"]["title"] == "CLAUDE.md: Shop conventions"
    assert {r["namespace"] for r in made.values()} == {ws.namespace}
    sent = json.loads(Path(daemon, "rules.json").read_text())[str(ws.project)]
    assert set(sent) == {"CLAUDE.md", "AGENTS.md"}

    asked = "is each zanzibar migration reversible, and do we mock the sqlite database?"
    as_claude = context("kirolearn-claude-code", asked)
    assert "zanzibar migration is reversible" in as_claude
    assert "Never mock the database" not in as_claude
    as_codex = context("kirolearn-codex", asked)
    assert "Never mock the database" in as_codex
    assert "zanzibar migration" not in as_codex
    searched = retrieval("search", {"query": asked, "namespace": ws.namespace})
    assert "zanzibar" in searched["context"] and "Never mock" in searched["context"]

    (ws.project / "CLAUDE.md").write_text(CLAUDE_MD + "- Tag each release.\n")
    os.utime(ws.project / "CLAUDE.md", ns=(1, 1))  # a different time, whatever the clock
    (ws.project / "AGENTS.md").unlink()
    start("kirolearn-codex")
    now = wait_for(lambda: (found := records()) and "Tag each release." in found[
        "CLAUDE.md"]["facts"] and found, 30, 0.2, "the new version of CLAUDE.md")
    assert now["CLAUDE.md"]["record_id"] == made["CLAUDE.md"]["record_id"]
    [old] = now["CLAUDE.md"]["versions"]
    assert old["reason"] == "CLAUDE.md changed" and "Tag each release." not in old["facts"]
    assert now["AGENTS.md"]["invalid_reason"] == "AGENTS.md was removed"
    assert "Shop conventions" in start("kirolearn-codex")  # among the patterns
    # nothing changed since: nothing is sent, nothing changes; and Claude Code's own file
    # is not in its session's context
    assert "Shop conventions" not in start()
    assert records()["CLAUDE.md"]["versions"] == [old]

    kl("forget", made["CLAUDE.md"]["record_id"], "--yes", check=True)
    (ws.project / "CLAUDE.md").write_text(CLAUDE_MD)
    os.utime(ws.project / "CLAUDE.md", ns=(2, 2))
    start()  # the hook sends before it ends
    assert json.loads(Path(daemon, "rules.json").read_text())[str(ws.project)][
        "CLAUDE.md"][1] == 2
    assert "CLAUDE.md" not in records()  # forgotten stays forgotten
