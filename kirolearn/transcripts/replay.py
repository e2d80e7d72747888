"""A transcript read (``Transcript``), made into the events its hooks would have sent
(``events``), and the stored sessions of an agent ready to import (``sessions``)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kirolearn import __version__, capture, contract, control, paths, project
from kirolearn.code import files
from kirolearn.shims import common

CLIENT_ID = "import-sessions"
STARTED = "imported"  # what a session's start and end notes say it was


@dataclass
class Transcript:
    """One session an agent stored, read: where from, and its hooks in order (a list; or,
    read by ``streamed``, handed on as they are found, ``Stream``)."""

    agent: str
    path: Path
    session_id: str = ""
    cwd: str = ""
    branch: str | None = None
    hooks: list[tuple[str, common.Hook]] = field(default_factory=list)  # (ISO time, hook)
    problems: list[str] = field(default_factory=list)  # "line N: why"
    last_time: str | None = None

    def __post_init__(self) -> None:
        handed_to = getattr(_streaming, "queue", None)
        if handed_to is not None:  # read by ``streamed``: each hook goes on at once
            self.hooks = Stream(handed_to, self)  # type: ignore[assignment]

    def add(self, when: object, hook: common.Hook) -> None:
        """A hook at ``when`` (a transcript's time; the one before it when it has none)."""
        moment = when if isinstance(when, str) and _is_time(when) else self.last_time
        if moment is None:
            self.problems.append(f"a {hook.name or hook.role} with no time before it, left out")
        else:
            self.last_time = moment
            self.hooks.append((moment, hook))


class Replay:
    """What a reader keeps while it reads one transcript, for its handlers (a table of
    small methods, one per kind of line): the tool calls waiting for their results, the
    turn under way, the time of the latest line; and ``hook``, a payload read by the
    agent's own shim, as the live hook would have been."""

    session_key = "session_id"  # what the agent's hook payloads call the session's id

    def __init__(self, transcript: Transcript, read: Callable[[dict], common.Hook]) -> None:
        self.transcript = transcript
        self.read = read
        self.calls: dict[str, dict] = {}  # a call's id → the call, until its result
        self.reply: str | None = None  # the turn's last reply; None: no turn under way
        self.prompted = ""  # the turn's prompt
        self.line_time: str | None = None  # the latest line's time

    def seen(self, when: object) -> None:
        """A line of this time was read."""
        self.line_time = when if isinstance(when, str) else self.line_time

    def hook(self, payload: dict, when: object) -> None:
        self.transcript.add(when, self.read({self.session_key: self.transcript.session_id,
                                             "cwd": self.transcript.cwd, **payload}))

    def problem(self, number: int, what: str) -> None:
        self.transcript.problems.append(f"line {number}: {what}")

    def prompt(self, payload: dict, text: str, when: object) -> None:
        """A prompt (its hook's ``payload``) begins a turn, ending the one before."""
        self.end_turn()
        self.hook(payload, when)
        self.reply, self.prompted = "", text

    def end_turn(self, said: object = None) -> None:
        """The turn under way ends (with what the agent ``said`` last, when known)."""
        if self.reply is not None:
            self.hook(self.turn_end(said if isinstance(said, str) else self.reply),
                      self.line_time)
        self.reply, self.prompted = None, ""

    def turn_end(self, reply: str) -> dict:
        """The hook of a turn's end, in the agent's words."""
        return {"hook_event_name": "Stop", "last_assistant_message": reply}

    def session_end(self) -> dict | None:
        """The hook of a session's end, in the agent's words (None: it has none)."""
        return {"hook_event_name": "SessionEnd", "reason": "import"}

    def finish(self) -> Transcript:
        """The last turn ends, and the session (when anything was read of it)."""
        self.end_turn()
        end = self.session_end()
        if self.transcript.hooks and end is not None:
            self.hook(end, self.line_time)
        return self.transcript


_streaming = threading.local()  # the queue a reader on ``streamed``'s thread hands hooks to
STREAM_HOOKS = 64  # hooks read ahead of the events made of them, at most


class Stream:
    """A transcript's hooks handed on as its reader finds them (to ``streamed``): what a
    reader asks of its list (``append``, whether it holds any) and nothing kept."""

    def __init__(self, handed_to: queue.Queue, transcript: Transcript) -> None:
        self.handed_to = handed_to
        self.transcript = transcript
        self.count = 0

    def append(self, item: tuple[str, common.Hook]) -> None:
        self.count += 1
        self.handed_to.put(("hook", self.transcript, item))

    def __bool__(self) -> bool:
        return self.count > 0

    def __len__(self) -> int:
        return self.count


def streamed(transcripts: Iterator[Transcript]
             ) -> Iterator[tuple[Transcript, tuple[str, common.Hook] | None]]:
    """Each transcript's hooks as its reader finds them, read on a thread of its own at
    most ``STREAM_HOOKS`` ahead, so that no whole transcript is held: (transcript, hook)
    for each, then (transcript, None) once it is read. A reader's error is raised here."""
    handed: queue.Queue = queue.Queue(STREAM_HOOKS)

    def read() -> None:
        _streaming.queue = handed
        try:
            for transcript in transcripts:
                handed.put(("done", transcript, None))
        except BaseException as exc:  # handed to the reading side
            handed.put(("error", exc, None))
        finally:
            handed.put(("end", None, None))

    threading.Thread(target=read, name="transcripts", daemon=True).start()
    while True:
        what, item, hook = handed.get()
        if what == "end":
            return
        if what == "error":
            raise item
        yield item, hook


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def stored_files(folder: Path, pattern: str) -> list[tuple[float, Path]]:
    """The regular files below ``folder`` whose path from it matches ``pattern``
    (``fnmatch`` per folder; a leading ``**/``: at any depth), with the time each was
    last changed. A transcript folder is untrusted: no link is followed (a link loop or a
    link out of it costs nothing), a FIFO or device is no transcript, and what cannot be
    read is passed over."""
    parts = pattern.split("/")
    anywhere = parts[0] == "**"
    if anywhere:
        parts = parts[1:]
    found: list[tuple[float, Path]] = []
    for top, folders, names in os.walk(folder, followlinks=False):
        depth = len(Path(top).relative_to(folder).parts)
        if not anywhere:
            if depth >= len(parts) - 1:
                folders.clear()
            if depth != len(parts) - 1 or not all(
                    fnmatch.fnmatchcase(name, part) for name, part in
                    zip(Path(top).relative_to(folder).parts, parts, strict=False)):
                continue
        for name in names:
            if fnmatch.fnmatchcase(name, parts[-1]):
                try:
                    found_stat = os.lstat(os.path.join(top, name))
                except OSError:
                    continue
                if stat.S_ISREG(found_stat.st_mode):
                    found.append((found_stat.st_mtime, Path(top) / name))
    return found


def json_lines(path: Path, transcript: Transcript) -> Iterator[tuple[int, dict]]:
    """Each line of a JSON Lines transcript that is a JSON object, with its number; any
    other (a line cut short by a crash, say) is noted among its problems. Read a line at
    a time, and only as a regular file (``code.files``: a FIFO or a link is not read)."""
    fd = files.open_regular(str(path))
    if fd is None:
        transcript.problems.append("cannot be read: not a regular file")
        return
    with os.fdopen(fd, "rb") as file:
        for number, raw in enumerate(file, 1):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                transcript.problems.append(f"line {number}: not JSON")
                continue
            if isinstance(item, dict):
                yield number, item
            else:
                transcript.problems.append(f"line {number}: not a JSON object")


def event_id(transcript: Transcript, ms: int, place: int) -> str:
    """The same ULID for the same event of the same session, every run."""
    key = f"{transcript.agent}:{transcript.session_id}:{place}"
    return contract.ulid_of(ms, hashlib.sha256(key.encode()).digest())


def _ms(when: str) -> int:
    return max(0, int(datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp() * 1000))


class Events:
    """A session's events, as its hooks would have sent them (``common.answer``), made a
    hook at a time (``feed``)."""

    def __init__(self, transcript: Transcript, here: project.Project, actor: str) -> None:
        self.transcript = transcript
        self.here = here
        self.actor = actor
        self.made = 0
        self.last_ms = -1
        self.prompt_id: str | None = None

    def _event(self, kind: str, body: dict, when: str, parent: str | None = None) -> dict:
        transcript, here = self.transcript, self.here
        made = contract.make_event(
            kind, common.carried(kind, body), namespace=here.namespace(self.actor),
            actor_id=self.actor, session_id=transcript.session_id[:128],
            surface=transcript.agent, version=__version__, client_id=CLIENT_ID,
            project_path=here.checkout, parent_event_id=parent,
            valid_time=when.replace("Z", "+00:00"),
            branch=transcript.branch and transcript.branch[:255])
        # ids in the session's order, however many of its events share a millisecond
        self.last_ms = max(_ms(when), self.last_ms + 1)
        made["event_id"] = event_id(transcript, self.last_ms, self.made)
        self.made += 1
        return made

    def feed(self, when: str, hook: common.Hook) -> list[dict]:
        """The events of one hook."""
        if hook.role in ("start", "end"):
            said = "started" if hook.role == "start" else "ended"
            return [self._event("note", common.text_body(
                f"{self.transcript.agent} session {said} ({STARTED})"), when)]
        if hook.role == "prompt":
            prompt = self._event("prompt", common.text_body(hook.text), when)
            self.prompt_id = prompt["event_id"]
            return [prompt]
        if hook.role == "tool":
            return [self._event("tool_use", body, when, self.prompt_id) for body in hook.tools]
        if hook.role == "turn_end":
            return [self._event("session_summary", common.text_body(hook.text), when,
                                self.prompt_id)]
        return []


def events(transcript: Transcript, here: project.Project, actor: str) -> list[dict]:
    """The session's events, as its hooks would have sent them (``common.answer``)."""
    made = Events(transcript, here, actor)
    return [event for when, hook in transcript.hooks for event in made.feed(when, hook)]


@dataclass
class Session:
    """A transcript imported: how many events it made, or why it is left alone."""

    transcript: Transcript
    sent: int = 0  # events made of it
    left_out: str | None = None  # why it is not imported


def imported(agent_module, user_home: Path, home: paths.Home, actor: str,
             only: project.Project | None = None) -> Iterator[dict | Session]:
    """The agent's stored sessions (those of ``only``'s project, when given) as the events
    their hooks would have sent, made as each transcript is read (no whole transcript is
    held: ``streamed``), then each ``Session`` once read. A session is left out where
    there is nothing to import, where capture is off for its project, or where its hooks
    captured it live (the store holds events of it from another client than this
    import: the daemon is asked, control.Timeout or protocol.RemoteError)."""
    under_way: dict[int, tuple[Session, Events | None]] = {}
    for transcript, hook in streamed(agent_module.transcripts(user_home)):
        if id(transcript) not in under_way:
            session = Session(transcript)
            under_way[id(transcript)] = (session, _start(session, home, actor, only)
                                         if hook is not None else None)
        session, made = under_way[id(transcript)]
        if hook is None:
            del under_way[id(transcript)]
            if not session.sent and session.left_out is None:
                session.left_out = "nothing to import"
            yield session
        elif made is not None:
            for event in made.feed(*hook):
                session.sent += 1
                yield event


def _start(session: Session, home: paths.Home, actor: str,
           only: project.Project | None) -> Events | None:
    """Whether a session's events are made (its first hook read): its project, whether
    capture is on there, whether its hooks captured it live."""
    transcript = session.transcript
    if not transcript.session_id or not transcript.cwd:
        session.left_out = "nothing to import"
        return None
    here = project.resolve_project(transcript.cwd, override="")
    if only is not None and here.project_id != only.project_id:
        session.left_out = "another project's"
        return None
    session.left_out = capture.why_off(here.root, transcript.cwd, home)
    if session.left_out is not None:
        return None
    namespace = here.namespace(actor)
    stored = control.call("retrieval", "session_events", {
        "namespace": namespace, "session_ids": [transcript.session_id[:128]],
        "not_from": CLIENT_ID}, timeout_ms=control.LOOKUP_MS, home=home)["sessions"]
    if stored:
        session.left_out = "captured live by its hooks"
        return None
    return Events(transcript, here, actor)
