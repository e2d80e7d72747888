"""The agent's status line (``kirolearn-statusline``): what memory did for this session.

Claude Code runs its ``statusLine`` command after each message, with the session on
stdin (``{"session_id", "cwd", "workspace": {"current_dir"}, …}``), and shows the
first line it prints: ``kirolearn · 5 recalled · 132 captured · brief ✓``. The
counts are the ones the session's hooks keep in its file in the home
(``common.Session.count``), and "brief ✓" says the session started with the project's
brief (``search.brief``): no daemon call, a file read. Where capture is off for the
directory, it says so instead (``kirolearn · paused``). It never fails the agent:
anything unreadable is a plain ``kirolearn``.
"""

from __future__ import annotations

import sys

from kirolearn import capture, paths, project
from kirolearn.agents import AGENTS
from kirolearn.shims import common

# Whose session ids the status line is given.
SURFACES = tuple(agent.name for agent in AGENTS.values() if agent.status_line)


def line(payload: dict, home: paths.Home) -> str:
    """The status line for a session's payload."""
    workspace = payload.get("workspace")
    cwd = payload.get("cwd") or (workspace.get("current_dir")
                                 if isinstance(workspace, dict) else None)
    if isinstance(cwd, str) and cwd:
        here = project.resolve_project(cwd)
        off = capture.why_off(here.root, cwd, home)
        if off:
            return "kirolearn · " + ("paused" if "paused" in off else "off here")
    session_id = payload.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        return "kirolearn"
    state = next((found for surface in SURFACES
                  if (found := common.load_state(home, f"{surface}:{session_id}"))), {})
    counts = [(state.get(key), key) for key in ("recalled", "captured")]
    return " · ".join(["kirolearn", *(f"{n} {key}" for n, key in counts
                                      if isinstance(n, int)),
                       *(["brief ✓"] if state.get("briefed") is True else [])])


def main() -> int:
    try:
        print(line(common.parse_json_object(common.read_stdin(wait_s=0.5)),
                   paths.Home.current()))
    except Exception:  # the agent's screen, never a traceback
        print("kirolearn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
