"""git, run as a reader of a repository that is untrusted input.

A repository's configuration can name programs that git runs for it: a clean, smudge
or process filter, a textconv or external diff, an fsmonitor, a pager, signature
programs, an editor, credential helpers, hooks (``post-index-change`` runs when
``git status`` refreshes the index). Cloning someone's repository must not make
kirolearn run their code. So every git command kirolearn runs goes through ``run``:

- a clean environment (no inherited ``GIT_*`` that could point git elsewhere; no
  system configuration; no terminal prompt, no pager, no optional locks, so that
  ``status`` never writes the index);
- ``-c`` overrides that turn off hooks, fsmonitor, pagers, signature checking and every
  program-valued setting git reads, and, for each filter, diff and merge driver the
  repository's configuration names (``drivers``: listed once per ``Git``), its
  programs set to none;
- the checkout's own working tree, whatever its ``core.worktree`` says;
- a time limit, after which the command is killed and its answer is None.

Callers pass ``--no-textconv --no-ext-diff`` where a command shows a diff.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence

TIMEOUT_S = 10.0
# Settings whose value is a program git may run, each set to none (or off).
OFF = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.pager=cat",
    "core.editor=true", "sequence.editor=true", "core.askPass=", "core.sshCommand=ssh",
    "core.gitProxy=", "core.alternateRefsCommand=", "credential.helper=",
    "diff.external=", "diff.ignoreSubmodules=all", "status.submoduleSummary=false",
    "log.showSignature=false", "log.mailmap=false", "gpg.program=gpg",
    "gpg.openpgp.program=gpg", "gpg.x509.program=gpgsm", "gpg.ssh.program=ssh-keygen",
    "gpg.ssh.defaultKeyCommand=", "uploadpack.packObjectsHook=", "gc.auto=0",
    "maintenance.auto=false", "protocol.allow=never",
)
# A driver's settings that name programs: filter.<d>.clean, diff.<d>.textconv, …
DRIVER = re.compile(r"^(filter|diff|merge)\.(.+)\.(clean|smudge|process|textconv|command|"
                    r"driver|required)$")
KEPT_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def environment() -> dict[str, str]:
    """The environment git runs in: the few plain variables kept, git's set for a
    reader."""
    env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat", "PAGER": "cat",
                "GIT_ASKPASS": "", "SSH_ASKPASS": "", "GIT_NO_REPLACE_OBJECTS": "1"})
    return env


def _argv(root: str, overrides: Sequence[str], args: Sequence[str]) -> list[str]:
    config = [part for setting in (*OFF, *overrides) for part in ("-c", setting)]
    # A checkout's own working tree, whatever core.worktree of its configuration says
    # (it could send git through another folder of the machine).
    tree = ([f"--work-tree={os.path.abspath(root)}"]
            if os.path.lexists(os.path.join(root, ".git")) else [])
    return ["git", "--no-pager", *tree, *config, "-C", root, *args]


def _call(argv: list[str], timeout_s: float, stdin: bytes | None = None
          ) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False,
                              **({"input": stdin} if stdin is not None
                                 else {"stdin": subprocess.DEVNULL}), env=environment())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def drivers(root: str, timeout_s: float = TIMEOUT_S) -> list[str]:
    """``-c`` overrides that set every driver program the repository's configuration
    (and the user's) names to none, and a required filter to not required."""
    done = _call(_argv(root, (), ("config", "--list", "-z", "--includes")), timeout_s)
    found: dict[str, None] = {}
    for entry in (done.stdout if done and done.returncode == 0 else b"").split(b"\0"):
        key = entry.partition(b"\n")[0].decode("utf-8", "surrogateescape")
        match = DRIVER.match(key)
        if match and "\n" not in match[2] and "=" not in match[2]:
            found[f"{key}=false" if match[3] == "required" else f"{key}="] = None
    return list(found)


class Git:
    """git for one repository: its drivers listed once, then any number of commands."""

    def __init__(self, root: str, timeout_s: float = TIMEOUT_S) -> None:
        self.root = root
        self.timeout_s = timeout_s
        self._overrides: list[str] | None = None

    def overrides(self) -> list[str]:
        if self._overrides is None:
            self._overrides = drivers(self.root, self.timeout_s)
        return self._overrides

    def run(self, *args: str, timeout_s: float | None = None, stdin: bytes | None = None
            ) -> subprocess.CompletedProcess | None:
        """The finished command (any exit status), given ``stdin`` to read; None when
        git could not run or did not finish within the time limit (it is killed)."""
        return _call(_argv(self.root, self.overrides(), args),
                     self.timeout_s if timeout_s is None else timeout_s, stdin)

    def output(self, *args: str, timeout_s: float | None = None) -> bytes | None:
        """What the command printed, when it succeeded (None otherwise)."""
        done = self.run(*args, timeout_s=timeout_s)
        return done.stdout if done is not None and done.returncode == 0 else None

    def text(self, *args: str, timeout_s: float | None = None) -> str | None:
        """The same, as text (undecodable bytes replaced)."""
        out = self.output(*args, timeout_s=timeout_s)
        return None if out is None else out.decode("utf-8", errors="replace")
