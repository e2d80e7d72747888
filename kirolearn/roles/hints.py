"""What a search is told of its session, checked at both doors that take one (ingest,
for a prompt's search; retrieval, for ``kirolearn search`` and the MCP server): the
files in play, the files just opened, and the records given already."""

from __future__ import annotations

FILE_LIMIT = 5  # the records a file opened brings back to a hook, at most
MAX_FILES = 50  # files in play, or opened, that one search is told of
MAX_EXCLUDED = 500  # records one search is told to leave out
HINTS = {"files": (MAX_FILES, 1000, "paths"), "opened": (MAX_FILES, 1000, "paths"),
         "exclude": (MAX_EXCLUDED, 64, "record ids"), "given": (MAX_EXCLUDED, 64, "record ids")}


def check_hints(body: dict) -> dict:
    """What a search is told of its session (raises ValueError saying what is wrong):
    the ``files`` in play, the files just ``opened`` (a search about them), the
    records to ``exclude`` (given to the session already), and those a ``why`` gives
    in a line (``given`` to the session already, not with their lines)."""
    hints = {}
    for key, (most, longest, what) in HINTS.items():
        if key not in body:
            continue
        value = body[key]
        if (not isinstance(value, list) or len(value) > most
                or not all(isinstance(v, str) and 0 < len(v) <= longest for v in value)):
            raise ValueError(f"'{key}' must be a list of at most {most} {what}: non-empty"
                             f" strings of at most {longest} characters")
        hints[key] = list(dict.fromkeys(value))
    return hints
