"""The only wait: ``wait_for`` polls a predicate for a positive signal (a row, a log
line, a counter) and fails loudly, naming what it waited for, when the time runs out.
Every other wait of the tests is built on it."""

from __future__ import annotations

import time

from helpers.cli import here


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
