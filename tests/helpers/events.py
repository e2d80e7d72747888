"""Events as a shim makes them, and what was stored, extracted and retrieved of them."""

from __future__ import annotations

import json

from helpers.cli import here, kl
from helpers.waits import wait_for
from kirolearn import contract, control, db
from kirolearn.db import writes

NAMESPACE = "/actor/tester/project/" + "a" * 64 + "/"
ACTOR = "tester"


def make_event(kind: str = "prompt", content: str = "hello", **overrides) -> dict:
    body = overrides.pop("body", None) or (
        {"type": "json", "data": {"tool_name": "fs_read", "tool_input": {"path": content}}}
        if kind == "tool_use" else {"type": "text", "content": content})
    event = contract.make_event(
        kind, body, namespace=overrides.pop("namespace", NAMESPACE), actor_id="tester",
        session_id=overrides.pop("session_id", "session-1"), surface="kiro-cli",
        version="0.1.0", client_id="testhost", project_path="/tmp/project")
    event.update(overrides)
    return event


def stored_events() -> list[dict]:
    """Every stored event, oldest first (export also writes the records: left out)."""
    if not db.exists(db.location(here())):
        return []
    out = kl("export", check=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [line for line in lines if "kind" in line]


def wait_events(count: int, timeout: float = 30) -> list[dict]:
    """The stored events, once there are at least ``count``."""
    return wait_for(lambda: (lambda found: found if len(found) >= count else None)(
        stored_events()), timeout, 0.1, f"{count} stored event(s)")


def retrieval(op: str, body: dict) -> dict:
    return control.call("retrieval", op, body, timeout_ms=control.LOOKUP_MS, home=here())


def settled_context(namespace: str, query: str, timeout: float = 30,
                    files: tuple[str, ...] = ()) -> str:
    """The context a prompt gets (in a session that touched ``files``) once the
    project's new records have their vectors and retrieval has loaded them (until then
    a hybrid search answers lexically): the same answer twice, half a second apart,
    with no record waiting for its vector."""
    seen: list[str] = []
    in_play = {"files": list(files)} if files else {}

    def settled() -> bool:
        seen.append(retrieval("search", {"query": query, "namespace": namespace,
                                         **in_play})["context"])
        waiting = (control.embeddings_state(here()) or {}).get("unembedded", 0)
        return len(seen) > 1 and seen[-1] == seen[-2] and not waiting

    wait_for(settled, timeout, 0.5, f"a settled answer to {query!r}")
    return seen[-1]


def logged_retrieval(prompt_event_id: str) -> dict:
    """The retrieval log's entry for a prompt (written just after the answer)."""
    def row() -> tuple | None:
        with db.reading(db.location(here())) as conn:
            return conn.execute("SELECT context, outcome, error FROM retrievals"
                                " WHERE prompt_event_id = $1", (prompt_event_id,)).fetchone()

    context, outcome, error = wait_for(row, message=f"the retrieval log of {prompt_event_id}")
    return {"context": context, "outcome": outcome, "error": error}


def check_prompt_answer(printed: str, namespace: str, query: str, hybrid: str,
                        files: tuple[str, ...] = ()) -> None:
    """The shim printed exactly what retrieval answered for the prompt it sent, and that
    is the settled hybrid answer, or, where the log says the semantic side was skipped
    (the query's embedding missed the budget on a busy machine), the lexical one (in a
    session that touched ``files``)."""
    prompt = stored_events()[-1]
    assert prompt["kind"] == "prompt" and contract.body_text(prompt["body"]) == query
    logged = logged_retrieval(prompt["event_id"])
    assert logged["outcome"] == "ok", logged
    assert printed == logged["context"]
    if printed != hybrid:
        assert (logged["error"] or "").startswith("semantic side skipped"), logged
        lexical = retrieval("search", {"query": query, "namespace": namespace,
                                       "mode": "lexical", "files": list(files)})["context"]
        assert printed == lexical


def wait_records(namespace: str, timeout: float = 30) -> None:
    """Until extraction has stored a record in the namespace."""
    def records() -> int:
        out = json.loads(kl("stats", "--namespace", namespace, "--json", check=True).stdout)
        return out["namespaces"][0]["records"] if out["namespaces"] else 0

    wait_for(records, timeout, 0.2, f"a memory record in {namespace}")


def make_db(where: db.Location, records: list[dict]) -> db.Location:
    """A store (SQLite file or PostgreSQL database) holding these records, written one by
    one as storage writes them."""
    conn = db.connect_writer(where)
    conn.execute("BEGIN")
    for r in records:
        writes.insert_record(conn, r)
    conn.execute("COMMIT")
    conn.close()
    return where
