"""kirolearn on a real PostgreSQL server: choosing the store, the statements' translation,
the schema's migrations and the one-writer rule. The behaviour both stores share is tested
on both where it is tested (the ``store`` fixture)."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from helpers import kl, make_db, make_event
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import config, control, protocol
from kirolearn.db import fts, postgres, schema, writes
from kirolearn.search import searcher

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
        monkeypatch.setattr(postgres, "MIGRATIONS", [(version, name, sql + "\n-- edited"),
                                                     *postgres.MIGRATIONS[1:]])
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
        assert f"(PostgreSQL, schema {schema.latest(on_postgres=True)})" in kl("doctor").stdout
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


def record(n: int, title: str, summary: str = "", facts: tuple[str, ...] = ()) -> dict:
    return {"record_id": f"R{n:025d}", "namespace": "/team/project/p/", "title": title,
            "summary": summary, "facts": list(facts), "concepts": [], "files_touched": [],
            "observation_type": "discovery", "strategy": "heuristic",
            "source_event_ids": [f"E{n:025d}"], "created_at": "2026-01-01T00:00:00+00:00"}


def term_counts(url: str) -> dict[str, int]:
    conn = writes.connect_writer(url)
    try:
        return dict(conn.execute("SELECT term, docs FROM record_terms WHERE docs > 0"))
    finally:
        conn.close()


def test_records_written_in_bulk_are_counted_as_one_by_one(postgres_server):
    """The search's term counts after a bulk load (counted once) are those its trigger
    keeps record by record, and the trigger counts again afterwards."""
    records = [record(n, f"Retry the webhook {n % 3}", "backoff and retries",
                      (f"file{n % 2}.py edited",)) for n in range(7)]
    one_by_one, bulk = postgres_server.database(), postgres_server.database()
    for url, write in ((one_by_one, lambda conn, rs: [writes.insert_record(conn, r) for r in rs]),
                       (bulk, writes.insert_records)):
        conn = writes.connect_writer(url)
        conn.execute("BEGIN")
        write(conn, records[:6])
        conn.execute("COMMIT")
        writes.insert_record(conn, records[6])
        conn.close()
    counted = term_counts(one_by_one)
    assert counted["retri"] == 7 and counted["file0.py"] == 4
    assert term_counts(bulk) == counted


def test_an_identifier_is_found_as_one_word_in_records_written_before_it_was(postgres_server,
                                                                             monkeypatch):
    """Migration 2 indexes an identifier joined by underscores as one lexeme, in the
    records already there too; a query for it looks that lexeme up."""
    url = postgres_server.database()
    records = [record(n, title, summary) for n, (title, summary) in enumerate([
                   ("Speed up `Refresh_User_Repository`", "cached the lookups"),
                   ("Refresh the user repository nightly", "a cron job"),
                   ("Billing export", "CSV columns")])]
    with monkeypatch.context() as before:
        before.setattr(postgres, "MIGRATIONS", postgres.MIGRATIONS[:1])
        make_db(url, records)
    writes.connect_writer(url).close()  # migrated to the latest
    assert term_counts(url)["refresh_user_repository"] == 1
    found = searcher.Searcher(url)
    try:
        result = found.search("/team/project/p/", "why is `refresh_user_repository` slow", 10,
                              600_000)
    finally:
        found.close()
    assert result.outcome == "ok"
    assert [r["title"] for r in result.records][:2] == [
        "Speed up `Refresh_User_Repository`", "Refresh the user repository nightly"]


@pytest.fixture(scope="module")
def migrated(postgres_server):
    """A database with kirolearn's schema, for statements that change nothing."""
    url = postgres_server.database()
    writes.connect_writer(url).close()
    return url


@given(words=st.text(alphabet="aB_`.( )-9é", max_size=20))
def test_a_query_names_an_identifier_by_the_lexeme_the_index_keeps(migrated, words):
    conn = postgres.connect(migrated)
    try:
        kept = conn.execute("SELECT tsvector_to_array(kirolearn_identifiers(?))",
                            (words,)).fetchone()[0]
    finally:
        conn.close()
    whole = postgres.identifier(words)
    if whole is not None:
        assert kept == [whole]
    elif "_" not in words:
        assert kept == []


def test_a_hyphenated_word_is_counted_and_found_by_its_whole_lexeme(migrated):
    conn = postgres.connect(migrated)
    try:
        assert postgres.index_terms(conn, ["cursor-based", "`Cursor-Based`", "N+1", "a_b-c"]) \
            == [("cursor-bas",), ("cursor-bas",), ("n", "+1"), ("a", "b-c", "b", "c")]
        query, args = postgres.tsquery(["`Cursor-Based`", "N+1"])
        assert conn.execute(f"SELECT CAST({query} AS text)", args).fetchone()[0] == (
            "'cursor-bas' & 'cursor' & 'base' | 'n' <-> '+1'")
    finally:
        conn.close()


def test_a_window_ranked_by_intersected_bitmaps_ranks_as_the_planner_would(postgres_server,
                                                                           monkeypatch):
    url = postgres_server.database()
    records = [record(n, f"retry the webhook {'twice ' * (n % 4)}", f"note {n}")
               for n in range(60)]
    conn = writes.connect_writer(url)
    conn.execute("BEGIN")
    writes.insert_records(conn, records)
    conn.execute("COMMIT")
    conn.close()
    reader = postgres.connect(url, readonly=True)
    try:
        ranked = fts.rank(reader, ["/team/project/p/"], '"twice"', 5, since_id=20)
        monkeypatch.setattr(postgres, "SCANNED_IDS_MAX", 0)
        assert fts.rank(reader, ["/team/project/p/"], '"twice"', 5, since_id=20) == ranked
        assert len(ranked) == 5 and all(i > 20 for i, _ in ranked)
        assert reader.execute("SHOW enable_indexscan").fetchone()[0] == "on"  # for it alone
    finally:
        reader.close()
