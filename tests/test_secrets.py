"""Secrets never stored: the corpus through every shim, the spool and MCP saves, then
looked for everywhere text rests or leaves; text stored under older rules, scrubbed at
each exit and by ``kirolearn scrub``."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.cli import kl
from helpers.events import retrieval
from helpers.waits import wait_for
from helpers.workspace import Workspace, call, serve
from secret_corpus import PRIVATE, SECRETS
from starlette.testclient import TestClient

from kirolearn import config, contract, db, paths, privacy
from kirolearn.db import writes
from kirolearn.extract import llm
from kirolearn.supervisor.arbiter import Arbiter, Process
from kirolearn.viewer.app import create_app
from kirolearn.viewer.auth import COOKIE
from kirolearn.viewer.listener import load_token

CORPUS = "\n".join(text for _, text, _ in SECRETS)
PRIVATE_TEXT = "\n".join(text for _, text in PRIVATE)
LEAKS = [secret for _, _, secret in SECRETS] + [f"HIDDEN{i:02}" for i in range(1, 22)]


def leaked(data: str | bytes) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [secret for secret in LEAKS if secret in text]


def files_text(folder: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in sorted(folder.rglob("*"))
                   if p.is_file())


class EchoModel:
    """An OpenAI-compatible API on 127.0.0.1 that keeps each prompt and answers with one
    record whose summary is the start of what it was asked (so records hold what a
    model saw)."""

    def __init__(self):
        self.prompts: list[str] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                prompt = body["messages"][0]["content"]
                model.prompts.append(prompt)
                record = {"title": "What the model was shown", "summary": prompt[-3500:],
                          "observation_type": "discovery", "facts": prompt.splitlines()[-20:],
                          "concepts": ["secrets"], "files_touched": []}
                answer = json.dumps({"choices": [{"message": {
                    "role": "assistant", "content": json.dumps({"records": [record]})}}]})
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer.encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def hook(ws: Workspace, script: str, payload: dict | None, *args: str, **env: str) -> str:
    result, _ = ws.hook(script, payload, *args, **env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def every_shim(ws: Workspace, **env: str) -> list[str]:
    """One turn of each agent with the corpus in every field a hook carries (secrets in
    prompts, commands, outputs, JSON keys and summaries; <private> in tool input and
    turn ends); what each printed for the agent."""
    tool = {"command": CORPUS, "notes": PRIVATE_TEXT, SECRETS[0][1]: SECRETS[1][1]}
    printed = []
    kiro = {"cwd": str(ws.project)}
    printed.append(hook(ws, "kirolearn-kiro-cli", {**kiro, "hook_event_name": "agentSpawn"},
                        **env))
    printed.append(hook(ws, "kirolearn-kiro-cli", {**kiro, "hook_event_name": "userPromptSubmit",
                                                   "prompt": CORPUS}, **env))
    hook(ws, "kirolearn-kiro-cli", {**kiro, "hook_event_name": "postToolUse",
                                    "tool_name": "execute_bash", "tool_input": tool,
                                    "tool_response": {"success": True, "result": [CORPUS]}},
         **env)
    hook(ws, "kirolearn-kiro-cli", {**kiro, "hook_event_name": "stop",
                                    "assistant_response": PRIVATE_TEXT}, **env)
    printed.append(hook(ws, "kirolearn-kiro-ide", None, "promptSubmit", USER_PROMPT=CORPUS,
                        **env))
    hook(ws, "kirolearn-kiro-ide", None, "postToolUse", USER_PROMPT=json.dumps(
        {"toolName": "fsWrite", "toolArgs": tool, "toolResult": CORPUS, "toolSuccess": True}),
         **env)
    hook(ws, "kirolearn-kiro-ide", None, "agentStop", USER_PROMPT=PRIVATE_TEXT + CORPUS, **env)
    claude = {"session_id": "c-secrets", "transcript_path": "/x/c.jsonl", "cwd": str(ws.project)}
    printed.append(hook(ws, "kirolearn-claude-code", {**claude, "hook_event_name": "SessionStart",
                                                      "source": "startup"}, **env))
    printed.append(hook(ws, "kirolearn-claude-code", {
        **claude, "hook_event_name": "UserPromptSubmit", "prompt": CORPUS}, **env))
    hook(ws, "kirolearn-claude-code", {**claude, "hook_event_name": "PostToolUse",
                                       "tool_name": "Bash", "tool_input": tool,
                                       "tool_response": {"stdout": CORPUS, "stderr": ""}},
         **env)
    hook(ws, "kirolearn-claude-code", {**claude, "hook_event_name": "Stop",
                                       "last_assistant_message": PRIVATE_TEXT}, **env)
    return printed


def viewer_pages(base: Path) -> str:
    """Every page and API answer of the viewer that shows stored text."""
    app = TestClient(create_app(paths.Home(base), load_token(paths.Home(base))), base_url="http://127.0.0.1")
    app.cookies.set(COOKIE, load_token(paths.Home(base)))
    shown = []
    for path in ("/", "/live", "/memories", "/sessions", "/retrievals", "/export"):
        answer = app.get(path)
        assert answer.status_code == 200, path
        shown.append(answer.text)
    api = {name: app.get(f"/api/{name}").json()
           for name in ("events?limit=500", "memories", "retrievals")}
    shown.append(json.dumps(api))
    shown += [app.get(f"/memories/{r['record_id']}").text for r in api["memories"]["records"]]
    for event in api["events?limit=500"]["events"]:
        shown.append(app.get(f"/events/{event['event_id']}").text)
        shown.append(app.get(f"/sessions/{event['session_id']}").text)
    shown += [app.get(f"/retrievals/{r['id']}").text for r in api["retrievals"]["retrievals"]]
    return "\n".join(shown)


@pytest.mark.timeout(300)
def test_no_secret_of_the_corpus_rests_or_leaves_anywhere(home, tmp_path, monkeypatch):
    ws = Workspace(tmp_path)
    model = EchoModel()
    monkeypatch.setenv("KIROLEARN_EXTRACTION_STRATEGY", "openai")
    monkeypatch.setenv("KIROLEARN_EXTRACTION_LLM_URL", model.url)
    monkeypatch.setenv("KIROLEARN_EXTRACTION_LLM_MODEL", "echo")
    try:
        # The daemon is away: every hook is spooled, scrubbed before the first byte.
        every_shim(ws, KIROLEARN_AUTOSTART="0")
        spooled = sorted(paths.Home(home).spool_dir.glob("*.json"))
        assert len(spooled) == 11
        assert leaked(files_text(paths.Home(home).spool_dir)) == []
        assert "[REDACTED:aws-access-key]" in files_text(paths.Home(home).spool_dir)

        kl("start", check=True)
        wait_for(lambda: not any(paths.Home(home).spool_dir.glob("*.json")), 30, 0.1,
                 "the spool drained")
        printed = every_shim(ws)

        async def save_all(client) -> list:
            done = []
            for i, (_, text, _) in enumerate(SECRETS[:40]):
                done.append(await call(client, "save_observation", title=f"{text[:150]}",
                                       summary=f"Deploy notes {i}: {text}",
                                       observation_type="decision", facts=[text[:500]],
                                       concepts=["deploy"], files_touched=["deploy.sh"]))
            done.append(await call(client, "save_observation", title="Private notes",
                                   summary=PRIVATE_TEXT, observation_type="decision",
                                   facts=[text for _, text in PRIVATE], concepts=["private"],
                                   files_touched=[]))
            done.append(await call(client, "recall", query="deploy notes AKIA password"))
            return done

        answers = serve(ws, save_all)
        assert not any(is_error for is_error, _ in answers[:-1])
        printed += [text for _, text in answers]

        def extracted() -> bool:
            stats = json.loads(kl("stats", "--json", check=True).stdout)
            batches = stats.get("batches") or {}
            return len(model.prompts) >= 2 and not batches.get("ready") and not batches.get(
                "leased")
        wait_for(extracted, 60, 0.2, "the model's batches")
        printed.append(hook(ws, "kirolearn-kiro-cli", {
            "cwd": str(ws.project), "hook_event_name": "userPromptSubmit",
            "prompt": "what was the model shown about the deploy notes"}))
        assert any(printed), "no context came back at all"

        where = {
            "what the agent was given": "\n".join(printed),
            "the model's prompts": "\n".join(model.prompts),
            "the export": kl("export", check=True).stdout,
            "the viewer": viewer_pages(home),
            "the database (running)": paths.Home(home).db_path.read_bytes(),
            "the WAL (running)": Path(f"{paths.Home(home).db_path}-wal").read_bytes(),
            "the retrieval log": json.dumps(sqlite3.connect(paths.Home(home).db_path).execute(
                "SELECT context, error FROM retrievals").fetchall()),
        }
        kl("stop", check=True)
        where.update({
            "the database (stopped)": paths.Home(home).db_path.read_bytes(),
            "the logs": files_text(paths.Home(home).log_dir),
            "the spool": files_text(paths.Home(home).spool_dir),
            "the quarantine": files_text(paths.Home(home).quarantine_dir)
            if paths.Home(home).quarantine_dir.exists() else "",
        })
        assert {place: leaked(text) for place, text in where.items() if leaked(text)} == {}
        assert "[REDACTED:private]" in where["the model's prompts"]
        assert "[REDACTED:password]" in where["the export"]
    finally:
        kl("stop")
        model.close()


# -- text stored before a rule caught it ---------------------------------------------------

OLD = {"aws": "AKIAQWERTYUIOPASDFGH", "hf": "hf_" + "Q" * 34, "pw": "Tr0ub4dor&3zz"}


def plant(base: Path, namespace: str) -> str:
    """A record, its event and a logged retrieval stored raw, as by a version whose rules
    missed them (the daemon stopped): the record's id."""
    text = f"deploy used key {OLD['aws']} and token {OLD['hf']} with DB_PASSWORD={OLD['pw']}"
    event = contract.make_event("prompt", {"type": "text", "content": text}, namespace=namespace,
                                actor_id="tester", session_id="s-old", surface="kiro-cli",
                                version="0", client_id="test")
    record = {"record_id": contract.new_record_id(), "namespace": namespace,
              "title": f"Deploy with {OLD['aws']}", "summary": text, "facts": [text],
              "concepts": ["deploy"], "files_touched": [], "observation_type": "decision",
              "strategy": "heuristic", "source_event_ids": [event["event_id"]],
              "created_at": contract.now_iso()}
    paths.Home(base).ensure_layout()
    conn = db.connect_writer(paths.Home(base).db_path)
    conn.execute("BEGIN")
    body_json = contract.canonical_json(event["body"])
    writes.insert_event(conn, contract.stored_form(event, body_json, 0, event["content_hash"]), 0)
    writes.insert_record(conn, record)  # scrubbed as it is stored today; as it was then:
    conn.execute("UPDATE memory_records SET title = $1, summary = $2, facts_json = $3,"
                 " facts_text = $2, scrubbed_with = NULL",
                 (record["title"], text, json.dumps([text])))
    writes.log_retrieval(conn, event["event_id"], namespace, [record["record_id"]], 1.0, "ok")
    conn.execute("UPDATE retrievals SET context = $1", (f"## Prior\n{text}",))  # as then
    conn.execute("COMMIT")
    conn.close()
    return record["record_id"]


def old(data: str | bytes) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [name for name, secret in OLD.items() if secret in text]


def stored_record(base: Path, record_id: str) -> tuple[str, str | None]:
    """A record's title as stored, and the version of the rules that scrubbed it."""
    with contextlib.closing(sqlite3.connect(paths.Home(base).db_path)) as conn:
        return conn.execute("SELECT title, scrubbed_with FROM memory_records"
                            " WHERE record_id = ?", (record_id,)).fetchone()


def test_each_exit_scrubs_what_older_rules_let_through_and_scrub_purges_it(home, tmp_path):
    """Records are scrubbed again by storage as it starts (their rules' version is not
    today's); the rest stored (events, the retrieval log) is scrubbed at each exit, and
    in place by ``kirolearn scrub``."""
    ws = Workspace(tmp_path)
    record_id = plant(home, ws.namespace)
    assert old(paths.Home(home).db_path.read_bytes()) == ["aws", "hf", "pw"]
    kl("start", check=True)
    try:
        today = privacy.version()
        assert wait_for(lambda: stored_record(home, record_id)[1] == today and
                        stored_record(home, record_id), 30, 0.05,
                        "the record scrubbed again with today's rules"
                        )[0] == "Deploy with [REDACTED:aws-access-key]"
        wait_for(lambda: "1 record(s) scrubbed again with today's privacy rules: 7 redaction"
                 in (paths.Home(home).log_dir / "storage.log").read_text(), 10, 0.05,
                 "storage's log line")
        logs = sorted(paths.Home(home).log_dir.iterdir())
        assert {log.name: log.stat().st_mode & 0o777 for log in logs} == {
            log.name: 0o600 for log in logs} and len(logs) > 3
        exits = {
            "export": kl("export", check=True).stdout,
            "viewer": viewer_pages(home),
            "get_records": json.dumps(retrieval("get_records", {
                "ids": [record_id], "namespaces": [ws.namespace]})),
            "search": json.dumps(retrieval("search", {"query": "deploy key token",
                                                      "namespaces": [ws.namespace],
                                                      "records": True})),
            "cli search": kl("search", "deploy key", "--namespace", ws.namespace).stdout,
            "mcp": serve(ws, lambda client: call(client, "get_records", ids=[record_id]))[1],
            "prompt context": hook(ws, "kirolearn-kiro-cli", {
                "cwd": str(ws.project), "hook_event_name": "userPromptSubmit",
                "prompt": "which key did the deploy use"}),
        }
        assert "Deploy with [REDACTED:aws-access-key]" in exits["mcp"]
        assert "[REDACTED:password]" in exits["prompt context"]
        assert {name: old(text) for name, text in exits.items() if old(text)} == {}

        dry = kl("scrub", "--dry-run", check=True).stdout
        assert dry.startswith("would redact ") and "events: " in dry
        assert "memory_records: " not in dry  # scrubbed again as storage started
        assert old(paths.Home(home).db_path.read_bytes()) == ["aws", "hf", "pw"]  # nothing changed
        done = kl("scrub", check=True).stdout
        assert done.replace("redacted", "would redact", 1) == dry
        assert "retrievals: " in done and "aws-access-key" in done and "password" in done
        again = kl("scrub", check=True).stdout
        assert again.strip() == "redacted 0 secret(s); nothing was found"
        wait_for(lambda: not old(paths.Home(home).db_path.read_bytes()
                                 + Path(f"{paths.Home(home).db_path}-wal").read_bytes()), 10, 0.1,
                 "the old secrets gone from the database file, its index and its WAL")
        [record] = retrieval("get_records", {"ids": [record_id], "namespaces": [ws.namespace]}
                             )["records"]
        assert record["title"] == "Deploy with [REDACTED:aws-access-key]"
    finally:
        kl("stop", check=True)
    assert old(paths.Home(home).db_path.read_bytes()) == []


def test_the_model_prompt_is_scrubbed_as_it_leaves():
    events = [{"kind": "prompt", "valid_time": "", "body": {"type": "text", "content": text}}
              for _, text, _ in SECRETS[:60]]
    prompt = llm.build_prompt(events)
    assert leaked(prompt) == [] and "[REDACTED:" in prompt


def test_log_lines_are_scrubbed(home):
    """Each line a role writes is scrubbed on its way to its log (a key block a role
    printed over several lines is not: roles log values with repr, on one line)."""
    arbiter = Arbiter(paths.Home(home), config.defaults(), 1)
    paths.Home(home).ensure_layout()
    one_line = [(text, secret) for _, text, secret in SECRETS if "\n" not in text]
    lines = "".join(f"{text}\n" for text, _ in one_line).encode()
    arbiter._pipe_output(Process("ingest", "ingest"), io.BytesIO(lines))
    arbiter.ctx.term()
    log = paths.Home(home).log_dir / "ingest.log"
    written = log.read_text()
    assert [secret for _, secret in one_line if secret in written] == []
    assert written.count("\n") == len(one_line)
