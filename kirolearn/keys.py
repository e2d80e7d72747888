"""CURVE keys: the daemon's key pair, the clients it allows, and this machine's own pair.

A daemon that listens on TCP (``network.listen``) authenticates and encrypts every
connection with ZeroMQ's CURVE. Under ``$KIROLEARN_HOME/keys/`` (0700):

- ``server.key`` and ``server.key_secret``: the daemon's pair (``kirolearn keys init``);
- ``clients/<NAME>.key``: each client allowed in, by name (``kirolearn keys add``); the
  name is who the client is: the actor whose namespaces it may write (``access``);
- ``clients/<NAME>.grants``: the projects a client was granted (``kirolearn keys grant``),
  one project id a line;
- ``workers/<NAME>.key``: each extraction worker allowed on storage's worker ports
  (``kirolearn keys add --worker``); a client key is not let in there, nor a worker key
  to a client's requests;
- ``client.key`` and ``client.key_secret``: this machine's pair when it is a client of
  a daemon elsewhere (made by ``kirolearn connect``); ``worker.key`` and
  ``worker.key_secret``: its pair as an extraction worker of one.

Files use ZeroMQ's certificate format (``zmq.auth`` and ``zcert`` read them). Keys are
Z85 text, 40 characters for 32 bytes. Standard library and pyzmq's core only: the
shims load the client pair on every hook.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import NamedTuple

import zmq
from zmq.utils import z85

from kirolearn import paths

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
Z85 = re.compile(r"^[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")
_FIELD = re.compile(r'^\s*(public-key|secret-key)\s*=\s*"([^"]*)"\s*$', re.MULTILINE)


class KeysError(ValueError):
    """A key or a name that cannot be used, or a key file that is missing or broken; the
    message says which and what to do."""


class KeyPair(NamedTuple):
    public: bytes  # Z85, 40 bytes
    secret: bytes


def keys_dir(home: paths.Home) -> Path:
    return home.root / "keys"


def clients_dir(home: paths.Home) -> Path:
    return keys_dir(home) / "clients"


def workers_dir(home: paths.Home) -> Path:
    return keys_dir(home) / "workers"


CLIENT, WORKER = "client", "worker"  # the kinds of key a daemon lets in


def kind_dir(kind: str, home: paths.Home) -> Path:
    return workers_dir(home) if kind == WORKER else clients_dir(home)


def check_public_key(text: str) -> bytes:
    """A client's or server's public key as given by a person: Z85, 40 characters."""
    text = text.strip()
    if not Z85.match(text):
        raise KeysError(f"{text[:60]!r} is not a CURVE public key (40 characters of Z85,"
                        " as `kirolearn keys init` or `kirolearn connect` prints it)")
    return text.encode("ascii")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise KeysError(f"{name!r} is not a client name: 1-64 letters, digits and ._@-,"
                        " starting with a letter or digit")
    return name


def _certificate(public: bytes, secret: bytes | None) -> bytes:
    lines = [f"#   ****  kirolearn CURVE certificate, {time.strftime('%Y-%m-%d')}  ****",
             "#   ZeroMQ CURVE **Secret** Certificate" if secret else
             "#   ZeroMQ CURVE Public Certificate",
             "#   Keep the secret key private." if secret else "", "",
             "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return ("\n".join(lines) + "\n").encode("ascii")


def _read_fields(path: Path) -> dict[str, bytes]:
    try:
        text = path.read_text("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeysError(f"cannot read {path}: {exc}") from exc
    return {name: value.encode("ascii") for name, value in _FIELD.findall(text)}


def write_pair(directory: Path, stem: str, pair: KeyPair) -> None:
    """``<stem>.key`` (the public key, to hand out) and ``<stem>.key_secret`` (0600)."""
    paths.ensure_private_dir(directory)
    paths.write_private(directory / f"{stem}.key", _certificate(pair.public, None), durable=True)
    paths.write_private(directory / f"{stem}.key_secret", _certificate(pair.public, pair.secret),
                        durable=True)


def read_pair(directory: Path, stem: str) -> KeyPair | None:
    """The pair in ``<stem>.key_secret``, or None when there is none; KeysError when the
    file is broken or its keys do not belong together."""
    path = directory / f"{stem}.key_secret"
    if not path.exists():
        return None
    fields = _read_fields(path)
    public, secret = fields.get("public-key", b""), fields.get("secret-key", b"")
    try:
        if zmq.curve_public(secret) != public:
            raise ValueError("the public key is not the secret key's")
    except (ValueError, zmq.ZMQError) as exc:
        raise KeysError(f"{path} is not a usable key pair: {exc}") from exc
    return KeyPair(public, secret)


def new_pair() -> KeyPair:
    return KeyPair(*zmq.curve_keypair())


# -- the daemon's side ----------------------------------------------------------------------

def init_server(home: paths.Home) -> KeyPair:
    """Make the daemon's key pair; refused when it has one (every client knows that key)."""
    if read_pair(keys_dir(home), "server") is not None:
        raise KeysError(f"{keys_dir(home) / 'server.key'} exists; its public key is the one"
                        " every client was given (see `kirolearn keys list`)")
    pair = new_pair()
    write_pair(keys_dir(home), "server", pair)
    paths.ensure_private_dir(clients_dir(home))
    return pair


def server_pair(home: paths.Home) -> KeyPair:
    pair = read_pair(keys_dir(home), "server")
    if pair is None:
        raise KeysError("the daemon has no CURVE key pair to listen on TCP with; make one"
                        " with `kirolearn keys init`")
    return pair


def allowed(home: paths.Home, kind: str = CLIENT) -> dict[str, bytes]:
    """The clients (or workers) let in: name → public key."""
    found = {}
    try:
        entries = sorted(os.scandir(kind_dir(kind, home)), key=lambda e: e.name)
    except FileNotFoundError:
        return {}
    for entry in entries:
        name = entry.name.removesuffix(".key")
        if entry.name.endswith(".key") and NAME.match(name):
            public = _read_fields(Path(entry.path)).get("public-key", b"")
            if Z85.match(public.decode("ascii", "replace")):
                found[name] = public
    return found


NEW_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._@-]{0,62}[A-Za-z0-9])?$")


def look_alike(name: str) -> str:
    """What a name reads as to a person: case and the kind of separator aside (``Alice``,
    ``alice``, ``ALICE``; ``bob.smith``, ``bob-smith``, ``bob_smith``)."""
    return re.sub(r"[._@-]+", "-", name.casefold()).strip("-")


def allow(name: str, public_key: str, home: paths.Home, kind: str = CLIENT) -> None:
    """Let a client (or a worker) in; refused when the name or the key is already in, as
    either kind (revoke first), and when the name reads as one already in (``Alice``
    beside ``alice``: each is its own actor, and no one could tell them apart)."""
    check_name(name)
    if not NEW_NAME.match(name):
        raise KeysError(f"{name!r} is not a client name: it must end with a letter or digit")
    key = check_public_key(public_key)
    if key == server_pair(home).public:
        raise KeysError("that is the daemon's own public key; give the client's (its"
                        " `kirolearn connect` prints it)")
    for other_kind in (CLIENT, WORKER):
        for other, other_key in allowed(home, other_kind).items():
            if other == name:
                raise KeysError(f"{name} is already allowed (as a {other_kind});"
                                f" `kirolearn keys revoke {name}` first to give it another key")
            if other_key == key:
                raise KeysError(f"that key is already allowed as {other} (a {other_kind})")
            if look_alike(other) == look_alike(name):
                raise KeysError(f"{name!r} reads as {other!r}, already allowed (as a"
                                f" {other_kind}): choose a name no one could take for it")
    paths.write_private(paths.ensure_private_dir(kind_dir(kind, home)) / f"{name}.key",
                        _certificate(key, None), durable=True)


def revoke(name: str, home: paths.Home) -> str:
    """Shut a client or a worker out (its grants go with it); which kind it was."""
    check_name(name)
    for kind in (CLIENT, WORKER):
        path = kind_dir(kind, home) / f"{name}.key"
        if path.exists():
            (clients_dir(home) / f"{name}.grants").unlink(missing_ok=True)
            path.unlink()
            return kind
    raise KeysError(f"no client or worker is allowed as {name} (see `kirolearn keys list`)")


# -- grants: projects a client may read beside those it contributed to (``access``) ----------

PROJECT_ID = re.compile(r"^[0-9a-f]{64}$")


def grants(name: str, home: paths.Home) -> set[str]:
    """The project ids granted to the client ``name``."""
    try:
        text = (clients_dir(home) / f"{name}.grants").read_text("ascii")
    except (OSError, UnicodeDecodeError):
        return set()
    return {line.strip() for line in text.splitlines() if PROJECT_ID.match(line.strip())}


def grant(name: str, project_id: str, home: paths.Home, revoke: bool = False) -> None:
    """Grant (or, with ``revoke``, take back) the client ``name`` the project's memories."""
    check_name(name)
    if name not in allowed(home):
        raise KeysError(f"no client is allowed as {name} (see `kirolearn keys list`)")
    if not PROJECT_ID.match(project_id):
        raise KeysError(f"{project_id!r} is not a project id (64 hex digits)")
    held = grants(name, home)
    if revoke and project_id not in held:
        raise KeysError(f"{name} was not granted {project_id}")
    held = held - {project_id} if revoke else held | {project_id}
    paths.write_private(clients_dir(home) / f"{name}.grants",
                        "".join(f"{p}\n" for p in sorted(held)).encode("ascii"), durable=True)


class Keyring:
    """The allowed keys of one kind as a daemon process sees them: read again whenever
    their folder changes, so ``keys add``, ``keys grant`` and ``keys revoke`` take effect
    at once, without a restart."""

    def __init__(self, home: paths.Home, kind: str = CLIENT):
        self.home = home
        self.kind = kind
        self._stamp: tuple[int, int] | None = None
        self._names: dict[bytes, str] = {}
        self._grants: dict[str, set[str]] = {}

    def _refresh(self) -> None:
        """Read the keys again if their folder changed since the last look."""
        try:
            info = os.stat(kind_dir(self.kind, self.home))
            stamp = (info.st_mtime_ns, info.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        self._names = {key: name for name, key in allowed(self.home, self.kind).items()}
        self._grants = ({name: grants(name, self.home) for name in self._names.values()}
                        if self.kind == CLIENT else {})
        self._stamp = stamp

    def name_of(self, public_key: bytes | None) -> str | None:
        """The allowed name for a raw (32-byte) or Z85 public key, or None."""
        if not public_key:
            return None
        if len(public_key) == 32:
            public_key = z85.encode(public_key)
        self._refresh()
        return self._names.get(public_key)

    def names(self) -> set[str]:
        self._refresh()
        return set(self._names.values())

    def grants_of(self, name: str) -> set[str]:
        self._refresh()
        return self._grants.get(name, set())


# -- a client's side ------------------------------------------------------------------------

def client_pair(home: paths.Home, create: bool = False,
                kind: str = CLIENT) -> KeyPair | None:
    """This machine's pair as a client (or an extraction worker, ``kind``) of a daemon
    elsewhere (made when ``create``)."""
    pair = read_pair(keys_dir(home), kind)
    if pair is None and create:
        pair = new_pair()
        write_pair(keys_dir(home), kind, pair)
    return pair
