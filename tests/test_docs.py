"""The README and docs stay true to the code."""

from __future__ import annotations

from pathlib import Path

import click

from kirolearn import protocol
from kirolearn.cli import MODULES, cli

ROOT = Path(__file__).parent.parent


def commands() -> dict[str, click.Command]:
    context = click.Context(cli)
    return {name: cli.get_command(context, name) for name in cli.list_commands(context)}


def test_every_command_is_found_in_the_module_named_for_it():
    import importlib

    for module, names in MODULES.items():
        found = importlib.import_module(f"kirolearn.cli.{module}").COMMANDS
        assert tuple(command.name for command in found) == names


def test_every_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in commands():
        assert f"`kirolearn {name}" in readme, f"kirolearn {name} is not documented"


def test_every_command_shows_an_example_in_its_help():
    for name, command in commands().items():
        assert "Example" in (command.help or ""), f"kirolearn {name} --help has no example"


def test_every_error_code_is_in_the_protocol_doc():
    doc = (ROOT / "docs" / "protocol.md").read_text()
    for code in protocol.ErrorCode:
        assert f"| {int(code)} | `{code.name}` |" in doc


def test_quick_start_has_the_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in quick.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2 and commands[0].endswith("kirolearn start")
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
