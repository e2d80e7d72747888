"""What the tests share besides fixtures: the CLI as a user runs it, events, the agents'
workspace and shims, and one way to wait.

``wait_for`` is the only wait: it polls a predicate for a positive signal (a row, a
log line, a counter) and fails loudly, naming what it waited for, when the time runs
out. Every other wait here is built on it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from kirolearn import contract, control, db, paths, project
from kirolearn.db import writes
from kirolearn.supervisor.states import READY

KL = [sys.executable, "-m", "kirolearn"]
BIN = Path(sys.executable).parent
AGENT_BIN = Path(__file__).parent / "e2e" / "node_modules" / ".bin"  # the real agent CLIs
NAMESPACE = "/actor/tester/project/" + "a" * 64 + "/"
ACTOR = "tester"


def wait_for(predicate, timeout: float = 30, interval: float = 0.05,
             message: str = "condition"):
    """The first truthy value of ``predicate()``, polled every ``interval`` seconds;
    AssertionError naming ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


def wait_for_count(count, target: int, still: float = 30, interval: float = 0.05,
                   message: str = "count") -> int:
    """Wait until ``count()`` reaches ``target``, for as long as it keeps moving: on a
    busy machine a slow run is no failure, one that stopped for ``still`` seconds is."""
    last, moved = count(), time.monotonic()
    while last < target:
        if time.monotonic() - moved >= still:
            raise AssertionError(f"{message}: stuck at {last} of {target} for {still} s"
                                 f"{logs_tail()}")
        time.sleep(interval)
        now = count()
        if now != last:
            last, moved = now, time.monotonic()
    return last


def logs_tail(lines: int = 12) -> str:
    """The last lines of each role's log in the test's home: what a stuck wait says of
    why (empty outside a home)."""
    try:
        logs = sorted(here().log_dir.glob("*.log"))
    except Exception:  # no home set up: nothing to tell
        return ""
    told = []
    for log in logs:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        told.append(f"\n--- {log.name}\n" + "\n".join(tail))
    return "".join(told)


def here() -> paths.Home:
    """The test's home (its ``KIROLEARN_HOME``)."""
    return paths.Home.current()


def processes_using(home: Path) -> list[int]:
    """Pids of live processes whose environment points at this home."""
    return processes_with(f"KIROLEARN_HOME={home}")


def processes_with(variable: str) -> list[int]:
    """Pids of live processes (but this one) whose environment holds ``NAME=value``."""
    needle = f"{variable}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().split()[2]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def kl(*args: str, input: str | None = None, timeout: float = 60, check: bool = False,
       env: dict | None = None, cwd: str = "/tmp") -> subprocess.CompletedProcess:
    """Run the kirolearn CLI as a user would."""
    result = subprocess.run([*KL, *args], input=input, capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"kirolearn {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def status() -> dict:
    return json.loads(kl("status", "--json").stdout)


def all_up(roles: list[dict]) -> bool:
    """Every role RUNNING, or WAITING to be started on demand (the viewer)."""
    return all(r["state"] in READY for r in roles)


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


# -- the agents' side ---------------------------------------------------------------------------

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


# -- the MCP server, as an agent drives it --------------------------------------------------

def serve(ws: Workspace, scenario: Callable[[Client], Awaitable[object]], *args: str,
          cwd: Path | None = None, **env: str) -> object:
    """Start ``kirolearn mcp`` as the agent would (in cwd, default the project) and run
    scenario(client) against it; returns what the scenario returns."""
    environment = {k: v for k, v in ws.env(**env).items()
                   if k.startswith("KIROLEARN_") or k in ("HOME", "USER", "LOGNAME", "PATH")}
    server = StdioServerParameters(command=str(BIN / "kirolearn"), args=["mcp", *args],
                                   env=environment, cwd=str(cwd or ws.project))

    async def main() -> object:
        async with Client(server) as client:
            return await scenario(client)

    return anyio.run(main)


async def call(client: Client, tool: str, fenced: bool = False, **arguments: object
               ) -> tuple[bool, str]:
    """(is_error, text) of one tool call: stored text comes fenced as recalled notes
    (``search.context.fenced``), given here without the fence unless ``fenced``."""
    from kirolearn.search.context import FENCE, PREAMBLE

    result = await client.call_tool(tool, arguments)
    text = "\n".join(block.text for block in result.content)
    head, tail = f"<{FENCE}>\n{PREAMBLE}\n\n", f"\n</{FENCE}>"
    if not fenced and text.startswith(head):
        assert text.count(tail) == 1 and tail in text, text
        inner, _, after = text[len(head):].partition(tail)
        text = inner + after
    return result.is_error, text


def first_run(count: int, namespace: str) -> tuple[list[dict], list[tuple[str, object]]]:
    """A real agent's first run, once ``count`` events are stored: the events (checked to
    be one session, in namespace) and each as (kind, its text or its tool's name)."""
    events = wait_events(count)
    assert len({e["session_id"] for e in events}) == 1, events
    assert all(e["namespace"] == namespace for e in events), events
    return events, [(e["kind"], e["body"].get("content")
                     or e["body"].get("data", {}).get("tool_name")) for e in events]


def wait_remembered(namespace: str, timeout: float = 60) -> None:
    """Until a new session there would be taught the last one: a record of it, and
    where it left off (its checkpoint, made once its last turn is in)."""
    wait_records(namespace, timeout)
    wait_for(lambda: "## Where the last session left off" in retrieval(
        "session_context", {"namespace": namespace})["context"], timeout, 0.2,
        "the last session's checkpoint")


def taught(bodies: list[dict], first_prompt: str) -> None:
    """The model's requests in a later run hold what the first run taught: the prompt's
    context and the session's (where the first run left off)."""
    sent = json.dumps(bodies)
    assert "## Prior observations from kirolearn" in sent
    assert "## Where the last session left off (from kirolearn)" in sent
    assert f"Task: {first_prompt}" in sent


def imported_like_live(agent: str, env: dict, live: str, plain: Path, title: str) -> None:
    """``import-sessions`` of the agent's transcripts: the sessions its hooks captured
    live (those of the ``live`` namespace) are left alone, and the one run in ``plain``
    (a project without hooks) is made into the record the hooks made of the same run."""
    done = kl("import-sessions", "--agent", agent, env=env, cwd=str(plain), check=True)
    assert f"imported 1 session(s) of {agent}" in done.stdout, done.stdout
    assert "captured live by its hooks" in done.stdout, done.stdout
    namespace = project.resolve_project(plain, home=env["HOME"], override="").namespace(ACTOR)

    def titled(where: str) -> list[dict]:
        lines = map(json.loads, kl("export", check=True).stdout.splitlines())
        return [r for r in lines if "record_id" in r and r["namespace"] == where
                and r["title"] == title]

    [made] = wait_for(lambda: titled(namespace), 30, 0.2, "the imported session's record")
    fields = ("title", "summary", "observation_type", "facts", "concepts", "files_touched")
    assert {k: made[k] for k in fields} == {k: titled(live)[0][k] for k in fields}


def stored_prompts() -> list[str]:
    return [e["body"]["content"] for e in stored_events() if e["kind"] == "prompt"]


# The agents whose pinned build is Linux x64's (tests/e2e/package.json optionalDependencies).
LINUX_X64 = pytest.mark.skipif(
    (platform.system(), platform.machine()) != ("Linux", "x86_64"),
    reason="tests/e2e/package.json pins this agent's Linux x64 build")


def agent_cli(name: str) -> Path:
    """A pinned agent CLI (``tests/e2e/package.json``), which the test command installs:
    a command npm links, or a path under node_modules."""
    cli = AGENT_BIN / name if "/" not in name else AGENT_BIN.parent / name
    assert cli.exists(), (f"{cli} is not installed; run the README's test command (it runs:"
                          " npm ci --prefix tests/e2e)")
    return cli


@contextmanager
def scripted_api(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """A model API stood in by handler on 127.0.0.1 (a free port); the request bodies it
    keeps are in ``server.bodies``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class ApiHandler(BaseHTTPRequestHandler):
    """A scripted model API's request handler: quiet, and one way to answer."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, content_type: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeAnthropic(ApiHandler):
    """Answers like Anthropic's Messages API, streamed or not: the tool call
    ``tool_call`` picks for a request, else "done". Subclasses pick the calls."""

    def tool_call(self, body: dict, results: list[str]) -> tuple[str, dict] | None:
        """The tool call to answer body with, given the results of the calls before it
        in the turn (none: "done")."""
        return None

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        self._send("application/json", b"{}")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self._send("application/json", json.dumps(
                {"input_tokens": 10} if "count_tokens" in self.path else {}).encode())
            return
        body = json.loads(raw)
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        results = [json.dumps(b.get("content")) for m in body.get("messages", [])
                   if isinstance(m.get("content"), list) for b in m["content"]
                   if isinstance(b, dict) and b.get("type") == "tool_result"]
        call = self.tool_call(body, results)
        if call:
            block = {"type": "tool_use", "id": "toolu_01", "name": call[0], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call[1])}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "done"}
            stop = "end_turn"
        message = {"id": "msg_01", "type": "message", "role": "assistant",
                   "model": body.get("model", "claude"), "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not body.get("stream"):
            final = {**block, **({"input": call[1]} if call else {"text": "done"})}
            self._send("application/json", json.dumps(
                {**message, "content": [final], "stop_reason": stop}).encode())
            return
        events = [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {
                "stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        self._send("text/event-stream", "".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode())


class FakeChatCompletions(ApiHandler):
    """Answers like an OpenAI-compatible Chat Completions API, streamed: the tool call
    ``tool_call`` picks for a request, else "done". Subclasses pick the calls."""

    def tool_call(self, body: dict, tools: list[str], results: list[str]
                  ) -> tuple[str, dict] | None:
        """The tool call to answer body with, given the tools it offers and the results
        of the calls before it in the turn (none: "done")."""
        return None

    def do_GET(self) -> None:
        self._send("application/json", json.dumps(
            {"object": "list", "data": [{"id": "test-model", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        messages = body.get("messages") or []
        turn = max((i for i, m in enumerate(messages) if m.get("role") == "user"
                    and not str(m.get("content")).startswith("<hook_context")), default=0)
        results = [str(m.get("content")) for m in messages[turn:] if m.get("role") == "tool"]
        call = self.tool_call(body, tools, results)
        if call is None:
            delta, finish = {"role": "assistant", "content": "done"}, "stop"
        else:
            delta = {"role": "assistant", "content": None, "tool_calls": [{
                "index": 0, "id": f"call_{len(results) + 1}", "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1])}}]}
            finish = "tool_calls"
        chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 1,
                             "total_tokens": 11}}]
        head = {"id": "c1", "object": "chat.completion.chunk", "created": 0,
                "model": "test-model"}
        self._send("text/event-stream", ("".join(
            f"data: {json.dumps({**head, **chunk})}\n\n" for chunk in chunks)
            + "data: [DONE]\n\n").encode())


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


# -- machines of a team: each a KIROLEARN_HOME of its own, the traffic on 127.0.0.1 ----------

def new_machine(machines: list[Path]) -> Path:
    base = Path(tempfile.mkdtemp(prefix="kl-m-", dir="/tmp"))
    machines.append(base)
    return base


def on(base: Path, **extra: str) -> dict:
    """The environment of a command run on the machine whose home is ``base``."""
    return {**os.environ, "KIROLEARN_HOME": str(base), **extra}


def connect(base: Path, address: str, server_key: str) -> str:
    """``kirolearn connect`` on that machine; the command it prints for the daemon's host."""
    out = kl("connect", address, "--server-key", server_key, env=on(base), check=True).stdout
    assert "does not answer yet" in out
    return out.splitlines()[-1].strip()


def allow(command: str, name: str) -> None:
    """Run, on the daemon's host, the ``kirolearn keys add`` a client printed (as ``name``)."""
    assert command.startswith("kirolearn keys add ")
    key = command.rsplit(" ", 1)[1].strip("'")
    kl("keys", "add", "--", name, key, check=True)


def clone(root: Path, origin: str) -> Path:
    """A clone of the team's repository at root, its origin remote as git writes it."""
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text(
        f'[core]\n\tbare = false\n[remote "origin"]\n\turl = {origin}\n'
        '\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
    return root
