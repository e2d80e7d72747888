"""The CLI as a user runs it, the daemon's status, and the processes of a home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kirolearn import paths
from kirolearn.supervisor.states import READY

KL = [sys.executable, "-m", "kirolearn"]
BIN = Path(sys.executable).parent


def kl(*args: str, input: str | None = None, timeout: float = 60, check: bool = False,
       env: dict | None = None, cwd: str = "/tmp") -> subprocess.CompletedProcess:
    """Run the kirolearn CLI as a user would."""
    result = subprocess.run([*KL, *args], input=input, capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"kirolearn {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def here() -> paths.Home:
    """The test's home (its ``KIROLEARN_HOME``)."""
    return paths.Home.current()


def status() -> dict:
    return json.loads(kl("status", "--json").stdout)


def all_up(roles: list[dict]) -> bool:
    """Every role RUNNING, or WAITING to be started on demand (the viewer)."""
    return all(r["state"] in READY for r in roles)


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
