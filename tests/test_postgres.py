"""kirolearn on a real PostgreSQL server: choosing the store, one schema and one set of
statements for both dialects, the schema's migrations and the one-writer rule. The
behaviour both stores share is tested on both where it is tested (the ``store``
fixture)."""

from __future__ import annotations

import json
import re

import pytest
from helpers.cli import here, kl
from helpers.events import NAMESPACE, make_db, make_event
from hypothesis import given, settings
from hypothesis import strategies as st

from kirolearn import config, control, db, paths, protocol
from kirolearn.db import errors, fts, postgres, schema, writes
from kirolearn.db.store import Params
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request

# What each dialect keeps for its own full-text search, beside the shared tables.
SEARCH_TABLES = {"sqlite": {*(f"{index}{part}" for index in ("memory_records_fts",
                                                              "record_changes_fts")
                              for part in ("", "_config", "_data", "_docsize", "_idx")),
                            "memory_records_fts_vocab", "sqlite_sequence"},
                 "postgres": {"record_terms"}}
# PostgreSQL's generated tsvectors
SEARCH_COLUMNS = {("memory_records", "search"), ("memory_records", "changes_search")}


def sqlite_shape(conn) -> dict:
    """Per table: its columns (name → NOT NULL), primary key, unique column sets and
    the columns its CHECK constraints name."""
    shape = {}
    tables = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if table in SEARCH_TABLES["sqlite"]:
            continue
        info = conn.execute(f"SELECT name, \"notnull\", pk FROM pragma_table_info('{table}')"
                            ).fetchall()
        columns = {name: bool(notnull or pk) for name, notnull, pk in info}
        primary = tuple(name for name, _, pk in sorted(info, key=lambda r: r[2]) if pk)
        unique = {tuple(name for (name,) in conn.execute(
                      f"SELECT name FROM pragma_index_info('{index}') ORDER BY seqno"))
                  for _, index, is_unique, origin, _ in conn.execute(
                      f"SELECT * FROM pragma_index_list('{table}')")
                  if is_unique and origin == "u"}
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = $1",
                              (table,)).fetchone()
        checks = set(re.findall(r"CHECK \((\w+) IN", sql))
        shape[table] = {"columns": columns, "primary": primary, "unique": unique,
                        "checks": checks}
    return shape


def postgres_shape(conn) -> dict:
    shape = {}
    tables = [name for (name,) in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
    for table in tables:
        if table in SEARCH_TABLES["postgres"]:
            continue
        columns = {name: nullable == "NO" for name, nullable in conn.execute(
            "SELECT column_name, is_nullable FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = $1", (table,))
            if (table, name) not in SEARCH_COLUMNS}
        constraints: dict[str, dict[str, tuple]] = {"p": {}, "u": {}, "c": {}}
        for kind, name, column in conn.execute(
                "SELECT c.contype, c.conname, a.attname FROM pg_constraint c"
                " JOIN pg_class t ON t.oid = c.conrelid"
                " JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) ON true"
                " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum"
                " WHERE t.relname = $1 AND c.contype IN ('p', 'u', 'c') ORDER BY c.conname, k.n",
                (table,)):
            constraints[kind][name] = (*constraints[kind].get(name, ()), column)
        shape[table] = {"columns": columns,
                        "primary": next(iter(constraints["p"].values()), ()),
                        "unique": set(constraints["u"].values()),
                        "checks": {c for cols in constraints["c"].values() for c in cols}}
    return shape


def test_both_stores_hold_the_same_tables_columns_and_constraints(postgres_server, tmp_path):
    """After all of each dialect's migrations (the schemas are kept in step by hand:
    this is what says when they are not)."""
    lite = db.connect_writer(tmp_path / "k.db")
    pg = db.connect_writer(postgres_server.database())
    try:
        ours, theirs = sqlite_shape(lite), postgres_shape(pg)
    finally:
        lite.close()
        pg.close()
    assert set(ours) == set(theirs)
    for table in ours:
        assert ours[table] == theirs[table], table


# (no NUL: PostgreSQL's text cannot hold one, and the connection stores it as U+FFFD)
VALUES = st.one_of(st.integers(-2**62, 2**62),
                   st.text(st.characters(blacklist_characters="\x00"), max_size=12), st.none(),
                   st.floats(allow_nan=False, allow_infinity=False, width=32))


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(st.one_of(VALUES.map(lambda v: ("one", v)),
                                st.lists(st.integers(0, 9), min_size=1, max_size=4).map(
                                    lambda v: ("list", v))), min_size=1, max_size=8))
def test_parameters_are_numbered_as_added_and_read_alike_by_both(migrated, tmp_path_factory,
                                                                 parts):
    """A statement built with Params runs as written on both dialects: every value comes
    back where it was put, the lists' too."""
    lite = db.connect_writer(tmp_path_factory.mktemp("p") / "k.db")
    pg = db.connect_reader(migrated)
    try:
        for conn in (lite, pg):
            p = Params()
            selected = []
            for kind, value in parts:
                if kind == "one":
                    selected.append(f"CAST({p(value)} AS TEXT)" if isinstance(value, str | None)
                                    else p(value))
                else:
                    selected.append(f"(SELECT count(*) FROM (SELECT 1 AS x) one"
                                    f" WHERE x IN {p.list(value)})")
            row = conn.execute(f"SELECT {', '.join(selected)}", p.values).fetchone()
            expected = [value if kind == "one" else int(1 in value) for kind, value in parts]
            assert [pytest.approx(v) if isinstance(v, float) else v for v in expected] == \
                list(row), conn.name
    finally:
        lite.close()
        pg.close()


@pytest.mark.parametrize(("sql", "params", "answer"), [
    ("SELECT ?", (1,), None), ("SELECT :name", (1,), None),  # another dialect's: refused
    ("SELECT 1 -- and ?", (), 1), ('SELECT 1 AS "a?"', (), 1),  # a mark in a comment or name
    ("SELECT 2 +x FROM (SELECT 1 AS x) t", (), 3), ("SELECT '%?' || $1", ("!",), "%?!")])
def test_a_statement_runs_as_written_on_both(migrated, tmp_path, sql, params, answer):
    """No translation: what a statement says is what both run (a placeholder of another
    dialect is the store's error, never guessed at; a mark in a comment, a quoted name
    or a text, and a plus sign, are what they are)."""
    lite = db.connect_writer(tmp_path / "k.db")
    pg = db.connect_reader(migrated)
    try:
        for conn in (lite, pg):
            if answer is None:
                with pytest.raises(errors.StoreError):
                    conn.execute(sql, params)
            else:
                assert conn.execute(sql, params).fetchone() == (answer,), conn.name
    finally:
        lite.close()
        pg.close()


def test_a_duplicate_is_a_conflict_on_both(migrated, tmp_path):
    lite = db.connect_writer(tmp_path / "k.db")
    pg = db.connect_writer(migrated)
    try:
        for conn in (lite, pg):
            conn.execute("INSERT INTO tombstones VALUES ($1, $2, $3)", ("mr_x", "/n/", "t"))
            with pytest.raises(errors.StoreConflict):
                conn.execute("INSERT INTO tombstones VALUES ($1, $2, $3)", ("mr_x", "/n/", "t"))
            conn.execute("DELETE FROM tombstones WHERE record_id = $1", ("mr_x",))
    finally:
        lite.close()
        pg.close()


def test_the_schema_is_migrated_once_and_an_edited_migration_is_refused(postgres_server,
                                                                        monkeypatch):
    url = postgres_server.database()
    conn = db.connect_writer(url)
    try:
        assert schema.migrate(conn) == []  # done when the writer opened it
        assert schema.check(conn) == ("ok", schema.latest("postgres"))
        version, name, sql = postgres.schema.MIGRATIONS[0]
        monkeypatch.setattr(postgres.schema, "MIGRATIONS", [
            (version, name, sql + "\n-- edited"), *postgres.schema.MIGRATIONS[1:]])
        with pytest.raises(schema.MigrationError, match="differs from the one applied"):
            schema.migrate(conn)
    finally:
        conn.close()
    assert postgres.schema.SQLITE_SCHEMA[schema.latest("postgres")] == schema.latest()


def test_one_writer_per_database(postgres_server):
    url = postgres_server.database()
    first = db.connect_writer(url)
    try:
        with pytest.raises(errors.StoreBusy, match="another kirolearn daemon is writing"):
            db.connect_writer(url)
    finally:
        first.close()
    db.connect_writer(url).close()  # the lock went with its connection


def test_start_storage_remembers_the_database_for_every_command(home, postgres_server):
    url = postgres_server.database()
    refused = kl("start", "--storage", "mysql://db/kirolearn")
    assert refused.returncode == 1 and "storage.url: a PostgreSQL URL" in refused.stderr
    assert not (home / "config.toml").exists()  # nothing kept of a refused setting
    kl("start", "--storage", url, check=True)
    try:
        event = make_event("prompt", "the team's store is PostgreSQL")
        assert control.call("ingest", "put_event", {"event": event},
                            timeout_ms=5000, home=here())["status"] == "stored"
        assert config.load(paths.Home(home))["storage"]["url"] == url
        assert (home / "config.toml").stat().st_mode & 0o777 == 0o600
        assert not (home / "kirolearn.db").exists()
        stats = json.loads(kl("stats", "--json", check=True).stdout)
        assert stats["totals"]["events"] == 1
        latest = schema.latest("postgres")
        assert f"(PostgreSQL, schema {latest})" in kl("doctor").stdout
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
            control.call("ingest", "put_event", {"event": event}, timeout_ms=8000, home=here())
    finally:
        kl("stop", check=True)


def record(n: int, title: str, summary: str = "", facts: tuple[str, ...] = ()) -> dict:
    return {"record_id": f"R{n:025d}", "namespace": "/team/project/p/", "title": title,
            "summary": summary, "facts": list(facts), "concepts": [], "files_touched": [],
            "observation_type": "discovery", "strategy": "heuristic",
            "source_event_ids": [f"E{n:025d}"], "created_at": "2026-01-01T00:00:00+00:00"}


def term_counts(url: str) -> dict[str, int]:
    conn = db.connect_writer(url)
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
        conn = db.connect_writer(url)
        conn.execute("BEGIN")
        write(conn, records[:6])
        conn.execute("COMMIT")
        writes.insert_record(conn, records[6])
        conn.close()
    counted = term_counts(one_by_one)
    assert counted["retri"] == 7 and counted["file0.py"] == 4
    assert term_counts(bulk) == counted


def test_a_transactions_term_counts_change_once_a_term_and_stay_exact(postgres_server):
    """Five records sharing their words: the first is counted at once, the other four
    change each of their terms' counts once, as the transaction commits; edits and
    deletes after leave the counts a full recount gives."""
    url = postgres_server.database()
    conn = db.connect_writer(url)
    conn.execute("BEGIN")
    for n in range(5):
        writes.insert_record(conn, record(n, f"Retry the webhook {n % 2}", "backoff and retries"))

    def terms(where: str) -> int:
        return conn.execute("SELECT count(DISTINCT term) FROM memory_records,"
                            f" unnest(tsvector_to_array(search)) AS t(term) WHERE {where}"
                            ).fetchone()[0]

    first = terms("id = (SELECT min(id) FROM memory_records)")
    later = terms("id > (SELECT min(id) FROM memory_records)")
    assert conn.execute("SELECT count(*) FROM record_terms").fetchone()[0] == first
    conn.execute("SET CONSTRAINTS memory_records_terms_fold IMMEDIATE")
    changed = conn.execute("SELECT n_tup_ins + n_tup_upd FROM pg_stat_xact_user_tables"
                           " WHERE relname = 'record_terms'").fetchone()[0]
    conn.execute("COMMIT")
    assert changed == first + later and later < 4 * first  # not 5 × a record's terms
    conn.execute("BEGIN")
    writes.insert_record(conn, record(6, "Retry the webhook 6"))
    writes.insert_record(conn, record(7, "Retry the webhook 7"))
    conn.execute("SET CONSTRAINTS memory_records_terms_fold IMMEDIATE")
    writes.insert_record(conn, record(8, "Retry the webhook 8"))
    conn.execute("COMMIT")  # what the first fold took is not added up twice
    conn.execute("BEGIN")
    writes.update_record(conn, record(1, "")["record_id"], ["/team/project/p/"],
                         {"title": "Timeouts of the queue"}, "edited")
    assert writes.delete_record(conn, record(2, "")["record_id"], ["/team/project/p/"])
    writes.insert_record(conn, record(9, "Queue timeouts", "the webhook again"))
    conn.execute("COMMIT")
    recount = dict(conn.execute(
        "SELECT term, count(*) FROM memory_records, unnest(tsvector_to_array(search))"
        " AS t(term) GROUP BY term"))
    conn.close()
    assert term_counts(url) == recount and recount["retri"] == 7 and recount["queue"] == 2


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
        before.setattr(postgres.schema, "MIGRATIONS", postgres.schema.MIGRATIONS[:1])
        conn = db.connect_writer(url)
        with conn.transaction():  # as that version's writer wrote them
            for r in records:
                conn.execute(
                    "INSERT INTO memory_records (record_id, namespace, title, summary,"
                    " facts_json, facts_text, concepts_json, files_touched_json,"
                    " observation_type, strategy, source_event_ids_json, created_at)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                    (r["record_id"], r["namespace"], r["title"], r["summary"], "[]", "",
                     "[]", "[]", r["observation_type"], r["strategy"],
                     json.dumps(r["source_event_ids"]), r["created_at"]))
        conn.close()
    db.connect_writer(url).close()  # migrated to the latest
    assert term_counts(url)["refresh_user_repository"] == 1
    found = Engine(url)
    try:
        result = found.search(Request("/team/project/p/",
                                      "why is `refresh_user_repository` slow", 10, 600_000))
    finally:
        found.close()
    assert result.outcome == "ok"
    assert [r["title"] for r in result.records][:2] == [
        "Speed up `Refresh_User_Repository`", "Refresh the user repository nightly"]


@pytest.fixture(scope="module")
def migrated(postgres_server):
    """A database with kirolearn's schema, for statements that change nothing."""
    url = postgres_server.database()
    db.connect_writer(url).close()
    return url


@given(words=st.text(alphabet="aB_`.( )-9é", max_size=20))
def test_a_query_names_an_identifier_by_the_lexeme_the_index_keeps(migrated, words):
    conn = db.connect_reader(migrated)
    try:
        kept = conn.execute("SELECT tsvector_to_array(kirolearn_identifiers($1))",
                            (words,)).fetchone()[0]
    finally:
        conn.close()
    whole = postgres.fts.identifier(words)
    if whole is not None:
        assert kept == [whole]
    elif "_" not in words:
        assert kept == []


def test_a_hyphenated_word_is_counted_and_found_by_its_whole_lexeme(migrated):
    conn = db.connect_reader(migrated)
    try:
        assert postgres.fts.index_terms(conn, ["cursor-based", "`Cursor-Based`", "N+1", "a_b-c"]) \
            == [("cursor-bas",), ("cursor-bas",), ("n", "+1"), ("a", "b-c", "b", "c")]
        p = Params()
        query = postgres.fts.tsquery(["`Cursor-Based`", "N+1"], p)
        assert conn.execute(f"SELECT CAST({query} AS text)", p.values).fetchone()[0] == (
            "'cursor-bas' & 'cursor' & 'base' | 'n' <-> '+1'")
    finally:
        conn.close()


def test_a_window_ranked_by_intersected_bitmaps_ranks_as_the_planner_would(postgres_server,
                                                                           monkeypatch):
    url = postgres_server.database()
    records = [record(n, f"retry the webhook {'twice ' * (n % 4)}", f"note {n}")
               for n in range(60)]
    conn = db.connect_writer(url)
    conn.execute("BEGIN")
    writes.insert_records(conn, records)
    conn.execute("COMMIT")
    conn.close()
    reader = db.connect_reader(url)
    try:
        ranked = postgres.fts.rank(reader, ["/team/project/p/"], '"twice"', 5, since_id=20)
        monkeypatch.setattr(postgres.fts, "SCANNED_IDS_MAX", 0)
        assert postgres.fts.rank(reader, ["/team/project/p/"], '"twice"', 5, since_id=20) == ranked
        assert len(ranked) == 5 and all(i > 20 for i, _ in ranked)
        assert reader.execute("SHOW enable_indexscan").fetchone()[0] == "on"  # for it alone
    finally:
        reader.close()


SQL_PIECES = st.one_of(
    st.sampled_from(["SELECT ", "x", " = ", ", ", "(", ")", " -- a $1 note\n", "/* $2 */",
                     '"a$1"', "[b$3]", "'it''s $4'", " + "]),
    st.integers(1, 99).map(lambda n: f"${n}"))


@given(st.lists(SQL_PIECES, max_size=20))
def test_sqlite_binds_each_parameter_by_its_number_and_leaves_the_rest(pieces):
    """``$N`` becomes SQLite's positional ``?N``; quotes and comments keep their text."""
    from kirolearn.db import sqlite

    sql = "".join(pieces)
    expected = "".join(f"?{p[1:]}" if p.startswith("$") else p for p in pieces)
    assert sqlite.numbered(sql) == expected


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_file_index_follows_records_through_triggers(postgres_server, tmp_path, dialect):
    """``record_files`` holds each file a valid record names, on both stores: a record
    written, rewritten (files changed), marked invalid or deleted is found by its files
    exactly then; ``records_of_files`` gives the newest first, within the namespaces."""
    where = postgres_server.database() if dialect == "postgresql" else tmp_path / "k.db"
    first = {**record(1, "Retry the webhook"), "files_touched": ["src/hook.py", "README.md"]}
    second = {**record(2, "Sign the webhook"), "files_touched": ["src/hook.py"]}
    elsewhere = {**record(3, "Other project"), "namespace": "/team/project/q/",
                 "files_touched": ["src/hook.py"]}
    make_db(where, [first, second, elsewhere])
    conn = db.connect_writer(where)
    try:
        def about(*paths: str) -> list[str]:
            return [i for _, i in fts.records_of_files(conn, ["/team/project/p/"], paths, 10)]

        assert about("src/hook.py") == [second["record_id"], first["record_id"]]
        assert about("README.md", "src/hook.py") == [second["record_id"], first["record_id"]]
        assert about("docs/none.md") == []
        conn.execute("UPDATE memory_records SET files_touched_json = $1 WHERE record_id = $2",
                     (json.dumps(["docs/new.md"]), second["record_id"]))
        assert about("src/hook.py") == [first["record_id"]]
        assert about("docs/new.md") == [second["record_id"]]
        conn.execute("UPDATE memory_records SET invalid_reason = 'wrong' WHERE record_id = $1",
                     (first["record_id"],))
        assert about("src/hook.py", "README.md") == []
        assert writes.delete_record(conn, second["record_id"], ["/team/project/p/"])
        assert about("docs/new.md") == []
        assert conn.execute("SELECT count(*) FROM record_files").fetchone()[0] == 1
    finally:
        conn.close()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_same_edit_merges_within_its_session_only(postgres_server, tmp_path, dialect):
    """On both stores a later turn of a session making the same edit is merged into the
    earlier one; another session making it, for another request, is a record of its own."""
    from kirolearn.roles.ingest.checks import prepare

    where = postgres_server.database() if dialect == "postgresql" else tmp_path / "k.db"
    make_db(where, [])
    conn = db.connect_writer(where)
    try:
        events = [make_event(content=f"turn {n}", session_id=session)
                  for n, session in enumerate(("one", "one", "two"))]
        edit = {"facts": ["edited `src/app.py` (+1 −1): `TIMEOUT`"],
                "files_touched": ["src/app.py"], "created_at": "2026-11-27T10:00:00+00:00"}
        made = [{**record(n, title), **edit, "namespace": NAMESPACE,
                 "source_event_ids": [e["event_id"]]}
                for n, (title, e) in enumerate(zip(("raise the timeout", "now the tests",
                                                    "fix the upload"), events, strict=True))]
        with conn.transaction():
            for event in events:
                writes.insert_event(conn, prepare(event)[0], 10_000)
            merged = [writes.save_record(conn, r, merge_window_s=3600) for r in made]
        assert merged == [None, made[0]["record_id"], None]
    finally:
        conn.close()
