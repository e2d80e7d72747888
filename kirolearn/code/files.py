"""Files of a working tree or a ``.git`` directory, read as untrusted input.

A repository can hold anything a filesystem can: a FIFO named ``parser.py`` (an
``open`` waits for a writer for good), a link to ``/proc/self/environ`` or
``/dev/zero``, a link out of the tree. So a file is read here only when it is a regular
file, inside the tree it is named from (a link is followed only while it stays inside),
opened without blocking and without following a link at its last step, and never past
the size its caller asks for. Where the filesystem itself may hang (a stale network
mount), ``bounded`` abandons the call on a thread of its own at its budget, so a role's
one thread always answers.

Standard library only: every hook imports it (through ``project``).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
READ_FLAGS = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
              | getattr(os, "O_CLOEXEC", 0))
CHUNK = 1 << 16


def inside(root: str, name: str) -> str | None:
    """The real path of ``name`` (relative to ``root``, or absolute) when it is inside
    the real ``root`` once every link is followed; None when it leads out (or is root)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, name))
    if real == real_root or not real.startswith(real_root.rstrip(os.sep) + os.sep):
        return None
    return real


def open_regular(path: str) -> int | None:
    """A descriptor of ``path`` when it is a regular file, opened without following a
    link at its last step and without waiting (a FIFO or device is refused); None
    otherwise. The caller closes it."""
    try:
        fd = os.open(path, READ_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def open_in(root: str, name: str) -> int | None:
    """A descriptor of the regular file ``name`` inside the tree at ``root`` (links
    followed only while they stay inside it); None for anything else."""
    real = inside(root, name)
    return None if real is None else open_regular(real)


def read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of an open file."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        try:
            chunk = os.read(fd, min(CHUNK, left))
        except BlockingIOError:
            break
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_in(root: str, name: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``name`` inside the tree at ``root``
    (None: not such a file, or unreadable)."""
    fd = open_in(root, name)
    return None if fd is None else _read_closing(fd, limit)


def read_regular(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``path`` when it is a regular file not reached by a
    link at its last step (None otherwise): for git's own small files (``HEAD``, refs),
    whose place git itself decides."""
    fd = open_regular(path)
    return None if fd is None else _read_closing(fd, limit)


def _read_closing(fd: int, limit: int) -> bytes | None:
    try:
        return read_fd(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def is_regular(path: str) -> bool:
    """Whether ``path`` itself (not what a link there points to) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


class Abandoned(Exception):
    """A bounded call did not finish within its budget (it goes on, unwaited for)."""


def bounded(seconds: float, call: Callable[[], T]) -> T:
    """``call()``'s answer, when it comes within ``seconds``; else Abandoned, and the
    call is left to finish on its own thread (a read stuck on a hung filesystem must
    not hold the caller's thread). Its exception, if it raised one, is raised here."""
    done = threading.Event()
    answer: list = []

    def run() -> None:
        try:
            answer.append((True, call()))
        except BaseException as exc:  # handed to the caller
            answer.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="bounded-read", daemon=True).start()
    if not done.wait(max(0.0, seconds)):
        raise Abandoned(f"not finished within {seconds:.3f} s")
    ok, value = answer[0]
    if not ok:
        raise value
    return value


class Reads:
    """Bounded calls, one at a time a key (a tree, a checkout): a key whose call is still
    out, stuck on a hung file system, is not tried again until that call returns, so a
    hung mount costs one waiting thread, not one a search."""

    def __init__(self) -> None:
        self._out: set[str] = set()
        self._lock = threading.Lock()

    def bounded(self, key: str, seconds: float, call: Callable[[], T]) -> T:
        """``bounded(seconds, call)`` for ``key``; Abandoned at once while its last call
        is out."""
        with self._lock:
            if key in self._out:
                raise Abandoned(f"{key}: the last read has not returned")
            self._out.add(key)

        def run() -> T:
            try:
                return call()
            finally:
                with self._lock:
                    self._out.discard(key)

        return bounded(seconds, run)
