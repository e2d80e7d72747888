"""Bad input ends in a clear message and changes nothing, never a traceback: every command
of the CLI with hostile arguments, files that are not what they should be, settings out
of range, a database with damaged pages."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3

import click
import pytest
from click.testing import CliRunner
from helpers.cli import here, kl
from helpers.events import make_event, stored_events

from kirolearn import control
from kirolearn.cli import cli

HOSTILE = ["\x00", "-1", "../" * 12 + "etc/passwd", "x" * 5000, "tcp://", "{}", "\u202e"]


def commands(group: click.Group = cli, prefix: tuple[str, ...] = ()):
    """(argv before the arguments, command) of every command, subcommands included."""
    context = click.Context(group)
    for name in sorted(group.list_commands(context)):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def hostile_calls():
    """Each command once per parameter that takes a value, that value hostile, and any
    required argument hostile too."""
    for argv, command in commands():
        if argv[:2] == ("embeddings", "download"):
            continue  # it asks the network for the model (test_model_download.py tries it)
        params = [p for p in command.params if not getattr(p, "is_flag", False)
                  and p.name not in ("help",)]
        required = [p for p in params if isinstance(p, click.Argument) and p.required]
        for value in HOSTILE:
            base = list(argv) + [value] * sum(max(1, p.nargs) for p in required)
            if required:
                yield base
            for option in (p for p in params if isinstance(p, click.Option)):
                yield [*argv, option.opts[0], value] + [value] * len(required)


def test_every_command_with_hostile_arguments_ends_in_a_message(home, monkeypatch, tmp_path):
    for name in ("KIROLEARN_NETWORK_LISTEN", "KIROLEARN_STORAGE_URL"):
        monkeypatch.delenv(name, raising=False)  # put back as they were, whatever start sets
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    calls = list(hostile_calls())
    assert len(calls) > 200
    for argv in calls:
        result = runner.invoke(cli, argv, input="", catch_exceptions=True)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            argv[:4], repr(result.exception), result.output[-500:])
        assert "Traceback" not in result.output, argv[:4]
    assert not control.running(here())


def test_an_import_of_a_binary_or_latin1_file_says_which_lines_and_stores_the_rest(
        daemon, tmp_path):
    good = make_event("prompt", "a good line")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(json.dumps(good).encode() + b"\n" + '{"caf\xe9": 1}\n'.encode("latin-1")
                      + os.urandom(64).replace(b"\n", b"") + b"\n")
    result = kl("import", str(mixed))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "line 2: rejected: not UTF-8 text" in result.stderr
    assert "stored 1, duplicate 0, rejected 2" in result.stdout
    assert [e["event_id"] for e in stored_events()] == [good["event_id"]]


@pytest.mark.parametrize("broken", ["latin1", "folder"])
def test_a_settings_file_that_is_not_utf8_toml_is_named_by_every_command(home, broken):
    settings = home / "config.toml"
    if broken == "folder":
        settings.mkdir()
    else:
        settings.write_bytes("[retrieval]\nmode = \"l\xe9xical\"\n".encode("latin-1"))
    expected = "is a folder" if broken == "folder" else "is not UTF-8 text"
    for command in ("start", "status", "doctor"):
        result = kl(command)
        assert "Traceback" not in result.stdout + result.stderr, command
        assert expected in result.stdout + result.stderr, (command, result)
    assert kl("start").returncode == 1 and not control.running(here())


def test_settings_out_of_range_are_refused_with_the_range(home):
    (home / "config.toml").write_text("[extraction]\nworkers = 100000\n")
    result = kl("start")
    assert result.returncode == 1 and not control.running(here())
    assert "extraction.workers: must be from 0 to 64, got 100000" in result.stderr
    (home / "config.toml").write_text("[retrieval]\nbudget_ms = -5\n")
    assert "retrieval.budget_ms: must not be negative, got -5" in kl("start").stderr
    (home / "config.toml").write_text("[retrieval]\nbudget_ms = 0\n")
    assert "retrieval.budget_ms: must be from 1 to 60000, got 0" in kl("start").stderr
    (home / "config.toml").write_text("[retrieval]\nlimit = 1000\n")
    assert "retrieval.limit: must be from 0 to 100, got 1000" in kl("start").stderr


def test_a_database_with_damaged_pages_is_not_started_on_and_exports_what_it_can(home):
    kl("start", check=True)
    events = [make_event("prompt", f"prompt number {n} " + "lorem ipsum " * 40)
              for n in range(300)]
    results = control.call("ingest", "put_events", {"events": events}, timeout_ms=30_000,
                           home=here())
    assert {r["status"] for r in results["results"]} == {"stored"}
    kl("stop", check=True)
    database = here().db_path
    page = 4096
    reader = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    leaves = [n for (n,) in reader.execute(  # the events' table's own pages, wherever they are
        "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno")]
    reader.close()
    with database.open("r+b") as handle:  # two pages of the events' table overwritten
        for number in (leaves[len(leaves) // 3], leaves[2 * len(leaves) // 3]):
            handle.seek(page * (number - 1))
            handle.write(b"\xde\xad" * (page // 2))
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    started = kl("start")  # up, to say what is wrong and take a good copy; not a success
    try:
        assert started.returncode == 1 and "Traceback" not in started.stderr
        assert "is damaged" in started.stderr and "quick check" not in started.stderr
        with pytest.raises(control.RemoteError, match="is damaged"):
            control.call("ingest", "put_event", {"event": make_event("prompt", "refused")},
                         home=here())
    finally:
        kl("stop", check=True)
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before  # left as it is
    exported = kl("export")
    assert exported.returncode == 1 and "Traceback" not in exported.stderr
    assert "the database is damaged" in exported.stderr and "left out" in exported.stderr
    saved = [json.loads(line) for line in exported.stdout.splitlines()]
    kept = {line["event_id"] for line in saved if "kind" in line}
    assert 200 < len(kept) < 300 and kept <= {e["event_id"] for e in events}
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before
