"""Where nothing is captured: projects matching a ``capture.exclude`` glob, pauses
(``kirolearn pause``, everywhere or for a project, until ``kirolearn resume``) and,
with ``capture.opt_in``, every project not enabled (``kirolearn enable``).

Every shim asks ``why_off`` before it sends anything: the answer comes from files in
the home (``paused.json``, ``enabled.json``, ``config.toml``), never from the daemon
nor from the project, so a paused or excluded project costs no call and gets no
context, and a cloned repository's own files can never turn capture on. Light on
purpose: the TOML parser and the glob matcher are imported only when a user's file
names exclusions or opting in.
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


def enabled(home: paths.Home) -> list[str]:
    """The projects ``kirolearn enable`` turned capture on for (the roots)."""
    try:
        found = json.loads(home.enabled_file.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def save_enabled(roots: list[str], home: paths.Home) -> None:
    paths.ensure_private_dir(home.root)
    paths.write_private(home.enabled_file, json.dumps(sorted(set(roots)), indent=1).encode(),
                        durable=True)


def settings(home: paths.Home) -> dict:
    """``[capture]`` (raises config.ConfigError when the file is broken). The user's file
    is parsed only when it, or the environment, names exclusions or opting in."""
    try:
        text = home.config_file.read_bytes()
    except OSError:
        text = b""
    if (b"exclude" not in text and b"opt_in" not in text
            and not any(k in os.environ for k in ("KIROLEARN_CAPTURE_EXCLUDE",
                                                   "KIROLEARN_CAPTURE_OPT_IN"))):
        return {"exclude": [], "opt_in": False}
    from kirolearn import config

    return config.load(home)["capture"]


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
        found = settings(home)
    except ValueError as exc:  # config.ConfigError
        return f"the capture settings cannot be read ({exc})"
    if found["opt_in"] and project_root not in enabled(home):
        return (f"capture is opt-in (capture.opt_in) and {project_root} is not enabled"
                f" (kirolearn enable --project {project_root})")
    patterns = found["exclude"]
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


def describe(home: paths.Home) -> str | None:
    """What is not captured, said for ``status`` and ``doctor`` (None: every project
    is, but those ``capture.exclude`` names)."""
    state = paused(home)
    said = []
    if state["everywhere"]:
        said.append("paused everywhere (kirolearn resume)")
    elif state["projects"]:
        said.append(f"paused for {', '.join(state['projects'])} (kirolearn resume --project"
                    " DIR)")
    try:
        opt_in = settings(home)["opt_in"]
    except ValueError as exc:  # config.ConfigError
        return f"off: the capture settings cannot be read ({exc})"
    if opt_in:
        on = enabled(home)
        said.append(f"opt-in (capture.opt_in): only {', '.join(on)}" if on else
                    "opt-in (capture.opt_in) and no project enabled yet (kirolearn enable)")
    return "; ".join(said) or None
