"""The real agent CLIs (pinned in ``tests/e2e/package.json``) and what a run of one
must show: its first run stored, the next run taught, its transcripts imported like
its hooks' capture."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from helpers.cli import kl
from helpers.events import ACTOR, retrieval, stored_events, wait_events, wait_records
from helpers.waits import wait_for
from kirolearn import project

AGENT_BIN = Path(__file__).parent.parent / "e2e" / "node_modules" / ".bin"  # the real agent CLIs
# The agents whose pinned build is Linux x64's (tests/e2e/package.json optionalDependencies).
LINUX_X64 = pytest.mark.skipif(
    (platform.system(), platform.machine()) != ("Linux", "x86_64"),
    reason="tests/e2e/package.json pins this agent's Linux x64 build")


def agent_cli(name: str) -> Path:
    """A pinned agent CLI (``tests/e2e/package.json``), which the test command installs:
    a command npm links, or a path under node_modules."""
    cli = AGENT_BIN / name if "/" not in name else AGENT_BIN.parent / name
    assert cli.exists(), (f"{cli} is not installed; run the README's test command (it runs:"
                          " npm ci --prefix tests/e2e)")
    return cli


def first_run(count: int, namespace: str) -> tuple[list[dict], list[tuple[str, object]]]:
    """A real agent's first run, once ``count`` events are stored: the events (checked to
    be one session, in namespace) and each as (kind, its text or its tool's name)."""
    events = wait_events(count)
    assert len({e["session_id"] for e in events}) == 1, events
    assert all(e["namespace"] == namespace for e in events), events
    return events, [(e["kind"], e["body"].get("content")
                     or e["body"].get("data", {}).get("tool_name")) for e in events]


def wait_remembered(namespace: str, timeout: float = 60) -> None:
    """Until a new session there would be taught the last one: a record of it, and
    where it left off (its checkpoint, made once its last turn is in)."""
    wait_records(namespace, timeout)
    wait_for(lambda: "## Where the last session left off" in retrieval(
        "session_context", {"namespace": namespace})["context"], timeout, 0.2,
        "the last session's checkpoint")


def taught(bodies: list[dict], first_prompt: str) -> None:
    """The model's requests in a later run hold what the first run taught: the prompt's
    context and the session's (where the first run left off)."""
    sent = json.dumps(bodies)
    assert "## Prior observations from kirolearn" in sent
    assert "## Where the last session left off (from kirolearn)" in sent
    assert f"Task: {first_prompt}" in sent


def imported_like_live(agent: str, env: dict, live: str, plain: Path, title: str) -> None:
    """``import-sessions`` of the agent's transcripts: the sessions its hooks captured
    live (those of the ``live`` namespace) are left alone, and the one run in ``plain``
    (a project without hooks) is made into the record the hooks made of the same run."""
    done = kl("import-sessions", "--agent", agent, env=env, cwd=str(plain), check=True)
    assert f"imported 1 session(s) of {agent}" in done.stdout, done.stdout
    assert "captured live by its hooks" in done.stdout, done.stdout
    namespace = project.resolve_project(plain, home=env["HOME"], override="").namespace(ACTOR)

    def titled(where: str) -> list[dict]:
        lines = map(json.loads, kl("export", check=True).stdout.splitlines())
        return [r for r in lines if "record_id" in r and r["namespace"] == where
                and r["title"] == title]

    [made] = wait_for(lambda: titled(namespace), 30, 0.2, "the imported session's record")
    fields = ("title", "summary", "observation_type", "facts", "concepts", "files_touched")
    assert {k: made[k] for k in fields} == {k: titled(live)[0][k] for k in fields}


def stored_prompts() -> list[str]:
    return [e["body"]["content"] for e in stored_events() if e["kind"] == "prompt"]
