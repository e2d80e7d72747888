"""kirolearn on a real PostgreSQL server: choosing the store, the statements' translation,
the schema's migrations and the one-writer rule. The behaviour both stores share is tested
on both where it is tested (the ``store`` fixture)."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from helpers import kl, make_event
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import config, control, protocol
from kirolearn.db import postgres, schema, writes

LITERALS = st.from_regex(r"'([^']|'')*'", fullmatch=True)
PIECES = st.one_of(st.sampled_from(["SELECT", " ", "x", "?", "?1", "?2", "%", "+n", " +n",
                                    "(", ",", "INDEXED BY idx", "BEGIN IMMEDIATE", "a + b"]),
                   LITERALS)


@given(st.lists(PIECES, max_size=30))
def test_a_statement_keeps_its_literals_and_numbers_its_parameters_as_sqlite(pieces):
    sql = "".join(pieces)
    translated = postgres.translate(sql)
    for literal in re.findall(r"'(?:[^']|'')*'", sql):
        assert literal.replace("%", "%%") in translated
    outside = re.sub(r"'(?:[^']|'')*'", "", sql)
    numbers, highest = [], 0
    for mark in re.findall(r"\?(\d*)", outside):
        highest = max(highest, int(mark)) if mark else highest + 1
        numbers.append(int(mark) if mark else highest)
    assert re.findall(r"%\(p(\d+)\)s", translated) == [str(n) for n in numbers]


def test_the_planner_hints_go_and_the_rest_stays():
    assert postgres.translate("SELECT a + b FROM t INDEXED BY t_x WHERE +n IN (?, ?1)"
                              " AND c LIKE '%?%'") == (
        "SELECT a + b FROM t  WHERE n IN (%(p1)s, %(p1)s) AND c LIKE '%%?%%'")
    assert postgres.translate("BEGIN IMMEDIATE") == "BEGIN"


def test_the_schema_is_migrated_once_and_an_edited_migration_is_refused(postgres_server,
                                                                        monkeypatch):
    url = postgres_server.database()
    conn = writes.connect_writer(url)
    try:
        assert schema.migrate(conn) == []  # done when the writer opened it
        assert schema.check(conn) == ("ok", schema.latest(on_postgres=True))
        version, name, sql = postgres.MIGRATIONS[0]
        monkeypatch.setattr(postgres, "MIGRATIONS", [(version, name, sql + "\n-- edited")])
        with pytest.raises(schema.MigrationError, match="differs from the one applied"):
            schema.migrate(conn)
    finally:
        conn.close()
    assert postgres.SQLITE_SCHEMA[schema.latest(on_postgres=True)] == schema.latest()


def test_one_writer_per_database(postgres_server):
    url = postgres_server.database()
    first = writes.connect_writer(url)
    try:
        with pytest.raises(sqlite3.Error, match="another kirolearn daemon is writing"):
            writes.connect_writer(url)
    finally:
        first.close()
    writes.connect_writer(url).close()  # the lock went with its connection


def test_start_storage_remembers_the_database_for_every_command(home, postgres_server):
    url = postgres_server.database()
    refused = kl("start", "--storage", "mysql://db/kirolearn")
    assert refused.returncode == 1 and "storage.url: a PostgreSQL URL" in refused.stderr
    assert not (home / "config.toml").exists()  # nothing kept of a refused setting
    kl("start", "--storage", url, check=True)
    try:
        event = make_event("prompt", "the team's store is PostgreSQL")
        assert control.call("ingest", "put_event", {"event": event},
                            timeout_ms=5000)["status"] == "stored"
        assert config.load(home)["storage"]["url"] == url
        assert (home / "config.toml").stat().st_mode & 0o777 == 0o600
        assert not (home / "kirolearn.db").exists()
        stats = json.loads(kl("stats", "--json", check=True).stdout)
        assert stats["totals"]["events"] == 1
        assert "(PostgreSQL, schema 1)" in kl("doctor").stdout
        other = kl("restart", check=True)  # a later start, without the option, stays there
        assert other.returncode == 0
        assert json.loads(kl("stats", "--json", check=True).stdout)["totals"]["events"] == 1
    finally:
        kl("stop", check=True)
    postgres.close_pools()


def test_a_database_that_cannot_be_reached_is_said_and_writes_are_unavailable(home,
                                                                             monkeypatch):
    """UNAVAILABLE is what a client keeps its event for (the shim's spool, the import's
    retry): the daemon runs, says why, and takes the events once the server is back."""
    monkeypatch.setenv("KIROLEARN_STORAGE_URL", "postgresql://kirolearn@127.0.0.1:1/none")
    started = kl("start")
    try:
        assert started.returncode == 1
        assert "cannot be written" in started.stderr and "127.0.0.1:1" in started.stderr
        event = make_event("prompt", "kept while the database is away")
        with pytest.raises(protocol.RemoteError, match="UNAVAILABLE: storage cannot write"):
            control.call("ingest", "put_event", {"event": event}, timeout_ms=8000)
    finally:
        kl("stop", check=True)
