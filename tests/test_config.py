"""Settings: defaults, the user's file, environment overrides, and their documentation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kirolearn import config, paths

DOCS = Path(__file__).parent.parent / "docs" / "configuration.md"


def test_defaults_load_without_a_user_file(tmp_path):
    settings = config.load(paths.Home(tmp_path), environ={})
    assert settings["retrieval"]["budget_ms"] == 500
    assert settings["storage"]["batch_idle_s"] == 30


def test_user_file_then_environment(tmp_path):
    (tmp_path / "config.toml").write_text("[retrieval]\nbudget_ms = 300\nlimit = 5\n")
    settings = config.load(paths.Home(tmp_path), environ={"KIROLEARN_RETRIEVAL_LIMIT": "7"})
    assert settings["retrieval"]["budget_ms"] == 300 and settings["retrieval"]["limit"] == 7
    assert settings["retrieval"]["session_tokens"] == 1000  # untouched: the default


def test_a_retired_setting_still_loads(tmp_path):
    """seed.actor (an earlier version's) is let go; an unknown one beside it is not."""
    (tmp_path / "config.toml").write_text("[seed]\nactor = 'user'\n[retrieval]\nlimit = 4\n")
    assert config.load(paths.Home(tmp_path), environ={})["retrieval"]["limit"] == 4
    (tmp_path / "config.toml").write_text("[seed]\nactor = 'user'\nnope = 1\n")
    with pytest.raises(config.ConfigError, match=r"unknown section \[seed\]"):
        config.load(paths.Home(tmp_path), environ={})


@pytest.mark.parametrize("text, message", [
    ("[retrieval]\nbudget = 3\n", "unknown setting retrieval.budget"),
    ("[nope]\nx = 1\n", "unknown section [nope]"),
    ("[retrieval]\nbudget_ms = 'fast'\n", "retrieval.budget_ms"),
    ("[retrieval]\nbudget_ms = -1\n", "must not be negative"),
    ("[retrieval\n", "config.toml"),
    ("[retrieval]\nmode = 'fuzzy'\n", "retrieval.mode: must be one of lexical, semantic,"
     " hybrid, got 'fuzzy'"),
    ("[extraction]\nstrategy = 'magic'\n", "extraction.strategy: must be one of"),
])
def test_bad_user_settings_are_named(tmp_path, text, message):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(config.ConfigError, match=message.replace("[", r"\[")):
        config.load(paths.Home(tmp_path), environ={})


def test_bad_environment_value_is_named(tmp_path):
    with pytest.raises(config.ConfigError, match="KIROLEARN_STORAGE_LEASE_S"):
        config.load(paths.Home(tmp_path), environ={"KIROLEARN_STORAGE_LEASE_S": "soon"})


def test_every_setting_is_documented_with_its_default():
    text = DOCS.read_text()
    for section, values in config.defaults().items():
        for key, default in values.items():
            row = next((line for line in text.splitlines()
                        if line.startswith(f"| `{section}.{key}`")), None)
            assert row is not None, f"{section}.{key} is not in docs/configuration.md"
            shown = json.dumps(default) if isinstance(default, bool) else None  # as in TOML
            assert (f"`{default!r}`".replace("'", '"') in row or f"`{default}`" in row
                    or f"`{shown}`" in row), row
