"""The real agent CLIs (pinned in ``tests/e2e/package.json``), the sandbox one runs in
(a home of its own, a clean environment, a scripted model API), and what a run of one
must show: its first run stored, the next run taught, its transcripts imported like
its hooks' capture."""

from __future__ import annotations

import json
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.cli import BIN, kl
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


def stored_prompts() -> list[str]:
    return [e["body"]["content"] for e in stored_events() if e["kind"] == "prompt"]


FIRST = "Say hello with a shell command"  # what each agent's first run is asked
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class E2EAgent:
    """What one real agent's end-to-end run needs beyond what all share: its CLI and
    scripted model API, how a prompt becomes its command line, the user's own settings
    it expects (returning the environment they need), and how it records a trusted
    folder."""

    name: str  # as ``kirolearn install --agent`` names it
    cli: str  # for agent_cli
    api: type[BaseHTTPRequestHandler]
    argv: Callable[[str], list[str]]
    settings: Callable[[Sandbox], dict[str, str]] = lambda sandbox: {}
    trust: Callable[[Path, list[Path]], None] = lambda home, folders: None
    path: str = f"{BIN}:{SYSTEM_PATH}"
    git_init: bool = False  # a project made by ``git init`` (else a bare ``.git``)
    daemon_config: str = ""  # the daemon's config.toml
    after: Callable[[Path], None] = lambda home: None  # stops what it leaves running there


def in_sandbox(agent: E2EAgent) -> pytest.MarkDecorator:
    """The test runs in the ``sandbox`` fixture, for this agent."""
    return pytest.mark.parametrize("sandbox", [agent], indirect=True, ids=[agent.name])


class Sandbox:
    """A real agent in a home of its own (``home/proj`` its project), in a clean
    environment (nothing from this machine's user leaks in), against the scripted model
    API (``api``, whose request bodies are ``bodies``) and the test's daemon."""

    def __init__(self, agent: E2EAgent, daemon_home: Path, user_home: Path,
                 api: ThreadingHTTPServer) -> None:
        self.agent, self.api, self.home = agent, api, user_home
        self.cli = agent_cli(agent.cli)
        self.proj = self.project("proj")
        self.env = {"HOME": str(user_home), "PATH": agent.path, "USER": ACTOR,
                    "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon_home), "NO_COLOR": "1"}
        self.env.update(agent.settings(self))
        agent.trust(user_home, [self.proj])

    @property
    def bodies(self) -> list[dict]:
        return self.api.bodies  # type: ignore[attr-defined]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api.server_port}"

    @cached_property
    def namespace(self) -> str:
        return project.resolve_project(self.proj, home=str(self.home)).namespace(ACTOR)

    def project(self, name: str) -> Path:
        folder = self.home / name
        if self.agent.git_init:
            folder.mkdir(parents=True)
            subprocess.run(["git", "init", "-q", str(folder)], check=True)
        else:
            (folder / ".git").mkdir(parents=True)
        return folder

    def kl(self, *args: str) -> subprocess.CompletedProcess:
        """The kirolearn CLI, run by this user in the project."""
        return kl(*args, env=self.env, cwd=str(self.proj))

    def install(self) -> str:
        """``kirolearn install`` for the agent; what ``doctor`` then says (all well)."""
        installed = self.kl("install", "--agent", self.agent.name)
        assert installed.returncode == 0, installed.stderr
        doctor = self.kl("doctor").stdout
        assert f"ok    {self.agent.name} (project {self.proj})" in doctor, doctor
        return doctor

    def uninstall(self) -> None:
        removed = self.kl("uninstall", "--agent", self.agent.name)
        assert removed.returncode == 0, removed.stderr

    def run(self, prompt: str, *options: str, cwd: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        """The agent's CLI, asked prompt (exit 0 unless not check)."""
        done = subprocess.run([str(self.cli), *self.agent.argv(prompt), *options],
                              cwd=cwd or self.proj, env=self.env, text=True,
                              capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
        assert done.returncode == 0 or not check, \
            f"{self.agent.name} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def first_run(self, count: int, *options: str
                  ) -> tuple[str, list[dict], list[tuple[str, object]]]:
        """The first run, asked FIRST with nothing known yet: what the CLI printed, and
        once count events are stored, the events (checked to be one session, in the
        project's namespace) and each as (kind, its text or its tool's name)."""
        said = self.run(FIRST, *options).stdout
        events = wait_events(count)
        assert len({e["session_id"] for e in events}) == 1, events
        assert all(e["namespace"] == self.namespace for e in events), events
        assert "from kirolearn" not in json.dumps(self.bodies)  # nothing known yet
        return said, events, [(e["kind"], e["body"].get("content")
                               or e["body"].get("data", {}).get("tool_name")) for e in events]

    def taught_run(self, prompt: str, *options: str, check: bool = True
                   ) -> tuple[subprocess.CompletedProcess, list[dict]]:
        """Once a new session would be taught the first (a record of it, and where it
        left off: its checkpoint, made once its last turn is in), a run asked prompt,
        whose requests to the model hold the prompt's context and the session's; the
        run and those requests."""
        wait_records(self.namespace, 60)
        wait_for(lambda: "## Where the last session left off" in retrieval(
            "session_context", {"namespace": self.namespace})["context"], 60, 0.2,
            "the last session's checkpoint")
        seen = len(self.bodies)
        done = self.run(prompt, *options, check=check)
        sent = json.dumps(self.bodies[seen:])
        assert "## Prior observations from kirolearn" in sent
        assert "## Where the last session left off (from kirolearn)" in sent
        assert f"Task: {FIRST}" in sent
        return done, self.bodies[seen:]

    def imported_like_live(self, *options: str) -> str:
        """The first run again, in a trusted project without our hooks, then
        ``import-sessions`` of the agent's transcripts: the sessions its hooks captured
        live are left alone, and the plain project's is made into the record the hooks
        made of the same run. What the CLI printed."""
        plain = self.project("plain")
        self.agent.trust(self.home, [self.proj, plain])
        said = self.run(FIRST, *options, cwd=plain).stdout
        agent = self.agent.name
        done = kl("import-sessions", "--agent", agent, env=self.env, cwd=str(plain),
                  check=True)
        assert f"imported 1 session(s) of {agent}" in done.stdout, done.stdout
        assert "captured live by its hooks" in done.stdout, done.stdout
        imported = project.resolve_project(plain, home=str(self.home),
                                           override="").namespace(ACTOR)

        def titled(where: str) -> list[dict]:
            lines = map(json.loads, kl("export", check=True).stdout.splitlines())
            return [r for r in lines if "record_id" in r and r["namespace"] == where
                    and r["title"] == FIRST]

        [made] = wait_for(lambda: titled(imported), 30, 0.2, "the imported session's record")
        fields = ("title", "summary", "observation_type", "facts", "concepts", "files_touched")
        assert {k: made[k] for k in fields} == {k: titled(self.namespace)[0][k] for k in fields}
        return said
