"""What every shim does with a hook: build the event, hand it over, print the context.

A shim runs on every hook, inside the agent's turn, so it must be quick and must
never break the agent:

- it always exits 0; stdout carries the context and nothing else; problems go to
  stderr, and only when ``KIROLEARN_DEBUG=1``;
- it waits for the daemon's acknowledgement at most the retrieval budget for a
  prompt (500 ms, ``KIROLEARN_RETRIEVAL_BUDGET_MS``) and ``control.EVENT_MS`` for
  anything else;
- when the daemon is down or does not acknowledge in time, the event goes to the
  spool (one file, written atomically) and the daemon is started in the
  background; ingest drains the spool, and a late acknowledgement only makes a
  duplicate that storage drops by event id. A daemon elsewhere (``kirolearn
  connect``) gets the same budget; its spool is sent there in the background once
  it answers again.

It imports the standard library, pyzmq, msgpack and kirolearn's dependency-light
modules only: start-up is most of what a hook costs (``benchmarks/shim.py``). One
module, long as it is, for the same reason: each module more is an import more on every
hook.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from kirolearn import (
    __version__,
    capture,
    contract,
    control,
    paths,
    project,
    protocol,
    rules,
    spool,
    tooluse,
)

SESSION_IDLE_S = 3600  # a surface without a session-start hook starts anew after this
SESSION_FILES = 50  # the files a session touched that its state keeps (the newest)
SESSION_GIVEN = 500  # the records a session was given that its state keeps (the newest)
STDIN_WAIT_S = 0.05  # how long a shim that may get stdin waits for it
BRIEF_HEADER = "## Project brief (from kirolearn)"  # search.brief.HEADER: a session briefed


def debug(message: str) -> None:
    if os.environ.get("KIROLEARN_DEBUG", "") not in ("", "0"):
        print(f"[kirolearn] {message}", file=sys.stderr)


def prompt_timeout_ms() -> int:
    try:
        return max(1, int(os.environ.get("KIROLEARN_RETRIEVAL_BUDGET_MS", "500")))
    except ValueError:
        return 500


def run(handler: Callable[[], object]) -> int:
    """Call handler(); whatever happens, the agent gets exit status 0."""
    try:
        handler()
    except BaseException as exc:
        if os.environ.get("KIROLEARN_DEBUG", "") not in ("", "0"):
            import traceback

            traceback.print_exc()
        else:
            debug(f"{type(exc).__name__}: {exc}")
    return 0


def run_stdin_hook(handle: Callable[[dict], str]) -> int:
    """The whole of a shim whose agent sends the hook as JSON on stdin: handle(payload)
    returns what goes to stdout."""
    return run(lambda: emit(handle(parse_json_object(read_stdin()))))


def emit(text: str) -> None:
    """Write the context to stdout (UTF-8 whatever the locale)."""
    if text:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()


def read_stdin(wait_s: float | None = None) -> str:
    """All of stdin. With ``wait_s``, give up if nothing arrives in that time (a hook
    runner may leave stdin open and write nothing); a terminal is never read."""
    stream = sys.stdin
    if stream is None or stream.closed:
        return ""
    try:
        if stream.isatty():
            return ""
        fd = stream.fileno()
    except (OSError, ValueError):
        return ""
    if wait_s is not None:
        deadline = time.monotonic() + wait_s
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            deadline = time.monotonic() + wait_s  # data is flowing: keep reading
        return b"".join(chunks).decode("utf-8", "replace")
    return stream.buffer.read().decode("utf-8", "replace")


def parse_json_object(text: str) -> dict:
    """The hook payload as a dict; anything else is an empty payload. A JSON escape of
    a lone surrogate (``"\\ud800"``), which no database can store, becomes "?"."""
    try:
        payload = json.loads(text) if text.strip() else {}
        if "\\ud" in text.lower():
            dumped = json.dumps(payload, ensure_ascii=False)
            payload = json.loads(dumped.encode("utf-8", "replace").decode("utf-8"))
    except ValueError:
        debug("stdin is not JSON; ignored")
        return {}
    return payload if isinstance(payload, dict) else {}


def env_text(name: str) -> str:
    """An environment variable as valid text (bytes that are not UTF-8 become U+FFFD)."""
    value = os.environ.get(name, "")
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def new_session_id() -> str:
    """A random (version 4) UUID, without importing uuid."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _sessions_file(home: paths.Home, key: str) -> Path:
    return home.sessions_dir / f"{project.sha256_hex(key)[:16]}.json"


def load_state(home: paths.Home, key: str) -> dict:
    """The small state kept between hooks of one session (its id, the last prompt)."""
    try:
        state = json.loads(_sessions_file(home, key).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def save_state(home: paths.Home, key: str, state: dict) -> None:
    """Keep the session's state; a disk that cannot take it (full, read-only) costs the
    state, never the hook's event."""
    path = _sessions_file(home, key)
    try:
        paths.ensure_private_dir(path.parent)
        paths.write_private(path, json.dumps({**state, "updated": time.time()}).encode("utf-8"))
    except OSError as exc:
        debug(f"the session's state was not kept: {exc}")


def carried(kind: str, body: dict) -> dict:
    """The body as an event carries it: cut to the contract's size, and a tool use that
    only looks (a read, a search) to an excerpt."""
    limit = (tooluse.EXCERPT_BYTES if kind == "tool_use" and tooluse.only_looks(body)
             else contract.TRUNCATE_BYTES)
    return contract.truncate_body(body, limit)


class Shim:
    """One hook invocation: who, where, and how to reach the daemon."""

    def __init__(self, surface: str, cwd: str | None = None):
        self.surface = surface
        self.home = paths.Home.current()
        self.cwd = cwd or os.getcwd()
        self.project = project.resolve_project(self.cwd)
        self.actor = project.actor_id()
        self.namespace = self.project.namespace(self.actor)
        self.off = capture.why_off(self.project.root, self.cwd, self.home)

    def event(self, kind: str, body: dict, session_id: str,
              parent_event_id: str | None = None) -> dict:
        branch, commit = (None, None) if self.project.is_global else project.git_head(
            self.project.checkout)
        return contract.make_event(
            kind, carried(kind, body), namespace=self.namespace,
            actor_id=self.actor, session_id=session_id[:128], surface=self.surface,
            version=__version__, client_id=os.uname().nodename[:255] or "unknown",
            project_path=self.project.checkout, parent_event_id=parent_event_id,
            branch=branch and branch[:255], commit=commit)

    def post(self, event: dict, retrieve: bool | str = False, hints: dict | None = None
             ) -> tuple[str, list[str]]:
        """Hand the event to the daemon; return the context it sent back ("" if none)
        and the records in it. ``hints``: what the search is told of the session (the
        files in play, or opened, and the records given already). On any failure to
        deliver, the event is spooled instead. Where capture is paused or excluded,
        nothing is sent, spooled or injected."""
        if self.off:
            debug(f"not captured: {self.off}")
            return "", []
        timeout_ms = prompt_timeout_ms() if retrieve else control.EVENT_MS
        try:
            reply = self._request(event, retrieve, timeout_ms, hints or {})
        except protocol.RemoteError as exc:
            if exc.code in (protocol.ErrorCode.INVALID_EVENT, protocol.ErrorCode.TOO_LARGE):
                debug(f"the daemon refused the event: {exc.reason}")
                return "", []  # spooling it would only be refused again
            debug(f"the daemon could not take the event ({exc}); spooled")
            reply = None
        if reply is None:
            self._spool(event)
            return "", []
        if control.remote(self.home) is not None:  # it answers: send what the spool holds
            control.start_in_background(self.home)
        retrieval = reply.get("retrieval") or {}
        context, given = retrieval.get("context"), retrieval.get("record_ids")
        if not isinstance(context, str) or not context:
            return "", []
        return context, [i for i in given if isinstance(i, str)] if isinstance(given, list) else []

    def send_rules(self) -> None:
        """Send the project's rule files that changed since the last session's start
        (``rules``); a daemon that is away or slow costs one try, made again next time."""
        if self.off or self.project.is_global:
            return
        try:
            if not control.listening("ingest", self.home):
                return
            sent = rules.send(self.home, self.project, self.actor, os.path.expanduser("~"))
        except (control.Timeout, protocol.RemoteError, control.BadRemote,
                paths.UnsafeRuntimeDir, OSError) as exc:
            debug(f"the rule files were not sent: {exc}")
            return
        if sent:
            debug(f"rule files sent: {sent}")

    def _request(self, event: dict, retrieve: bool | str, timeout_ms: int,
                 hints: dict) -> dict | None:
        """The daemon's reply, or None when it is not there or not in time."""
        try:
            listening = control.listening("ingest", self.home)
        except (control.BadRemote, paths.UnsafeRuntimeDir) as exc:  # doctor says it too
            debug(str(exc))
            return None
        if not listening:
            debug("the daemon is not running")
            return None
        try:
            body = {**hints, "event": event, "retrieve": retrieve}
            also = project.also_searched(self.project, self.actor)
            if retrieve is True and also is not None and event["kind"] == "prompt":
                body["global_namespace"] = also
            return control.call("ingest", "put_event", body, timeout_ms=timeout_ms,
                                home=self.home)
        except control.Timeout:
            debug(f"no acknowledgement within {timeout_ms} ms")
            return None

    def _spool(self, event: dict) -> None:
        """Spool the event, scrubbed first: nothing secret touches the disk, even while
        the daemon is away (ingest scrubs it again, with the newest rules)."""
        from kirolearn import privacy  # the slow path only: its rules cost a few ms

        privacy.use_saved_rules(self.home)
        path = spool.write(privacy.scrub_event(event), self.home)
        debug(f"spooled {path.name}")
        if os.environ.get("KIROLEARN_AUTOSTART", "1") != "0" and control.start_in_background(
                self.home):
            debug("started the daemon (or, connected, the spool's drain) in the background")


class Session:
    """The session a hook belongs to, and the prompt its tool uses follow.

    Kept in ``sessions/<hash of key>.json`` under the home: the key is the agent's
    own session id where it gives one, otherwise the project (shared by the Kiro
    CLI and IDE shims, as a user switching between them works on one project).
    """

    def __init__(self, shim: Shim, key: str):
        self.home = shim.home
        self.key = key
        self.state = load_state(self.home, key)

    def current(self, session_id: str | None = None, fresh: bool = False) -> str:
        """This session's id: the agent's when given; a new one when fresh, unknown,
        or idle past SESSION_IDLE_S."""
        if session_id:
            self.state["session_id"] = session_id
        else:
            idle = time.time() - float(self.state.get("updated", 0) or 0)
            if fresh or not self.state.get("session_id") or idle > SESSION_IDLE_S:
                self.state = {"session_id": new_session_id()}
        return str(self.state["session_id"])

    @property
    def prompt_event_id(self) -> str | None:
        value = self.state.get("prompt_event_id")
        return value if contract.is_ulid(value) else None

    def listed(self, key: str) -> list[str]:
        """A list the state keeps (``files``: those the session touched, as the project
        names them; ``given``: the records it was given), oldest first."""
        value = self.state.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    def add(self, key: str, values: list[str], most: int) -> None:
        """Add to one of the ``listed``, keeping the newest ``most``."""
        self.state[key] = list(dict.fromkeys([*self.listed(key), *values]))[-most:]

    def count(self, key: str, more: int) -> None:
        """Add to one of the session's counts (``captured``: events sent; ``recalled``:
        records given), which its status line shows (``statusline``)."""
        known = self.state.get(key)
        self.state[key] = (known if isinstance(known, int) else 0) + more

    def save(self, prompt_event_id: str | None = None) -> None:
        if prompt_event_id:
            self.state["prompt_event_id"] = prompt_event_id
        save_state(self.home, self.key, self.state)


def text_body(content: object) -> dict:
    return {"type": "text", "content": content if isinstance(content, str) else ""}


def tool_body(tool_name: object, tool_input: object, tool_response: object) -> dict:
    """The one shape of a tool use: ``{tool_name, tool_input, tool_response}``."""
    name = tool_name if isinstance(tool_name, str) and tool_name else "unknown"
    return {"type": "json", "data": {"tool_name": name, "tool_input": tool_input,
                                     "tool_response": tool_response}}


class Hook(NamedTuple):
    """One agent hook, read from the agent's payload by its shim: what it means for
    memory (``role``) and what it carries. (A NamedTuple: a dataclass would cost every
    hook the import of ``inspect``.)

    Roles: ``start`` (a session begins: a note, and the session's context back),
    ``prompt`` (the prompt, and its context back), ``tool`` (tool uses, as
    ``tool_body`` bodies), ``turn_end`` (the agent's reply, as the turn's summary),
    ``end`` (the session ends: a note), ``pre_tool`` (a tool is about to run, as a
    ``tool_body`` without its response: what is remembered of the lines it reads or
    edits back, nothing sent), ``ignored``.
    """

    role: str
    name: str = ""  # the agent's own name for the hook, for its output
    session_id: str | None = None  # the agent's session id, where it gives one
    cwd: str | None = None
    text: object = None  # the prompt, the reply, or what started or ended the session
    tools: tuple[dict, ...] = ()


def answer(surface: str, hook: Hook, tool_context: bool = False,
           prompt_context: bool = True, why_after: int | None = None) -> str:
    """Post hook's event(s) for surface; return the context for a start or a prompt
    (where the agent reads it: ``prompt_context``), and, where the agent reads context
    after a tool (``tool_context``), what is known of the files a tool use first opened
    in the session ("" otherwise): the shim puts it in its agent's format. An agent that
    reads no context before a tool (``why_after``: the number its reads' ``offset`` gives
    a file's first line) is told why the lines a read of a range read are as they are
    with the read's result."""
    if hook.role == "ignored":
        debug(f"ignored hook {hook.name!r}")
        return ""
    shim = Shim(surface, hook.cwd or None)
    if hook.role == "pre_tool":
        return before_tool(hook, shim) if tool_context else ""
    given = hook.session_id if isinstance(hook.session_id, str) and hook.session_id else None
    session = Session(shim, f"{surface}:{given}" if given else shim.project.project_id)
    session_id = session.current(given, fresh=hook.role == "start" and not given)
    captured = 0 if shim.off else 1  # an event a hook sends (or spools)
    if hook.role == "start":
        return _started(surface, hook, shim, session, session_id, captured)
    if hook.role == "prompt":
        return _prompted(hook, shim, session, session_id, captured, prompt_context)
    context = ""
    if hook.role == "tool":
        context = _tools_used(hook, shim, session, session_id, captured, tool_context,
                              why_after)
    elif hook.role == "turn_end":
        shim.post(shim.event("session_summary", text_body(hook.text), session_id,
                             session.prompt_event_id))
        session.count("captured", captured)
    elif hook.role == "end":
        said = f" ({hook.text})" if isinstance(hook.text, str) and hook.text else ""
        shim.post(shim.event("note", text_body(f"{surface} session ended{said}"), session_id))
        session.count("captured", captured)
    session.save()  # its counts; and a session without ids of the agent's own kept alive
    return context


def _started(surface: str, hook: Hook, shim: Shim, session: Session, session_id: str,
             captured: int) -> str:
    """A session's start: a note, the rule files sent, and the session's context back."""
    session.count("captured", captured)
    session.save()
    said = f" ({hook.text})" if isinstance(hook.text, str) and hook.text else ""
    context, records = shim.post(shim.event(
        "note", text_body(f"{surface} session started{said}"), session_id),
        retrieve="session")
    shim.send_rules()
    session.count("recalled", len(records))
    session.state["briefed"] = BRIEF_HEADER in context  # for the status line
    session.save()
    return context


def _prompted(hook: Hook, shim: Shim, session: Session, session_id: str, captured: int,
              prompt_context: bool) -> str:
    """A prompt, and its context back (searched with the files in play)."""
    event = shim.event("prompt", text_body(hook.text), session_id)
    session.count("captured", captured)
    session.save(prompt_event_id=event["event_id"])  # before: the turn's tools follow it
    in_play = session.listed("files")
    context, records = shim.post(event, retrieve=prompt_context,
                                 hints={"files": in_play} if in_play and prompt_context
                                 else None)
    session.add("given", records, SESSION_GIVEN)
    session.count("recalled", len(records))
    session.save()
    return context


def _tools_used(hook: Hook, shim: Shim, session: Session, session_id: str, captured: int,
                tool_context: bool, why_after: int | None) -> str:
    """Tool uses; with ``tool_context``, what is known of the files one first opened in
    the session back ("" when none), and with ``why_after`` too, why the lines a read of
    a range read are as they are (``why_of``)."""
    contexts = []
    for body in hook.tools:
        event = shim.event("tool_use", body, session_id, session.prompt_event_id)
        session.count("captured", captured)
        opened = [f for f in opened_files(body, shim.project.checkout)
                  if f not in session.listed("files")]
        session.add("files", opened, SESSION_FILES)
        if not (tool_context and opened):
            shim.post(event)
        else:
            context, records = shim.post(event, retrieve=True, hints={
                "opened": opened, "exclude": session.listed("given")})
            session.add("given", records, SESSION_GIVEN)
            session.count("recalled", len(records))
            contexts.append(context)
        if tool_context and why_after is not None:  # with the read's result
            contexts.append(why_of(shim, session, body, why_after))
    return "\n\n".join(c for c in contexts if c)


def before_tool(hook: Hook, shim: Shim) -> str:
    """What is remembered of why the lines the tools are about to read or edit are as
    they are (``why_of``). Nothing is sent to store: the tool's use is, once it has run."""
    session = Session(shim, f"{shim.surface}:{hook.session_id}" if hook.session_id
                      else shim.project.project_id)
    contexts = [why_of(shim, session, body) for body in hook.tools]
    session.save()
    return "\n\n".join(c for c in contexts if c)


def why_of(shim: Shim, session: Session, body: dict, after: int | None = None) -> str:
    """What is remembered of why the lines a tool use reads (a range) or edits (its old
    text, before it runs; not ``after`` it ran, when ``after`` is the number the agent's
    ``offset`` gives a file's first line) are as they are: the retrieval role's
    ``why``, the records of the commits that wrote them, those the session was given
    already in a line each. "" when nothing is, when every one was told the session with
    its lines already, or when the daemon does not say within the prompt's budget."""
    asked = tooluse.lines_asked(body.get("data"), 1 if after is None else after)
    root = shim.project.checkout
    path = None if asked is None else tooluse.relative(asked.path, root)
    if asked is None or path is None or os.path.isabs(path) or (after is not None
                                                                 and asked.text):
        return ""
    try:  # the lines are read where the daemon runs: this machine's own alone
        if (shim.off or shim.project.is_global or control.remote(shim.home) is not None
                or not control.listening("retrieval", shim.home)):
            return ""
        timeout_ms = prompt_timeout_ms()
        reply = control.call("retrieval", "why", {
            "namespaces": [shim.namespace], "checkout": root, "path": path,
            "first": asked.first, "last": asked.last, "text": asked.text[:65536],
            "budget_ms": max(1, timeout_ms - 100), "given": session.listed("given")},
            timeout_ms=timeout_ms, home=shim.home)
    except (*control.Unanswered, control.BadRemote, paths.UnsafeRuntimeDir) as exc:
        debug(f"no why for {path}: {exc}")
        return ""
    told = [i for i in reply.get("record_ids") or [] if isinstance(i, str)]
    if not reply.get("context") or not set(told) - set(session.listed("told_why")):
        return ""
    session.count("recalled", len(set(told) - set(session.listed("given"))))
    session.add("given", told, SESSION_GIVEN)
    session.add("told_why", told, SESSION_GIVEN)
    return reply["context"]


def opened_files(body: dict, root: str | None) -> list[str]:
    """The files a tool use read or edited, as the project names them."""
    action = tooluse.observe(body.get("data"))
    if action.kind not in ("read", "edit"):
        return []
    return list(dict.fromkeys(tooluse.relative(p, root) for p in action.paths))


def fit_context(context: str, limit: int) -> str:
    """The context cut to whole records (``### `` sections) within limit characters."""
    if len(context) <= limit:
        return context
    cut = context.rfind("\n\n### ", 0, limit)
    return context[:cut] if cut > 0 else context[:limit]


def hook_specific_output(hook: str, context: str, limit: int = 9500) -> str:
    """Context as Claude Code (and Codex and Gemini CLI, which copy its format) read it:
    ``{"hookSpecificOutput": {"hookEventName", "additionalContext"}}``. Strings past
    10,000 characters are kept aside in a file, so the context is cut below that."""
    if not context:
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": hook,
                                              "additionalContext": fit_context(context, limit)}})
