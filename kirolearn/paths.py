"""Where kirolearn keeps its files and sockets. Standard library (and the contract
module) only.

Everything lives in one ``Home``, ``KIROLEARN_HOME`` (default ``~/.kirolearn``): the
database, ``run/`` (sockets, pidfile), ``logs/``, ``spool/`` (events a shim could
not deliver), ``quarantine/``, ``backups/`` and ``sessions/`` (each project's current
session). ipc socket
paths must stay under libzmq's ~107-byte limit, so when the home is too deep the
runtime directory moves to ``/tmp/kirolearn-<uid>-<hash>`` (still 0700, still
unique to the home).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import NamedTuple

from kirolearn.contract import sha256

IPC_PATH_MAX = 100  # a little under libzmq's limit, for the longest socket name


RUNTIME_NAMES = 8  # names tried in /tmp for a deep home's runtime directory


class UnsafeRuntimeDir(PermissionError):
    """No name in /tmp could be used for a deep home's sockets; the message says why."""


class Home(NamedTuple):
    """One kirolearn home: where its files and sockets are. A process makes it once,
    where it starts (``Home.current()``: ``KIROLEARN_HOME``), and passes it down, so
    nothing below reads the environment to find its files. (A NamedTuple, not a
    dataclass: ``dataclasses`` imports ``inspect``, 15 ms of every hook.)"""

    root: Path

    @classmethod
    def current(cls) -> Home:
        return cls(Path(os.environ.get("KIROLEARN_HOME") or Path.home() / ".kirolearn").absolute())

    @property
    def db_path(self) -> Path:
        return self.root / "kirolearn.db"

    @property
    def config_file(self) -> Path:
        return self.root / "config.toml"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def spool_dir(self) -> Path:
        return self.root / "spool"

    @property
    def quarantine_dir(self) -> Path:
        """What could not be stored, kept for a person with the reason: spool files
        (``<event_id>.json`` and ``.reason``) and import lines (``import-<time>.jsonl``)."""
        return self.root / "quarantine"

    @property
    def backup_dir(self) -> Path:
        """Where ``kirolearn backup`` writes when it is given no path."""
        return self.root / "backups"

    @property
    def paused_file(self) -> Path:
        """Where ``kirolearn pause`` says capture is off (everywhere, or for projects)."""
        return self.root / "paused.json"

    @property
    def enabled_file(self) -> Path:
        """Where ``kirolearn enable`` lists the projects captured under
        ``capture.opt_in``."""
        return self.root / "enabled.json"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def seeded_file(self) -> Path:
        """Where ``kirolearn seed --git`` keeps the newest commit it seeded, by checkout."""
        return self.root / "seeded.json"

    @property
    def imports_file(self) -> Path:
        """Where ``kirolearn import`` keeps, by file, the line up to which an import that
        stopped was answered (``importer.resume_point``)."""
        return self.root / "imports.json"

    @property
    def rules_file(self) -> Path:
        """The rule files (CLAUDE.md, AGENTS.md…) last sent, by checkout: their size and
        time, so that a session start sends only those that changed (``rules``)."""
        return self.root / "rules.json"

    @property
    def remote_file(self) -> Path:
        """Where ``kirolearn connect`` says this machine is a client of a daemon elsewhere."""
        return self.root / "remote.json"

    @property
    def viewer_token(self) -> Path:
        """The viewer's token (made at its first start, 0600)."""
        return self.root / "viewer.token"

    def runtime_dir(self) -> Path:
        """Where the sockets and the pidfile are: ``run/`` in the home, or, for a home too
        deep for a socket's path, a folder in /tmp named after it. Another user can make
        that name first (or a link there): a name is used only while it is free or is a
        real folder of ours, private (0700), and the next is tried otherwise, so every
        process of this home, trying them in order, agrees on it."""
        run = self.root / "run"
        if len(str(run)) + len("/extraction-999.ctl") <= IPC_PATH_MAX:
            return run
        digest = sha256(str(self.root).encode()).hexdigest()[:12]
        first = Path("/tmp") / f"kirolearn-{os.getuid()}-{digest}"
        free = None
        refused = []
        for n in range(RUNTIME_NAMES):
            candidate = first if n == 0 else first.with_name(f"{first.name}-{n}")
            try:
                info = os.lstat(candidate)
            except FileNotFoundError:
                free = free or candidate
                continue
            if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                    and stat.S_IMODE(info.st_mode) == 0o700):
                return candidate
            refused.append(candidate)
        if free is None:
            raise UnsafeRuntimeDir(
                f"no private runtime directory can be made for {self.root}:"
                f" {', '.join(map(str, refused))} each belong to another user, are links,"
                " or are not private (0700); remove them, or set KIROLEARN_HOME to a"
                " shorter path")
        return free

    def pidfile(self) -> Path:
        return self.runtime_dir() / "supervisor.pid"

    def viewer_info(self) -> Path:
        """Where the running viewer listens (``url``, ``port``, ``pid``), written at its start."""
        return self.runtime_dir() / "viewer.json"

    def daemon_running(self) -> bool:
        return is_locked(self.pidfile())

    def endpoint(self, name: str) -> str:
        """``ipc://`` address of a named socket: a role's service ('ingest', 'storage',
        'retrieval', 'batches', 'records') or a process's control socket ('<process>.ctl')."""
        suffix = "" if name.endswith(".ctl") else ".sock"
        return f"ipc://{self.runtime_dir() / name}{suffix}"

    def ensure_layout(self) -> Home:
        """The home, its logs and its runtime directory made (private), or refused."""
        ensure_private_dir(self.root, link_ok=True)
        ensure_private_dir(self.log_dir)
        run = self.runtime_dir()
        if run.parent == Path("/tmp"):  # made here, never through a link someone left
            with contextlib.suppress(FileExistsError):
                os.mkdir(run, 0o700)
            info = os.lstat(run)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                raise UnsafeRuntimeDir(f"{run} was taken by someone else while kirolearn"
                                       " made it; try again")
        ensure_private_dir(run)
        return self


def is_locked(path: Path) -> bool:
    """Whether a live daemon holds the pidfile lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def not_a_link(path: Path) -> Path:
    """path, with a link that stood there removed (not what it pointed to): what kirolearn
    writes in its home goes to the home, never where a link left there leads."""
    if path.is_symlink():
        path.unlink()
    return path


def ensure_private_dir(path: Path, link_ok: bool = False) -> Path:
    """Create path (mode 0700) or tighten it; refuse one owned by somebody else. A link
    where the directory should be is removed and the directory made (``link_ok``: the
    home itself, which a user may keep elsewhere)."""
    if not link_ok:
        not_a_link(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user; refusing to use it")
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path


def write_private(path: Path, data: bytes, durable: bool = False) -> Path:
    """Replace ``path`` with ``data`` atomically (a temporary file, then a rename), readable
    by its owner only. ``durable``: fsync first, for a file that must survive a crash."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):  # a crash's leftover, or a link: not ours
        os.unlink(temporary)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    return path


def read_json_object(path: Path) -> dict:
    """A small state file of the home (what was seeded, imported, sent) as a dict: {}
    when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_json(path: Path, value: dict) -> None:
    """Replace a small state file of the home (``read_json_object``), private."""
    ensure_private_dir(path.parent)
    write_private(path, json.dumps(value, indent=1).encode("utf-8"))
