"""A transcript read (``Transcript``), made into the events its hooks would have sent
(``events``), and the stored sessions of an agent ready to import (``sessions``)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kirolearn import __version__, capture, contract, control, paths, project
from kirolearn.code import files
from kirolearn.shims import common

CLIENT_ID = "import-sessions"
STARTED = "imported"  # what a session's start and end notes say it was
LOOKUP_SESSIONS = 100  # sessions asked after at once (retrieval's session_events)


@dataclass
class Transcript:
    """One session an agent stored, read: where from, and its hooks in order."""

    agent: str
    path: Path
    session_id: str = ""
    cwd: str = ""
    branch: str | None = None
    hooks: list[tuple[str, common.Hook]] = field(default_factory=list)  # (ISO time, hook)
    problems: list[str] = field(default_factory=list)  # "line N: why"

    def add(self, when: object, hook: common.Hook) -> None:
        """A hook at ``when`` (a transcript's time; the one before it when it has none)."""
        moment = when if isinstance(when, str) and _is_time(when) else (
            self.hooks[-1][0] if self.hooks else None)
        if moment is None:
            self.problems.append(f"a {hook.name or hook.role} with no time before it, left out")
        else:
            self.hooks.append((moment, hook))


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


def events(transcript: Transcript, here: project.Project, actor: str) -> list[dict]:
    """The session's events, as its hooks would have sent them (``common.answer``)."""
    out: list[dict] = []
    prompt_id: str | None = None

    def add(kind: str, body: dict, when: str, parent: str | None = None) -> dict:
        made = contract.make_event(
            kind, common.carried(kind, body), namespace=here.namespace(actor),
            actor_id=actor, session_id=transcript.session_id[:128], surface=transcript.agent,
            version=__version__, client_id=CLIENT_ID, project_path=here.checkout,
            parent_event_id=parent, valid_time=when.replace("Z", "+00:00"),
            branch=transcript.branch and transcript.branch[:255])
        # ids in the session's order, however many of its events share a millisecond
        ms = max(_ms(when), contract.ulid_timestamp_ms(out[-1]["event_id"]) + 1 if out else 0)
        made["event_id"] = event_id(transcript, ms, len(out))
        out.append(made)
        return made

    for when, hook in transcript.hooks:
        if hook.role in ("start", "end"):
            said = "started" if hook.role == "start" else "ended"
            add("note", common.text_body(f"{transcript.agent} session {said} ({STARTED})"),
                when)
        elif hook.role == "prompt":
            prompt_id = add("prompt", common.text_body(hook.text), when)["event_id"]
        elif hook.role == "tool":
            for body in hook.tools:
                add("tool_use", body, when, prompt_id)
        elif hook.role == "turn_end":
            add("session_summary", common.text_body(hook.text), when, prompt_id)
    return out


@dataclass
class Session:
    """A transcript read for import: its events, or why it is left alone."""

    transcript: Transcript
    events: list[dict] = field(default_factory=list)
    left_out: str | None = None  # why it is not imported


def sessions(agent_module, user_home: Path, home: paths.Home, actor: str,
             only: project.Project | None = None) -> Iterator[Session]:
    """The agent's stored sessions (those of ``only``'s project, when given), each read
    and made into events as it is asked for (so that one session at a time is held),
    left out where there is nothing to import, where capture is off for its project,
    or where its hooks captured it live (the daemon is asked: control.Timeout or
    protocol.RemoteError)."""
    for transcript in agent_module.transcripts(user_home):
        session = Session(transcript)
        if not transcript.session_id or not transcript.hooks:
            session.left_out = "nothing to import"
            yield session
            continue
        here = project.resolve_project(transcript.cwd, override="")
        if only is not None and here.project_id != only.project_id:
            session.left_out = "another project's"
            yield session
            continue
        session.left_out = capture.why_off(here.root, transcript.cwd, home)
        if session.left_out is None:
            session.events = events(transcript, here, actor)
            transcript.hooks = []  # made into events: not held twice
            _leave_live_alone([session], home)
        yield session


def _leave_live_alone(found: list[Session], home: paths.Home) -> None:
    """Leave out each session whose store holds events the import does not make: its
    hooks sent them."""
    by_namespace: dict[str, dict[str, Session]] = {}
    for session in found:
        first = session.events[0]
        by_namespace.setdefault(first["namespace"], {})[first["session_id"]] = session
    for namespace, named in by_namespace.items():
        ids = list(named)
        for start in range(0, len(ids), LOOKUP_SESSIONS):
            stored = control.call("retrieval", "session_events", {
                "namespace": namespace, "session_ids": ids[start:start + LOOKUP_SESSIONS]},
                timeout_ms=control.LOOKUP_MS, home=home)["sessions"]
            for session_id, event_ids in stored.items():
                session = named.get(session_id)
                ours = {event["event_id"] for event in session.events} if session else set()
                if session and any(event_id not in ours for event_id in event_ids):
                    session.left_out, session.events = "captured live by its hooks", []
