"""``python -m kirolearn.supervisor``: the daemon process that ``kirolearn start`` launches."""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import sys

from kirolearn import config, paths, privacy
from kirolearn.supervisor.arbiter import AlreadyRunning, Arbiter
from kirolearn.supervisor.states import RET_CONFIG, RET_PIDFILE


def run_daemon(workers: int | None, foreground: bool) -> int:
    os.umask(0o077)  # logs, database and sockets are the user's alone
    home = paths.Home.current()
    home.ensure_layout()
    try:
        settings = config.load(home)
    except config.ConfigError as exc:
        print(f"kirolearn: configuration error: {exc}", file=sys.stderr)
        return RET_CONFIG
    handler = logging.handlers.RotatingFileHandler(
        paths.not_a_link(home.log_dir / "supervisor.log"),
        maxBytes=settings["logging"]["max_bytes"], backupCount=settings["logging"]["backups"])
    handlers: list[logging.Handler] = [handler]
    if foreground:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=settings["logging"]["level"].upper(), handlers=handlers, force=True,
        format="%(asctime)s [%(process)d] [kirolearn.supervisor] [%(levelname)s] %(message)s")
    workers = settings["extraction"]["workers"] if workers is None else workers
    # Built once, before the threads that scrub the roles' logs, from the rules ingest
    # saved (importing detect-secrets would hold 13 MB for good).
    privacy.use_saved_rules(home)
    try:
        return Arbiter(home, settings, workers).run()
    except AlreadyRunning as exc:
        print(f"kirolearn: {exc}", file=sys.stderr)
        return RET_PIDFILE


def main() -> None:
    parser = argparse.ArgumentParser(prog="kirolearn.supervisor")
    parser.add_argument("--extraction-workers", type=int, default=None)
    parser.add_argument("--foreground", action="store_true")
    args = parser.parse_args()
    sys.exit(run_daemon(args.extraction_workers, args.foreground))


if __name__ == "__main__":
    main()
