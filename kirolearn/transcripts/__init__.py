"""An agent's own stored sessions as memory (``kirolearn import-sessions``): the
transcripts Claude Code, Codex, Gemini CLI and Copilot CLI keep, and OpenCode's
database, made into the events their hooks would have sent, through ingest like any
import.

Each agent's reader (a module here, named by its entry in ``kirolearn.agents``) finds
the sessions it keeps and reads each into a ``Transcript`` (its ``transcripts``): the
session's own id and directory, and its hooks as that agent's shim reads them
(``shims.<agent>.read`` on the payloads the agent would have sent), each at the time
the transcript gives it.
``replay.events`` makes of those what ``shims.common.answer`` makes live: a note that
the session started, each prompt, each tool use under its prompt, the turn's reply, a
note that it ended (where the agent's hooks send one).
Context the agent was given (ours included) is not the user's, and is left out.

Every event's id comes from the session and its place in it (as ``seed``'s do), so a
run again stores nothing new, a run killed half-way picks up, and a transcript that
grew since adds only its new events. A session its hooks captured live (the store has
events of it that are not the import's) is left alone. A line that cannot be read is
reported with its number and the rest imported.
"""

from __future__ import annotations

import importlib

from kirolearn.agents import AGENTS

# Each agent whose transcripts are read (its entry says so), by its name (``--agent``).
READERS = {agent.name: importlib.import_module(f"{__name__}.{agent.module}")
           for agent in AGENTS.values() if agent.transcripts}
