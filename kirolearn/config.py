"""Settings: packaged defaults, then ``$KIROLEARN_HOME/config.toml``, then environment.

Only keys present in ``configs/default.toml`` exist; an unknown key or a value of
the wrong type in the user's file is a ConfigError naming it, so a typo never
silently does nothing. Environment overrides are ``KIROLEARN_<SECTION>_<KEY>``.
"""

from __future__ import annotations

import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from kirolearn import paths, transport
from kirolearn.project import SCOPES

MODES = ("lexical", "semantic", "hybrid")  # how a search ranks: words, meaning, or both

# Settings that take one of a few values: any other is refused when the settings load,
# so a daemon never starts with one of its processes unable to.
CHOICES = {
    ("retrieval", "mode"): MODES,
    ("retrieval", "stale_records"): ("leave_out", "mark"),
    ("mcp", "scope"): SCOPES,
    ("extraction", "strategy"): ("heuristic", "openai", "anthropic", "command"),
}


# Settings of earlier versions, read and let go: a file that sets one still loads.
RETIRED = {("seed", "actor")}  # seeded commits are the project's history, by author

MAX_WORKERS = 64  # extraction workers one daemon runs, at most
# Numbers outside these bounds are refused when the settings load (any other number
# setting must be 0 or more): a typo never starts a hundred thousand processes.
RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("extraction", "workers"): (0, MAX_WORKERS),
    ("retrieval", "limit"): (0, 100),
    ("retrieval", "budget_ms"): (1, 60_000),
    ("retrieval", "min_similarity"): (-1, 1),
    ("retrieval", "global_min_similarity"): (-1, 1),
    ("extraction", "merge_min_similarity"): (0, 1),
    ("viewer", "port"): (0, 65_535),
    ("backup", "keep"): (1, 10_000),
    ("logging", "backups"): (0, 1_000),
}


class ConfigError(ValueError):
    pass


def defaults() -> dict[str, dict[str, Any]]:
    text = resources.files("kirolearn.configs").joinpath("default.toml").read_text("utf-8")
    return tomllib.loads(text)


def _coerce(name: str, default: Any, value: Any) -> Any:
    """A setting's value as its default's type (from the settings file or, as text,
    from the environment), or ConfigError saying what was expected."""
    if isinstance(default, bool):
        coerced = _as_bool(value)
    elif isinstance(default, int | float):
        coerced = _as_number(name, type(default), value)
    elif isinstance(default, str):
        coerced = value if isinstance(value, str) else None
    elif isinstance(default, list):  # a list of text; in the environment, split on ':'
        if isinstance(value, str):
            return [part for part in value.split(os.pathsep) if part]
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
        raise ConfigError(f"{name}: expected a list of strings, got {value!r}")
    else:
        coerced = None
    if coerced is None:
        raise ConfigError(f"{name}: expected {type(default).__name__}, got {value!r}")
    return coerced


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
    return None


def _as_number(name: str, kind: type, value: Any) -> int | float | None:
    """None: not a number at all."""
    try:
        number = kind(value) if isinstance(value, str) else value
    except ValueError:
        return None
    if not isinstance(number, int | float) or isinstance(number, bool):
        return None
    if kind is int and not float(number).is_integer():
        raise ConfigError(f"{name}: expected an integer, got {value!r}")
    if number < 0:
        raise ConfigError(f"{name}: must not be negative, got {value!r}")
    return kind(number)


def load(home: paths.Home, environ: dict[str, str] | None = None) -> dict:
    """The effective settings as ``{section: {key: value}}``: the defaults, the user's
    settings file over them, the environment (``KIROLEARN_<SECTION>_<KEY>``) over that;
    each checked."""
    settings = defaults()
    environ = os.environ if environ is None else environ
    if home.config_file.exists():
        _apply_file(settings, home.config_file)
    for section, values in settings.items():
        for key in values:
            env_name = f"KIROLEARN_{section}_{key}".upper()
            if env_name in environ:
                values[key] = _coerce(env_name, values[key], environ[env_name])
    _check(settings)
    return settings


def _apply_file(settings: dict, user_file: Path) -> None:
    """The settings file's values over ``settings`` (a retired setting is ignored)."""
    for section, values in _read_toml(user_file).items():
        if isinstance(values, dict) and all((section, key) in RETIRED for key in values):
            continue
        if section not in settings or not isinstance(values, dict):
            raise ConfigError(f"{user_file}: unknown section [{section}]")
        for key, value in values.items():
            if (section, key) in RETIRED:
                continue
            if key not in settings[section]:
                raise ConfigError(f"{user_file}: unknown setting {section}.{key}")
            settings[section][key] = _coerce(f"{section}.{key}", settings[section][key], value)


def _check(settings: dict) -> None:
    """Each setting within its range (``RANGES``) and choices (``CHOICES``); the listen
    endpoints and the storage URL well formed."""
    if settings["network"]["listen"]:
        try:
            transport.tcp_endpoints(settings["network"]["listen"])
        except ValueError as exc:
            raise ConfigError(f"network.listen: {exc}") from exc
    _check_storage_url(settings["storage"]["url"])
    for section, values in settings.items():
        for key, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                low, high = RANGES.get((section, key), (0, math.inf))
                if not low <= value <= high:
                    bound = f"from {low:g} to {high:g}" if high != math.inf else f"{low:g} or more"
                    raise ConfigError(f"{section}.{key}: must be {bound}, got {value!r}")
    for (section, key), allowed in CHOICES.items():
        if settings[section][key] not in allowed:
            raise ConfigError(f"{section}.{key}: must be one of {', '.join(allowed)},"
                              f" got {settings[section][key]!r}")


def _read_toml(path: Path) -> dict:
    """The user's settings file, or ConfigError saying what is wrong with it."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; the settings file must be a TOML file")
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start + 1}); save it as"
                          " UTF-8 TOML") from exc
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _check_storage_url(url: str) -> str:
    if url and not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"storage.url: a PostgreSQL URL (postgresql://USER@HOST:PORT/DB)"
                          f" or empty for the SQLite file, got {url.split('@')[-1]!r}")
    return url


def storage_url(home: paths.Home, environ: dict[str, str] | None = None) -> str:
    """``storage.url`` alone: where the store is stays known (to ``stats``, ``export``,
    ``status``) while another setting is broken."""
    environ = os.environ if environ is None else environ
    if "KIROLEARN_STORAGE_URL" in environ:
        return _check_storage_url(environ["KIROLEARN_STORAGE_URL"])
    user_file = home.config_file
    user = _read_toml(user_file) if user_file.exists() else {}
    url = user.get("storage", {}).get("url", "") if isinstance(user.get("storage"), dict) else ""
    if not isinstance(url, str):
        raise ConfigError(f"storage.url: expected a string, got {url!r}")
    return _check_storage_url(url)


def remember(section: str, key: str, value: Any, home: paths.Home) -> None:
    """Set one setting in the home's ``config.toml`` (made if missing, private: it may
    hold a database URL), keeping the rest of the file as it was."""
    import tomlkit

    user_file = home.config_file
    document = (tomlkit.parse(user_file.read_text("utf-8")) if user_file.exists()
                else tomlkit.document())
    before = user_file.read_text("utf-8") if user_file.exists() else None
    document.setdefault(section, tomlkit.table())[key] = value
    paths.ensure_private_dir(user_file.parent)
    _write_private(user_file, tomlkit.dumps(document))
    try:
        load(home, environ={})  # a setting this kirolearn would refuse is not kept
    except ConfigError:
        if before is None:
            user_file.unlink()
        else:
            _write_private(user_file, before)
        raise


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)

