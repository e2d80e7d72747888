"""Machines of a team: each a ``KIROLEARN_HOME`` of its own, the traffic on 127.0.0.1."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from helpers.cli import kl


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
