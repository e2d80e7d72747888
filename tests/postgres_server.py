"""A real PostgreSQL server for the tests: Debian's binaries (tests/install-postgresql),
a data directory in a temporary folder, a free port on 127.0.0.1, no system service.

PostgreSQL refuses to run as root; as root, the server runs as the ``postgres`` user
that Debian's package makes.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ports import free_ports

USER = "kirolearn"


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL is not installed: run tests/install-postgresql")
    return Path(initdb).parent


class PostgresServer:
    """One server; ``database()`` makes a fresh database on it and gives its URL."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="kl-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.port = free_ports()  # below the ephemeral range: no one takes it meanwhile
        self.count = 0
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *command: str) -> subprocess.CompletedProcess:
        # The server outlives the test that starts it: none of its home is in its environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KIROLEARN_")}
        return subprocess.run([*self.as_user, *command], capture_output=True, text=True,
                              timeout=120, check=True, cwd=self.root, env=env)

    def start(self) -> PostgresServer:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", USER,
                  "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
                   " -c fsync=off -c full_page_writes=off")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database; its URL."""
        import psycopg

        self.count += 1
        name = f"kl_{os.getpid()}_{self.count}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server at once (its data is thrown away). The data directory, every
        database the test process made, is removed as the process exits: on a busy
        machine that can take minutes, which must not count against the test whose
        teardown stops the server."""
        subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data),
                        "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60,
                       cwd=self.root)
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)
