"""The README and docs stay true to the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
from helpers.events import stored_events
from helpers.waits import wait_for

from kirolearn import protocol
from kirolearn.agents import AGENTS
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


def quick_start() -> str:
    return (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_the_quick_start_names_every_agent():
    line = next(line for line in quick_start().splitlines()
                if line.startswith("kirolearn install --agent"))
    named = set(re.findall(r"[\w-]+", line.partition("#")[2])) - {"or"}
    assert named | {"claude-code"} == set(AGENTS)


def test_the_readmes_agent_tables_have_a_row_for_each_agent():
    """Both tables of the Agents section: a row per agent of the registry, by its title
    (a row may name two agents)."""
    agents = (ROOT / "README.md").read_text().split("\n## Agents\n", 1)[1].split("\n## ", 1)[0]
    tables = re.findall(r"^\| agent \|.*\n\|[- |]+\n((?:\|.*\n)+)", agents, re.M)
    assert len(tables) == 2
    titles = {agent.title for agent in AGENTS.values()}
    for rows in tables:
        named = [title.strip() for row in rows.splitlines()
                 for title in row.split("|")[1].split(",")]
        assert sorted(named) == sorted(titles)


def test_the_quick_starts_hook_check_works_as_written(daemon, tmp_path):
    """The README's line that runs a hook by hand, run as written in a project: the
    shim answers, and its prompt is stored."""
    line = next(line for line in quick_start().splitlines() if line.startswith("echo '"))
    project = tmp_path / "app"
    (project / ".git").mkdir(parents=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", line], cwd=project, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "" or "kirolearn" in done.stdout
    wait_for(lambda: any(e["kind"] == "prompt" and e["body"]["content"]
                         == "how do we parse the config?" for e in stored_events()),
             message="the prompt stored")
