"""A project's brief: what it is, the conventions and decisions in force, the files most
worked on, open work and recent changes, made from its records; given at a session's
start within its own cap, printed by ``kirolearn brief``, shown in the viewer, and
said by the status line."""

from __future__ import annotations

import json
import subprocess

from helpers.cli import BIN, here, kl
from helpers.events import retrieval
from helpers.model_apis import ApiHandler, scripted_api
from helpers.waits import wait_for
from helpers.workspace import Workspace
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import contract, control, db, project
from kirolearn.search import brief
from kirolearn.shims import common

NS = "/actor/tester/project/abc/"


def record(title: str, day: int, kind: str = "tool_use", files: tuple[str, ...] = (),
           summary: str = "", facts: tuple[str, ...] = (), strategy: str = "heuristic",
           namespace: str = NS) -> dict:
    return {"record_id": "mr_" + contract.new_ulid(), "namespace": namespace, "title": title,
            "summary": summary, "facts": list(facts), "concepts": [],
            "files_touched": list(files), "observation_type": kind, "strategy": strategy,
            "source_event_ids": [contract.new_ulid()],
            "created_at": f"2026-03-{day:02d}T10:00:00.000+00:00"}


RECORDS = [  # newest first, as the store gives them
    record("Retry the upload when the server says 503", 20, files=("src/upload.py",),
           facts=("edited `src/upload.py` (+9 −2)", "TODO: cap the retries")),
    record("The cart total rounds each line", 19, files=("src/cart.py", "CHANGES.md"),
           facts=("edited `src/cart.py` (+3 −1)",)),
    record("Import of the price list fails on a BOM", 18, kind="error",
           files=("src/prices.py",)),
    record("Prices are kept in cents", 17, kind="decision", files=("src/cart.py",)),
    record("Fix the cart's tax on discounts", 16, files=("src/cart.py", "CHANGES.md"),
           facts=("edited `src/cart.py` (+4 −4)",)),
    record("The upload failed on big files", 15, kind="error", files=("src/upload.py",)),
    record("CLAUDE.md: Shop conventions", 1, kind="pattern", files=("CLAUDE.md",),
           summary="The shop's backend, in Python.", facts=("Run pytest.", "No floats."),
           strategy=contract.RULE_FILE),
]


def test_the_brief_says_what_the_records_say():
    made = brief.brief(RECORDS, 400)
    sections = {s["heading"]: [i["text"] for i in s["items"]] for s in made.sections}
    assert sections["What it is"] == [
        "The shop's backend, in Python. (6 memories of its work since 2026-03-15.)"]
    assert sections["Conventions and decisions in force"] == [
        "CLAUDE.md: Shop conventions (2 rules)", "Prices are kept in cents · 2026-03-17"]
    # the changelog every change touches says nothing of the work
    assert sections["Files most worked on"] == [
        "`src/cart.py` (3 memories): The cart total rounds each line",
        "`src/upload.py` (2 memories): Retry the upload when the server says 503"]
    # the newest upload work left a TODO; its older failure was followed by later work
    assert sections["Open work"] == [
        "2026-03-20 Retry the upload when the server says 503",
        "2026-03-18 Import of the price list fails on a BOM (failed)"]
    assert sections["Recent changes"][0] == "2026-03-20 Retry the upload when the server says 503"
    assert made.markdown.startswith(brief.HEADER + "\n\n**What it is:** The shop's backend")
    assert "- `src/cart.py` (3 memories)" in made.markdown
    assert brief.brief(RECORDS, 400) == made  # deterministic
    assert brief.brief([], 400).markdown == "" and brief.brief(RECORDS, 0).sections == []


def test_a_brief_of_a_long_history_tells_the_truth():
    """Day one on a seeded history of 1,327 records by 244 authors, 500 read: the true
    totals and the window said; the files of the project's logic, each told by its
    most telling change (not a typo's fix); no version, lock or requirement file; no
    trailer, address or bot's bump; a question answered by reading is no change."""
    def commit(title: str, day: int, *files: str) -> dict:
        return record(title, day, files=files,
                      facts=tuple(f"edited `{name}` (+1 −1)" for name in files))
    records = [  # newest first
        record("Why does the client retry? (no change needed)", 28, files=("src/client.py",),
               facts=("read `src/client.py`",)),
        commit("fix typo (#3519)", 27, "src/client.py", "src/models.py"),
        commit("Bump certifi from 2024.2.2 to 2024.7.4", 26, "requirements.txt"),
        commit("Expose FunctionAuth (#3699)\n\nCo-authored-by: Kar <kar@example.com>", 25,
               "src/auth.py"),
        *(commit(f"Version 0.{n}.0", 20 - n, "src/__version__.py", "requirements.txt")
          for n in range(5)),
        commit("Retry a request on a dropped connection", 10, "src/client.py"),
        commit("Move helpers into the client and models", 9, "src/client.py",
               "src/models.py", "src/utils.py", "src/auth.py", "src/config.py"),
        commit("Keep headers in the order they were given", 8, "src/models.py"),
    ]
    made = brief.brief(records, 2000, brief.Totals(1327, 244, "2019-04-04T10:00:00+00:00"))
    sections = {s["heading"]: [i["text"] for i in s["items"]] for s in made.sections}
    assert sections["What it is"] == ["1,327 memories of its work since 2019-04-04, by 244"
                                      " people; this brief reads the newest 500."]
    assert sections["Files most worked on"][:2] == [
        "`src/client.py` (4 memories): Retry a request on a dropped connection",
        "`src/models.py` (3 memories): Keep headers in the order they were given"]
    assert "__version__" not in made.markdown and "requirements" not in made.markdown
    assert "Co-authored-by" not in made.markdown and "@" not in made.markdown
    assert sections["Recent changes"][:2] == ["2026-03-27 fix typo (#3519)",
                                              "2026-03-25 Expose FunctionAuth (#3699)"]


@given(st.lists(st.builds(record, st.text(min_size=1, max_size=300), st.integers(1, 28),
                          st.sampled_from(contract.OBSERVATION_TYPES),
                          st.lists(st.sampled_from(["a.py", "b.py", "CHANGES.md", "x/y.go"]),
                                   max_size=3).map(tuple),
                          st.text(max_size=300), st.lists(st.text(max_size=80),
                                                          max_size=3).map(tuple)),
                max_size=30),
       st.integers(20, 1000))
def test_a_brief_keeps_within_its_tokens_and_names_only_its_records(records, tokens):
    made = brief.brief(records, tokens)
    assert len(made.markdown) <= tokens * 4
    assert set(made.record_ids) <= {r["record_id"] for r in records}


def test_the_shims_know_the_briefs_header():
    assert common.BRIEF_HEADER == brief.HEADER


def test_a_project_brief_through_the_daemon(daemon, tmp_path):
    """The brief is made of the project's records the user may read (a seeded
    history's authors' too), printed by ``kirolearn brief``, given at a session's start
    (its records not given again), and the status line says so."""
    ws = Workspace(tmp_path)
    project_id = project.parts(ws.namespace)[1]
    ada = project.namespace_for("ada", project_id)
    for made in [*RECORDS[:-1], {**RECORDS[-1], "namespace": ada}]:
        control.call("ingest", "put_record", {"record": {**made, "namespace": made[
            "namespace"].replace(NS, ws.namespace)}}, timeout_ms=control.WRITE_MS,
            home=here())

    printed = kl("brief", "--project", str(ws.project), env=ws.env(), check=True).stdout
    assert printed.startswith(brief.HEADER)
    assert "**What it is:** The shop's backend, in Python." in printed  # ada's CLAUDE.md
    assert "Import of the price list fails on a BOM (failed)" in printed
    asked = json.loads(kl("brief", "--project", str(ws.project), "--json", env=ws.env(),
                          check=True).stdout)
    assert asked["brief"] + "\n" == printed and len(asked["record_ids"]) >= 5
    assert retrieval("brief", {"namespace": ws.namespace})["brief"] == asked["brief"]

    started, _ = ws.hook("kirolearn-claude-code", {
        "session_id": "s-1", "cwd": str(ws.project), "hook_event_name": "SessionStart",
        "source": "startup"})
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert brief.HEADER in context and "Prices are kept in cents" in context
    assert context.count("Prices are kept in cents") == 1  # not again in full below it
    assert "CLAUDE.md: Shop conventions" not in context  # Claude Code loads it itself

    def logged() -> list[str] | None:  # the session start's retrieval, logged after it
        with db.reading(db.location(here())) as conn:
            row = conn.execute("SELECT record_ids_json FROM retrievals ORDER BY id DESC"
                               " LIMIT 1").fetchone()
        return json.loads(row[0]) if row else None
    decision = next(r["record_id"] for r in RECORDS if r["title"] == "Prices are kept in cents")
    assert decision in wait_for(logged, message="the session start logged")  # the brief's
    line = subprocess.run([str(BIN / "kirolearn-statusline")], input=json.dumps(
        {"session_id": "s-1", "cwd": str(ws.project)}), capture_output=True, text=True,
        env=ws.env(), timeout=30, check=True).stdout
    assert line.endswith(" · brief ✓\n"), line

    empty = kl("brief", "--project", str(tmp_path), env=ws.env())
    assert empty.returncode == 0 and "no memories of this project yet" in empty.stderr


class RewritingModel(ApiHandler):
    """An OpenAI-compatible endpoint whose model rewrites a brief its own way."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        said = ("**What it is:** A shop's backend in Python, its prices kept in cents."
                " (said by the model)")
        self._send("application/json", json.dumps({
            "choices": [{"message": {"role": "assistant", "content": said}}],
            "usage": {"total_tokens": 120}}).encode())


def test_a_configured_model_rewrites_the_brief_in_the_background(home, tmp_path):
    """With a model configured (extraction's), the brief is first the rule-made one (no
    one waits for a model), then the model's rewrite of it, from the same page; the model
    is given that page, scrubbed."""
    ws = Workspace(tmp_path)
    with scripted_api(RewritingModel) as model:
        (home / "config.toml").write_text(
            '[extraction]\nstrategy = "openai"\nllm_model = "scripted"\n'
            f'llm_url = "http://127.0.0.1:{model.server_port}/v1"\n')
        kl("start", check=True)
        try:
            secret = "AKIA" + "QWERTYUIOPASDFGH"
            control.call("ingest", "put_record", {"record": {
                **RECORDS[3], "namespace": ws.namespace,
                "summary": f"The key {secret} is not ours."}},
                timeout_ms=control.WRITE_MS, home=here())
            first = retrieval("brief", {"namespace": ws.namespace})
            assert first["rewritten"] is False and "Prices are kept in cents" in first["brief"]
            later = wait_for(lambda: (found := retrieval("brief", {"namespace": ws.namespace}))
                             ["rewritten"] and found, 30, 0.2, "the model's rewrite")
            assert later["brief"] == (brief.HEADER + "\n\n**What it is:** A shop's backend"
                                      " in Python, its prices kept in cents. (said by the"
                                      " model)")
            assert later["record_ids"] == first["record_ids"]
            [asked] = model.bodies
            assert "Prices are kept in cents" in json.dumps(asked) and secret not in json.dumps(
                asked)
            started, _ = ws.hook("kirolearn-claude-code", {
                "session_id": "s-1", "cwd": str(ws.project), "hook_event_name": "SessionStart",
                "source": "startup"})
            assert started.returncode == 0, started.stderr
            # the same page at a session's start: the same rewrite, asked of the model once
            assert "(said by the model)" in json.loads(started.stdout)["hookSpecificOutput"][
                "additionalContext"] and len(model.bodies) == 1
        finally:
            kl("stop", check=True)
