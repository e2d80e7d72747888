"""Where nothing is captured: projects matching a ``capture.exclude`` glob, and pauses
(``kirolearn pause``, everywhere or for a project, until ``kirolearn resume``).

Every shim asks ``why_off`` before it sends anything: the answer comes from two files
in the home (``paused.json``, ``config.toml``), never from the daemon, so a paused or
excluded project costs no call and gets no context. Light on purpose: the TOML parser
and the glob matcher are imported only when a user's file names exclusions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kirolearn import paths


def paused(home: paths.Home) -> dict:
    """``{"everywhere": bool, "projects": [root…]}``; nothing paused when there is no
    file (or an unreadable one)."""
    try:
        state = json.loads(home.paused_file.read_text("utf-8"))
    except (OSError, ValueError):
        return {"everywhere": False, "projects": []}
    projects = state.get("projects") if isinstance(state, dict) else None
    return {"everywhere": bool(state.get("everywhere")) if isinstance(state, dict) else False,
            "projects": [p for p in projects if isinstance(p, str)]
            if isinstance(projects, list) else []}


def save_paused(state: dict, home: paths.Home) -> None:
    """Write the pause state (the file goes when nothing is paused)."""
    path = home.paused_file
    if not state["everywhere"] and not state["projects"]:
        path.unlink(missing_ok=True)
        return
    paths.ensure_private_dir(path.parent)
    paths.write_private(path, json.dumps(state, indent=1).encode(), durable=True)


def exclude_patterns(home: paths.Home) -> list[str]:
    """``capture.exclude`` (raises config.ConfigError when the file is broken). The user's
    file is parsed only when it, or the environment, names exclusions."""
    try:
        text = home.config_file.read_bytes()
    except OSError:
        text = b""
    if b"exclude" not in text and "KIROLEARN_CAPTURE_EXCLUDE" not in os.environ:
        return []
    from kirolearn import config

    return config.load(home)["capture"]["exclude"]


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def why_off(project_root: str, cwd: str, home: paths.Home) -> str | None:
    """Why nothing is captured (nor injected) for this project and directory; None when
    it is. A configuration that cannot be read turns capture off: an exclusion is never
    ignored."""
    state = paused(home)
    if state["everywhere"]:
        return "capture is paused everywhere (kirolearn resume)"
    real = os.path.realpath(cwd)
    for root in state["projects"]:
        if project_root == root or _within(real, root):
            return f"capture is paused for {root} (kirolearn resume --project {root})"
    try:
        patterns = exclude_patterns(home)
    except ValueError as exc:  # config.ConfigError
        return f"capture.exclude cannot be read ({exc})"
    if not patterns:
        return None
    import fnmatch

    candidates = [project_root, real, *(str(p) for p in Path(real).parents)]
    for pattern in patterns:
        expanded = os.path.expanduser(pattern).rstrip("/") or "/"
        for path in candidates:
            if fnmatch.fnmatchcase(path, expanded):
                return f"{path} matches capture.exclude {pattern!r}"
    return None
