"""Running the installed shims as an agent does, and reading back what was stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import kl, wait_for

from kirolearn import contract, db, paths, project, transport

BIN = Path(sys.executable).parent
ACTOR = "tester"


class Workspace:
    """A user's home holding one git project, as the agents see it."""

    def __init__(self, root: Path):
        self.home = root / "home"
        self.project = self.home / "proj"
        (self.project / ".git").mkdir(parents=True)
        (self.project / "src").mkdir()
        found = project.resolve_project(self.project, home=str(self.home), override="")
        self.root = found.root
        self.namespace = found.namespace(ACTOR)

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("USER_PROMPT",)}
        env.update(HOME=str(self.home), USER=ACTOR, LOGNAME=ACTOR, **extra)
        return env

    def hook(self, script: str, payload: dict | str | None = None, *args: str,
             cwd: Path | None = None, **env: str) -> tuple[subprocess.CompletedProcess, float]:
        """Run an installed shim with payload (a dict as JSON) on stdin; returns the
        finished process and its wall time."""
        started = time.monotonic()
        text = json.dumps(payload) if isinstance(payload, dict) else payload or ""
        result = subprocess.run(
            [str(BIN / script), *args], input=text,
            capture_output=True, text=True, timeout=30, cwd=cwd or self.project,
            env=self.env(**env))
        return result, time.monotonic() - started


def stored_events() -> list[dict]:
    """Every stored event, oldest first (export also writes the records: left out)."""
    if not paths.db_path().exists():
        return []
    out = kl("export", check=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [line for line in lines if "kind" in line]


def wait_events(count: int, timeout: float = 15) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        events = stored_events()
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.1)


def retrieval(op: str, body: dict) -> dict:
    with transport.Client(paths.endpoint("retrieval"), timeout_ms=5000) as client:
        return client.call(op, body)


def settled_context(namespace: str, query: str, timeout: float = 15) -> str:
    """The context a prompt gets once the project's new records have their vectors and
    retrieval has loaded them (until then a hybrid search answers lexically): the same
    answer twice, half a second apart."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        context = retrieval("search", {"query": query, "namespace": namespace})["context"]
        if context == previous or time.monotonic() > deadline:
            return context
        previous = context
        time.sleep(0.5)


def logged_retrieval(prompt_event_id: str) -> dict:
    """The retrieval log's entry for a prompt (written just after the answer)."""
    def row() -> tuple | None:
        conn = db.connect_reader(paths.db_path())
        try:
            return conn.execute("SELECT context, outcome, error FROM retrievals"
                                " WHERE prompt_event_id = ?", (prompt_event_id,)).fetchone()
        finally:
            conn.close()

    context, outcome, error = wait_for(row, message=f"the retrieval log of {prompt_event_id}")
    return {"context": context, "outcome": outcome, "error": error}


def check_prompt_answer(printed: str, namespace: str, query: str, hybrid: str) -> None:
    """The shim printed exactly what retrieval answered for the prompt it sent, and that
    is the settled hybrid answer, or, where the log says the semantic side was skipped
    (the query's embedding missed the budget on a busy machine), the lexical one."""
    prompt = stored_events()[-1]
    assert prompt["kind"] == "prompt" and contract.body_text(prompt["body"]) == query
    logged = logged_retrieval(prompt["event_id"])
    assert logged["outcome"] == "ok", logged
    assert printed == logged["context"]
    if printed != hybrid:
        assert (logged["error"] or "").startswith("semantic side skipped"), logged
        lexical = retrieval("search", {"query": query, "namespace": namespace,
                                       "mode": "lexical"})["context"]
        assert printed == lexical


def wait_records(namespace: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = json.loads(kl("stats", "--namespace", namespace, "--json", check=True).stdout)
        if out["namespaces"] and out["namespaces"][0]["records"]:
            return
        time.sleep(0.2)
    raise AssertionError("no memory records were extracted")
