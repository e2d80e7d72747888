"""Which project a directory belongs to: the one function every component uses.

Shims, the MCP server and the CLI must agree on a namespace, or memories saved
through one are invisible to another. So the rule lives here, once:

1. ``KIROLEARN_PROJECT`` (a directory, or a plain name) wins when set.
2. Otherwise walk up from ``realpath(cwd)`` to the nearest directory holding a
   marker, never inspecting ``$HOME`` itself nor going above it, nor taking the
   filesystem root: a repository under ``/srv`` or ``/work`` is a project too.
3. No marker, or cwd is ``$HOME``: the global project, ``$HOME``.

A git worktree (its ``.git`` is a file pointing into another repository's
``.git/worktrees/``) maps to the main checkout, so all worktrees share memory; its own
directory is the ``checkout`` its files are named from (``source.project_path``).

A machine connected to a team's daemon (``kirolearn connect``) names a git project by
its ``origin`` remote instead (``git_origin``): every teammate's clone, wherever it
is, is then the same project, and its memories are shared by all of them
(``shared_namespaces``); the global project is named by its user, so it is theirs
alone, on each of their machines. One connected with ``--private`` keeps its own to itself:
its actor is ``<user>+private``, whose namespaces no one else's search takes in.
Standard library (and the contract and paths modules) only: shims import this on
every hook.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from kirolearn import paths
from kirolearn.code import files
from kirolearn.contract import sha256

# Which memories an MCP server serves: the project's, the global ones, or both.
SCOPES = ("project", "global", "project+global")

GIT_FILE_BYTES = 4096  # HEAD, a ref, a worktree's ``.git`` or ``commondir``
PACKED_REFS_BYTES = 16 << 20
CONFIG_BYTES = 1 << 20
MARKERS = (
    ".kiro", ".git", "package.json", "Cargo.toml", "pyproject.toml", "setup.py", "go.mod",
    "pom.xml", "build.gradle", "build.gradle.kts", "Gemfile", "composer.json", "mix.exs",
    "deno.json", "deno.jsonc",
)


class Project(NamedTuple):
    root: str  # absolute path: the project (a worktree's main checkout)
    project_id: str  # sha256 hex of the root (or of the explicit name)
    is_global: bool
    # the working tree the directory is in, recorded as source.project_path: files are
    # named from it, its changes are the files in play (a worktree's own; else the root)
    checkout: str

    def namespace(self, actor_id: str) -> str:
        return namespace_for(actor_id, self.project_id)


def sha256_hex(text: str) -> str:
    return sha256(text.encode("utf-8")).hexdigest()


PRIVATE = "+private"  # the end of a private actor's name: its memories are its own


def _connection() -> dict | None:
    """What ``kirolearn connect`` saved, or None: not connected (or unreadable)."""
    try:
        found = json.loads(paths.Home.current().remote_file.read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def actor_id() -> str:
    """The OS user name, safe to embed in a namespace (getpass.getuser's rule, without
    the cost of importing getpass on every hook); with ``PRIVATE`` after it on a machine
    connected to a team with ``--private``."""
    name = user()
    connection = _connection()
    return name + PRIVATE if connection and connection.get("private") is True else name


def user() -> str:
    """The OS user's name, made safe for a namespace (the actor without ``PRIVATE``)."""
    name = next((os.environ[k] for k in ("LOGNAME", "USER", "LNAME", "USERNAME")
                 if os.environ.get(k)), None)
    if name is None:
        try:
            import pwd

            name = pwd.getpwuid(os.getuid()).pw_name
        except (ImportError, KeyError):
            name = "unknown"
    return (name.replace("/", "_") or "unknown")[:128]


def namespace_for(actor: str, project_id: str) -> str:
    return f"/actor/{actor}/project/{project_id}/"


def parts(namespace: str) -> tuple[str, str]:
    """(actor, project id) of a namespace."""
    actor, _, project_id = namespace[len("/actor/"):].rstrip("/").partition("/project/")
    return actor, project_id


def display_name(namespace: str, folder: str | None) -> str:
    """A project as a person names it: its folder's name, else its id, shortened."""
    if folder:
        return folder.rstrip("/").rpartition("/")[2] or folder
    return parts(namespace)[1][:12]


def record_author(record: dict) -> str:
    """Who did a record's work: its seeded commit's author, else its namespace's actor."""
    return (record.get("code") or {}).get("author") or parts(record["namespace"])[0]


def shared_namespaces(namespace: str, known: Iterable[str]) -> list[str]:
    """The namespaces a search from ``namespace`` takes in: its own first, then every
    other actor's of the same project among ``known``, but a private actor's."""
    project_id = parts(namespace)[1]
    found = [namespace]
    for other in known:
        other_actor, other_project = parts(other)
        if (other_project == project_id and other != namespace
                and not other_actor.endswith(PRIVATE)):
            found.append(other)
    return found


def normal_origin(url: str) -> str | None:
    """A remote's URL as every clone names it alike: host and path, the host in lower
    case, without user, port, scheme or ``.git`` (``git@github.com:org/app.git`` and
    ``https://github.com/org/app`` are both ``github.com/org/app``); None for a local
    path or anything else."""
    url = url.strip()
    if "://" in url:  # scheme://[user[:password]@]host[:port]/path
        scheme, _, rest = url.partition("://")
        if scheme.lower() == "file":
            return None
        where, _, path = rest.partition("/")
        host = where.rpartition("@")[2].partition(":")[0]
    elif ":" in url and not url.startswith(("/", ".")):  # [user@]host:path, as scp says it
        where, _, path = url.partition(":")
        host = where.rpartition("@")[2]
    else:
        return None
    path = path.strip("/").removesuffix(".git").strip("/")
    return f"{host.lower()}/{path}" if host and "/" not in host and path else None


def git_origin(root: str | os.PathLike) -> str | None:
    """The normal URL of the ``origin`` remote of the repository at root, or None."""
    text = _text(Path(root) / ".git" / "config", CONFIG_BYTES)
    if text is None:
        return None
    section = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == '[remote "origin"]' and line.partition("=")[0].strip() == "url":
            return normal_origin(line.partition("=")[2])
    return None


def global_namespace(actor: str) -> str:
    """The namespace of the actor's global project (``$HOME``)."""
    return resolve_project(os.path.expanduser("~"), override="").namespace(actor)


def also_searched(here: Project, actor: str) -> str | None:
    """The namespace a prompt in ``here`` also searches: the actor's global one, whose
    memories come back when close in meaning (``retrieval.global_min_similarity``);
    None when ``here`` is the global project itself. The hook and ``kirolearn search``
    ask alike."""
    return None if here.is_global else global_namespace(actor)


def _git_dirs(dot_git: Path) -> tuple[Path, Path] | None:
    """A checkout's git directory and the repository's common one: both its ``.git``
    directory, or for a worktree (its ``.git`` a file pointing into another repository's
    ``.git/worktrees/``) that and the main ``.git``; None: neither."""
    if dot_git.is_dir():
        return dot_git, dot_git
    text = _text(dot_git)
    if text is None or not text.startswith("gitdir:"):
        return None
    gitdir = Path(text[len("gitdir:"):].strip())
    if not gitdir.is_absolute():
        gitdir = dot_git.parent / gitdir
    gitdir = Path(os.path.realpath(gitdir))
    # <main>/.git/worktrees/<name> carries a 'commondir' pointing back to <main>/.git
    found = _text(gitdir / "commondir")
    if not found:
        return None
    common = Path(found)
    if not common.is_absolute():
        common = gitdir / common
    return gitdir, Path(os.path.realpath(common))


def _main_worktree(git_file: Path) -> Path | None:
    """For a worktree's ``.git`` file, the main checkout it belongs to."""
    dirs = _git_dirs(git_file)
    return dirs[1].parent if dirs and dirs[1].name == ".git" else None


def _text(path: Path, limit: int = GIT_FILE_BYTES) -> str | None:
    """A small file of git's, stripped, when it is a regular file (not a FIFO, a device
    or a link at its last step), its first ``limit`` bytes; None otherwise."""
    data = files.read_regular(str(path), limit)
    return None if data is None else data.decode("utf-8", errors="replace").strip()


def valid_ref(ref: str) -> bool:
    """Whether ``ref`` is a name git itself would take for a ref under ``refs/``
    (``git check-ref-format``'s rules): none of ``..``, a component starting with ``.``
    or ending ``.lock``, control characters, space, ``~^:?*[\\``, ``@{``, ``//``; so
    that a ref read from HEAD never names a file outside the git directory."""
    if (not ref.startswith("refs/") or len(ref) > 1024 or ref.endswith(("/", "."))
            or ".." in ref or "//" in ref or "@{" in ref):
        return False
    if any(ord(c) < 0x20 or c in " ~^:?*[\\\x7f" for c in ref):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock")
               for part in ref.split("/"))


def git_head(checkout: str | os.PathLike) -> tuple[str | None, str | None]:
    """The branch a checkout is on (None: detached, or not git) and its commit, read
    from its ``.git`` files as git keeps them (loose refs, then ``packed-refs``): a few
    small reads, no ``git`` process, so every hook can say where its work is. The files
    are untrusted: each is read only as a regular file, bounded, and a ref only when git
    would take its name (``valid_ref``)."""
    dirs = _git_dirs(Path(checkout) / ".git")
    if dirs is None:
        return None, None
    gitdir, common = dirs
    head = _text(gitdir / "HEAD")
    if head is None:
        return None, None
    if not head.startswith("ref: "):
        return None, head if _is_commit(head) else None
    ref = head[len("ref: "):].strip()
    if not valid_ref(ref):
        return None, None
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    for directory in (gitdir, common):
        data = files.read_in(str(directory), ref, GIT_FILE_BYTES)
        if data is None:
            continue
        commit = data.decode("utf-8", errors="replace").strip()
        return branch, commit if _is_commit(commit) else None
    packed = _text(common / "packed-refs", PACKED_REFS_BYTES)
    if packed is None:
        return branch, None  # a branch with no commit yet
    for line in packed.splitlines():
        commit, _, name = line.partition(" ")
        if name == ref and _is_commit(commit):
            return branch, commit
    return branch, None


def blob_id(data: bytes, length: int = 40) -> str:
    """The git blob id of a file's content (SHA-1; SHA-256 for a 64-digit id), as
    ``git hash-object`` says it. (hashlib is imported here: no hook needs it.)"""
    import hashlib

    digest = hashlib.sha1 if length == 40 else hashlib.sha256
    return digest(b"blob %d\0" % len(data) + data).hexdigest()


def _is_commit(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def find_root(cwd: str | os.PathLike, home: str | os.PathLike) -> tuple[Path, bool, Path]:
    """The nearest marked ancestor of cwd (below home when cwd is in it; the filesystem
    root is never one), whether it is the global project, and the checkout: (home,
    True, home) when there is none; a worktree's main checkout and its own directory."""
    home_path = Path(os.path.realpath(home))
    start = Path(os.path.realpath(cwd))
    for directory in (start, *start.parents):
        if directory == home_path or directory == directory.parent:
            break
        for marker in MARKERS:
            candidate = directory / marker
            if not os.path.lexists(candidate):
                continue
            if marker == ".git" and candidate.is_file():
                main = _main_worktree(candidate)
                if main is not None:
                    return main, False, directory
            return directory, False, directory
    return home_path, True, home_path


def resolve_project(cwd: str | os.PathLike | None = None, *, home: str | None = None,
                    override: str | None = None) -> Project:
    """The project for cwd, honouring ``KIROLEARN_PROJECT`` (see module docstring)."""
    cwd = os.getcwd() if cwd is None else cwd
    home = home if home is not None else os.path.expanduser("~")
    override = os.environ.get("KIROLEARN_PROJECT") if override is None else override
    if override:
        if os.path.isdir(override):
            root = os.path.realpath(override)
            return Project(root, sha256_hex(root), False, root)
        root, _, checkout = find_root(cwd, home)
        return Project(str(root), sha256_hex("name:" + override), False, str(checkout))
    root, is_global, checkout = find_root(cwd, home)
    if _connection() is None:
        return Project(str(root), sha256_hex(str(root)), is_global, str(checkout))
    # Connected to a team: named alike on every machine (the global project by its user,
    # so it is nobody else's).
    if is_global:
        return Project(str(root), global_project_id(user()), True, str(checkout))
    origin = git_origin(root)
    return Project(str(root), git_project_id(origin) if origin else sha256_hex(str(root)),
                   False, str(checkout))


def git_project_id(origin: str) -> str:
    """The id of a git project on a connected machine, from its normal origin URL."""
    return sha256_hex(f"git:{origin}")


def global_project_id(name: str) -> str:
    """The id of a user's global project on a connected machine: theirs alone."""
    return sha256_hex(f"global:{name}")
