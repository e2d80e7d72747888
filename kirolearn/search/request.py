"""What one search asks (``Request``): everything ``Engine.search`` needs of a call, so
that the engine keeps none of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kirolearn.db.store import Connection
from kirolearn.search import staleness

# Whether a search from a namespace takes in the other actors' of its project (given the
# engine's connection, to look up what the asking client contributed).
Sharing = Callable[[Connection, str], bool]
# Why the agent asking has a record already (None: it has not), such as a rule file it
# loads itself: left out of what it is given.
Known = Callable[[dict], str | None]


@dataclass(frozen=True)
class Request:
    """One search. ``namespaces`` (one, or several searched as one: a record whose title
    and summary repeat a better-ranked one's is left out) and ``query``; at most
    ``limit`` records within ``budget_ms``, or by ``deadline`` (``time.monotonic()``)
    when that comes first. ``mode``: one of ``config.MODES`` (lexical without an
    embedder). ``max_tokens``: the records are cut to what fits (``within_tokens``).
    ``types``: only records of these observation types (none: all). ``others_floor``: a
    record of a namespace after the first is kept only when its ``relevance`` is at
    least this (a lexical answer's, which has none, is not). ``share``: see
    ``Engine.shared``. ``files``: the files in play (the session's, the working tree's
    changes), whose records rank higher. ``opened``: files the agent has just opened:
    the search is for what is known of them (``query``: the request it works on), none
    of ``exclude`` (what the session was given already). ``tree``: the working tree
    the search comes from, which the project's records are checked against
    (``staleness``). ``known``: why the agent has a record already (None: it has
    not), which leaves it out."""

    namespaces: tuple[str, ...]
    query: str
    limit: int = 10
    budget_ms: float = 500.0
    deadline: float | None = None
    mode: str = "lexical"
    max_tokens: int | None = None
    types: tuple[str, ...] = ()
    others_floor: float | None = None
    share: Sharing | None = None
    files: tuple[str, ...] = ()
    opened: tuple[str, ...] = ()
    exclude: frozenset[str] = field(default_factory=frozenset)
    tree: staleness.Tree | None = None
    known: Known | None = None

    def __post_init__(self) -> None:
        """A single namespace, and any sequence of names, taken as given."""
        names: str | Sequence[str] = self.namespaces
        object.__setattr__(self, "namespaces", (names,) if isinstance(names, str)
                           else tuple(names))
        for name in ("types", "files", "opened"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "exclude", frozenset(self.exclude))
