"""CURVE keys: the daemon's key pair, the clients it allows, and this machine's own pair.

A daemon that listens on TCP (``network.listen``) authenticates and encrypts every
connection with ZeroMQ's CURVE. Under ``$KIROLEARN_HOME/keys/`` (0700):

- ``server.key`` and ``server.key_secret``: the daemon's pair (``kirolearn keys init``);
- ``clients/<NAME>.key``: each client allowed in, by name (``kirolearn keys add``); the
  name is who the client is: the actor its events are stored under;
- ``client.key`` and ``client.key_secret``: this machine's pair when it is a client of
  a daemon elsewhere (made by ``kirolearn connect``).

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


def keys_dir(base: Path | None = None) -> Path:
    return (base or paths.home()) / "keys"


def clients_dir(base: Path | None = None) -> Path:
    return keys_dir(base) / "clients"


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

def init_server(base: Path | None = None) -> KeyPair:
    """Make the daemon's key pair; refused when it has one (every client knows that key)."""
    if read_pair(keys_dir(base), "server") is not None:
        raise KeysError(f"{keys_dir(base) / 'server.key'} exists; its public key is the one"
                        " every client was given (see `kirolearn keys list`)")
    pair = new_pair()
    write_pair(keys_dir(base), "server", pair)
    paths.ensure_private_dir(clients_dir(base))
    return pair


def server_pair(base: Path | None = None) -> KeyPair:
    pair = read_pair(keys_dir(base), "server")
    if pair is None:
        raise KeysError("the daemon has no CURVE key pair to listen on TCP with; make one"
                        " with `kirolearn keys init`")
    return pair


def allowed(base: Path | None = None) -> dict[str, bytes]:
    """The clients let in: name → public key."""
    found = {}
    try:
        entries = sorted(os.scandir(clients_dir(base)), key=lambda e: e.name)
    except FileNotFoundError:
        return {}
    for entry in entries:
        name = entry.name.removesuffix(".key")
        if entry.name.endswith(".key") and NAME.match(name):
            public = _read_fields(Path(entry.path)).get("public-key", b"")
            if Z85.match(public.decode("ascii", "replace")):
                found[name] = public
    return found


def allow(name: str, public_key: str, base: Path | None = None) -> None:
    """Let a client in; refused when the name or the key is already in (revoke first)."""
    check_name(name)
    key = check_public_key(public_key)
    if key == server_pair(base).public:
        raise KeysError("that is the daemon's own public key; give the client's (its"
                        " `kirolearn connect` prints it)")
    for other, other_key in allowed(base).items():
        if other == name:
            raise KeysError(f"{name} is already allowed; `kirolearn keys revoke {name}` first"
                            " to give it another key")
        if other_key == key:
            raise KeysError(f"that key is already allowed as {other}")
    paths.write_private(paths.ensure_private_dir(clients_dir(base)) / f"{name}.key",
                        _certificate(key, None), durable=True)


def revoke(name: str, base: Path | None = None) -> None:
    check_name(name)
    path = clients_dir(base) / f"{name}.key"
    if not path.exists():
        raise KeysError(f"no client is allowed as {name} (see `kirolearn keys list`)")
    path.unlink()


class Keyring:
    """The allowed clients as a daemon process sees them: read again whenever the
    ``clients/`` folder changes, so ``keys add`` and ``keys revoke`` take effect at once,
    without a restart."""

    def __init__(self, base: Path):
        self.base = base
        self._stamp: tuple[int, int] | None = None
        self._names: dict[bytes, str] = {}

    def name_of(self, public_key: bytes | None) -> str | None:
        """The allowed client's name for a raw (32-byte) or Z85 public key, or None."""
        if not public_key:
            return None
        if len(public_key) == 32:
            public_key = z85.encode(public_key)
        try:
            info = os.stat(clients_dir(self.base))
            stamp = (info.st_mtime_ns, info.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._names = {key: name for name, key in allowed(self.base).items()}
            self._stamp = stamp
        return self._names.get(public_key)


# -- a client's side ------------------------------------------------------------------------

def client_pair(base: Path | None = None, create: bool = False) -> KeyPair | None:
    """This machine's pair as a client of a daemon elsewhere (made when ``create``)."""
    pair = read_pair(keys_dir(base), "client")
    if pair is None and create:
        pair = new_pair()
        write_pair(keys_dir(base), "client", pair)
    return pair
