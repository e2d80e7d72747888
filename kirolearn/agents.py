"""Every agent kirolearn serves, one entry each: all the rest of kirolearn knows of it.

An entry's name is the agent's everywhere: ``kirolearn install --agent NAME``, its hook
command ``kirolearn-NAME``, the ``surface`` its events carry. Its module name
(``module``) names the code written for it, one piece in each place that needs one: its
shim (``kirolearn.shims.<module>``, the reader of its hooks' payloads), its files
(``kirolearn.install.agents.<module>``, what install writes, with ``<module>_note``
when the user may still have something to do), and, where the agent keeps its own
sessions, their reader (``kirolearn.transcripts.<module>``, for ``import-sessions``).
``tests/test_layout.py`` checks each is there; ``tests/test_docs.py`` checks the
README names every agent.

Light, pure data (no ``dataclasses``, which a hook cannot afford): a hook imports it.
"""

from __future__ import annotations

from typing import NamedTuple


class Agent(NamedTuple):
    """One agent: ``title``, its name for people (the README's); ``loads``, the rule files
    it loads itself (patterns of their paths in the checkout, ``~/`` for the user's), so
    context given to it leaves their records out; ``transcripts``, whether
    ``import-sessions`` reads the sessions it keeps; ``status_line``, whether it runs
    ``kirolearn-statusline``; ``project_only``, whether its hooks live in a project only."""

    name: str
    title: str
    loads: tuple[str, ...]
    transcripts: bool = False
    status_line: bool = False
    project_only: bool = False

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def command(self) -> str:
        return f"kirolearn-{self.name}"


AGENTS: dict[str, Agent] = {agent.name: agent for agent in (
    Agent("kiro-cli", "Kiro CLI", (".kiro/steering/*", "AGENTS.md")),
    Agent("kiro-ide", "Kiro IDE", (".kiro/steering/*", "AGENTS.md"), project_only=True),
    Agent("claude-code", "Claude Code", ("CLAUDE.md", "CLAUDE.local.md", ".claude/CLAUDE.md",
                                         "~/.claude/*"), transcripts=True, status_line=True),
    Agent("codex", "Codex CLI", ("AGENTS.md",), transcripts=True),
    Agent("gemini", "Gemini CLI", ("GEMINI.md",), transcripts=True),
    Agent("copilot", "Copilot CLI", (".github/copilot-instructions.md", "AGENTS.md"),
          transcripts=True),
    Agent("cursor", "Cursor", (".cursorrules", ".cursor/rules/*", "AGENTS.md")),
    Agent("opencode", "OpenCode", ("AGENTS.md", "CLAUDE.md"), transcripts=True),
    Agent("qwen-code", "Qwen Code", ("QWEN.md", "AGENTS.md"), status_line=True),
    Agent("windsurf", "Windsurf", (".windsurfrules", ".windsurf/rules/*", "AGENTS.md")),
    Agent("cline", "Cline", (".clinerules", ".clinerules/*", "AGENTS.md")),
)}
