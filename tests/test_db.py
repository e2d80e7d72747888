"""Schema, migrations, and the batch bookkeeping that must never lose or double-commit."""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import math
import struct
from pathlib import Path

import pytest
from helpers.events import NAMESPACE, make_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kirolearn import contract, db
from kirolearn.db import batches, errors, reads, schema, writes
from kirolearn.db import store as store_interface
from kirolearn.db.sqlite import schema as sqlite_schema
from kirolearn.db.store import Dialect
from kirolearn.roles.ingest.checks import prepare


@pytest.fixture(params=["sqlite", "postgresql"])
def conn(request, tmp_path):
    """The writer's connection to a new store of each kind: ``db.writes`` and
    ``db.batches`` serve both."""
    where = (tmp_path / "kirolearn.db" if request.param == "sqlite"
             else request.getfixturevalue("postgres_server").database())
    connection = db.connect_writer(where)
    yield connection
    connection.close()


@pytest.fixture
def lite(tmp_path):
    """A SQLite store's writer, for what only a file has (WAL, pages, its migrations)."""
    connection = db.connect_writer(tmp_path / "kirolearn.db")
    yield connection
    connection.close()


STORED_KIND = writes.STORED_FIELDS.index("kind")


def store(conn, event, window_ms=10_000) -> str:
    with conn.transaction():
        return writes.insert_event(conn, prepare(event)[0], window_ms)


def indexed(conn, phrase: str) -> int:
    """How many records the full-text index finds for a phrase (either dialect's)."""
    return conn.dialect.fts.match_count(conn, f'"{phrase}"')


def record_for(event_ids: list[str], title="Use WAL mode") -> dict:
    return {"record_id": contract.new_record_id(), "namespace": NAMESPACE, "title": title,
            "summary": "Switched the storage layer to SQLite WAL.", "facts": ["WAL on"],
            "concepts": [], "files_touched": [], "observation_type": "decision",
            "strategy": "heuristic", "source_event_ids": event_ids,
            "created_at": contract.now_iso()}


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_each_dialect_implements_the_store_interface(name):
    """Every member ``store.Dialect`` declares, with the same parameters: nothing outside
    ``db`` needs to know which dialect it has."""
    module = importlib.import_module(f"kirolearn.db.{name}")
    declared = {k for k in Dialect.__annotations__} | {
        k for k, v in vars(Dialect).items() if inspect.isfunction(v)}
    declared -= {k for k in declared if k.startswith("_")}
    missing = sorted(k for k in declared if not hasattr(module, k))
    assert not missing, f"db.{name} lacks {missing}"
    for member, function in vars(Dialect).items():
        if member.startswith("_") or not inspect.isfunction(function):
            continue
        wanted = list(inspect.signature(function).parameters.values())[1:]  # less self
        given = list(inspect.signature(getattr(module, member)).parameters.values())
        assert len(given) == len(wanted), f"db.{name}.{member}{inspect.signature(function)}"
        assert [p.default is p.empty for p in given] == [
            p.default is p.empty for p in wanted], f"db.{name}.{member}: defaults differ"
    assert module.Connection.name == name
    said = {k for k, v in vars(store_interface.Connection).items() if inspect.isfunction(v)}
    lacking = sorted(k for k in said if not k.startswith("_")
                     and not callable(getattr(module.Connection, k, None)))
    assert not lacking, f"db.{name}.Connection lacks {lacking}"


def test_the_dialect_is_chosen_by_where_the_store_is():
    assert db.dialect(Path("/x/kirolearn.db")).TITLE == "SQLite"
    for url in ("postgresql://me@db/kl", "postgres://me@db/kl"):
        assert db.dialect(url).TITLE == "PostgreSQL"
    with pytest.raises(errors.StoreUnreachable, match="mysql://"):
        db.dialect("mysql://me@db/kl")


def test_database_is_wal_private_and_migrated(tmp_path, lite):
    conn = lite
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (tmp_path / "kirolearn.db").stat().st_mode & 0o777 == 0o600
    assert [r[0] for r in conn.execute("SELECT version FROM _migrations")] == [
        m[0] for m in sqlite_schema.MIGRATIONS]
    assert schema.migrate(conn) == []  # idempotent
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_records_fts'"
                       ).fetchone()[0]
    assert "porter unicode61 remove_diacritics 2" in sql
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"events", "memory_records", "memory_records_fts_vocab", "extraction_batches",
            "retrievals"} <= tables


def test_migration_drift_and_newer_databases_are_refused(lite):
    conn = lite
    conn.execute("UPDATE _migrations SET checksum = 'edited' WHERE version = 1")
    with pytest.raises(schema.MigrationError, match="differs"):
        schema.migrate(conn)
    conn.execute("UPDATE _migrations SET checksum = $1 WHERE version = 1",
                 (schema._checksum(sqlite_schema.MIGRATIONS[0][2]),))
    conn.execute("INSERT INTO _migrations VALUES (99, 'future', 'x', 'now')")
    with pytest.raises(schema.MigrationError, match="newer"):
        schema.migrate(conn)


def test_a_database_from_an_older_version_is_migrated_forward(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", sqlite_schema.MIGRATIONS[:1])
    old = db.connect_writer(tmp_path / "old.db")
    r = record_for(["E" * 26])
    old.execute(  # the columns of the first version
        "INSERT INTO memory_records (record_id, namespace, title, summary, facts_json,"
        " facts_text, concepts_json, files_touched_json, observation_type, strategy,"
        " source_event_ids_json, created_at) VALUES ($1,$2,$3,$4,'[]','','[]','[]',$5,$6,$7,$8)",
        (r["record_id"], r["namespace"], r["title"], r["summary"], r["observation_type"],
         r["strategy"], json.dumps(r["source_event_ids"]), r["created_at"]))
    old.close()
    monkeypatch.undo()
    conn = db.connect_writer(tmp_path / "old.db")
    assert [r[0] for r in conn.execute("SELECT version FROM _migrations")] == [
        m[0] for m in sqlite_schema.MIGRATIONS]
    plan = conn.execute("EXPLAIN QUERY PLAN SELECT namespace FROM memory_records"
                        " INDEXED BY memory_records_id_namespace WHERE id = 1").fetchall()
    assert "COVERING INDEX" in plan[0][-1]
    assert len(list(reads.iter_records(conn))) == 1
    assert conn.execute("SELECT rowid FROM memory_records_fts WHERE memory_records_fts"
                        " MATCH $1", (r["title"].split()[0],)).fetchall()  # still indexed
    conn.close()


def test_records_of_an_older_database_learn_their_place_in_the_session(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", sqlite_schema.MIGRATIONS[:8])
    old = db.connect_writer(tmp_path / "old.db")
    first, second = make_event(content="one"), make_event(content="two")
    for event in (first, second):
        assert store(old, event) == "stored"
    orphan = record_for(["F" * 26])  # its event is not here (pruned)
    for r in (record_for([second["event_id"], first["event_id"]]), orphan):
        old.execute("INSERT INTO memory_records (record_id, namespace, title, summary,"
                    " facts_json, facts_text, concepts_json, files_touched_json,"
                    " observation_type, strategy, source_event_ids_json, created_at)"
                    " VALUES ($1,$2,$3,$4,'[]','','[]','[]',$5,$6,$7,$8)",
                    (r["record_id"], r["namespace"], r["title"], r["summary"],
                     r["observation_type"], r["strategy"], json.dumps(r["source_event_ids"]),
                     r["created_at"]))
    old.close()
    monkeypatch.undo()
    conn = db.connect_writer(tmp_path / "old.db")
    seq = conn.execute("SELECT seq FROM events WHERE event_id = $1",
                       (second["event_id"],)).fetchone()[0]
    assert conn.execute("SELECT session_id, turn_seq FROM memory_records ORDER BY id"
                        ).fetchall() == [(second["session_id"], seq), (None, None)]
    new = record_for([first["event_id"]])
    writes.insert_record(conn, new)
    assert conn.execute("SELECT turn_seq FROM memory_records WHERE record_id = $1",
                        (new["record_id"],)).fetchone()[0] == seq - 1
    conn.close()


def test_event_id_and_content_window_dedup(conn):
    first = make_event(content="same words")
    assert store(conn, first) == "stored"
    assert store(conn, first) == "duplicate"
    retried = make_event(content="same words")  # a new id, same content and session
    assert store(conn, retried) == "duplicate"
    other_session = make_event(content="same words", session_id="session-2")
    assert store(conn, other_session) == "stored"
    later = make_event(content="same words", valid_time="2030-01-01T00:00:00+00:00")
    assert store(conn, later) == "stored"
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 3


def test_a_chunk_of_events_is_stored_in_order_each_seeing_those_before(conn):
    """``insert_events`` sends a chunk at once: each event's dedup still sees the
    events before it in the chunk, as one at a time would."""
    first = make_event(content="same words")
    retried = make_event(content="same words")  # a new id, same content and session
    chunk = [first, first, retried, make_event(content="same words", session_id="session-2"),
             make_event(content="same words", valid_time="2030-01-01T00:00:00+00:00"),
             make_event(content="other words")]
    rows = [writes.event_row(prepare(event)[0], db.utc_now()) for event in chunk]
    with conn.transaction():
        inserted = writes.insert_events(conn, rows, 10_000)
    assert inserted == [True, False, False, True, True, True]
    with conn.transaction():  # sent again: every one is there already
        assert writes.insert_events(conn, rows, 10_000) == [False] * len(rows)
        assert writes.insert_events(conn, rows[:1], 0) == [False]  # no window: the id
    stored_at = reads.events_stored_at(conn, [first["event_id"], retried["event_id"]])
    assert list(stored_at) == [first["event_id"]]  # the retried one was never stored
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 4


def test_a_chunk_with_a_row_the_store_refuses_fails_whole(conn):
    """An error of any statement in the chunk (on a server, raised as the pipeline ends)
    is the store's error, and the transaction keeps none of the chunk."""
    rows = [writes.event_row(prepare(make_event(content=f"step {n}"))[0], db.utc_now())
            for n in range(3)]
    rows[1][STORED_KIND] = "not a kind"
    with pytest.raises(errors.StoreError), conn.transaction():
        writes.insert_events(conn, rows, 10_000)
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0


def test_fts_index_follows_records_through_triggers(conn):
    event = make_event()
    store(conn, event)
    record = record_for([event["event_id"]])
    with conn.transaction():
        writes.insert_record(conn, record)
    assert indexed(conn, "switching") == 1  # stemmed: switching ~ switched
    conn.execute("DELETE FROM memory_records")
    assert indexed(conn, "wal") == 0


def _form(conn, reason="turn_end"):
    with conn.transaction():
        [batch_id] = batches.form_batches(conn, NAMESPACE, reason, 1 << 30)
    return batch_id


def _complete(conn, batch_id, records, merge_window_s=0):
    """One batch's result committed as storage commits a take's results."""
    with conn.transaction():
        return batches.complete_batches(conn, [(batch_id, records, [])], merge_window_s)[batch_id]


turns = st.lists(st.lists(st.integers(1, 5000), min_size=1, max_size=12), min_size=1,
                 max_size=25)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=turns, max_bytes=st.integers(1, 20_000), max_events=st.integers(1, 30),
       data=st.data())
def test_batches_are_bounded_and_cut_after_whole_turns(tmp_path_factory, turns, max_bytes,
                                                       max_events, data):
    """Each turn is tool events of these sizes, then its end; whatever the arrival, every
    pending event is in exactly one batch, in order, each within the limits (an event
    larger alone is a batch of its own), and a batch ends after a turn's end unless the
    turn itself does not fit."""
    conn = db.connect_writer(tmp_path_factory.mktemp("batches") / "k.db")
    try:
        events = []
        for sizes in turns:
            events += [make_event("tool_use", "x" * size) for size in sizes]
            events.append(make_event("session_summary", body={"type": "text", "content": "end"}))
        for event in events:
            store(conn, event, window_ms=0)
        with conn.transaction():
            ids = batches.form_batches(conn, NAMESPACE, "size", max_bytes, max_events)
        order = {e["event_id"]: n for n, e in enumerate(events)}  # arrival order
        formed = [sorted(batches.batch_events(conn, batch_id), key=lambda e: order[e["event_id"]])
                   for batch_id in ids]
        assert [e["event_id"] for b in formed for e in b] == [e["event_id"] for e in events]
        for batch in formed:
            size = sum(len(e["body_json"]) for e in batch)
            assert len(batch) == 1 or (size <= max_bytes and len(batch) <= max_events)
        for batch, following in itertools.pairwise(formed):
            if batch[-1]["kind"] != "session_summary":  # cut inside a turn: it did not fit
                assert not any(e["kind"] == "session_summary" for e in batch)
            assert following  # no empty batch
        with conn.transaction():
            assert batches.form_batches(conn, NAMESPACE, "idle", max_bytes) == []
    finally:
        conn.close()


def test_a_turn_begun_before_its_batch_is_formed_waits_to_be_batched_whole(conn):
    """A turn's end forms a batch; the next prompt, already stored, is not cut off from
    its own tool uses (it would make a record of its own, and they another)."""
    turn = [make_event("prompt", content="fix it"), make_event("tool_use", content="edit"),
            make_event("session_summary", body={"type": "text", "content": "fixed"})]
    following = make_event("prompt", content="now the docs")
    for event in [*turn, following]:
        store(conn, event)
    with conn.transaction():
        [batch_id] = batches.form_batches(conn, NAMESPACE, "turn_end", 1 << 30,
                                         whole_turns=True)
    assert {e["event_id"] for e in batches.batch_events(conn, batch_id)} == {
        e["event_id"] for e in turn}
    assert batches.pending_bytes(conn, NAMESPACE) == len(contract.canonical_json(following["body"]))
    store(conn, make_event("tool_use", content="docs edit"))
    second = _form(conn, "idle")
    assert len(batches.batch_events(conn, second)) == 2
    assert batches.pending_bytes(conn, NAMESPACE) == 0


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.booleans(), st.booleans()),
                max_size=40))
def test_a_turn_end_never_batches_part_of_another_sessions_turn(steps):
    """Events of parallel sessions, interleaved (session, ends its turn, is a minute
    past the wait of an open turn): what a turn's end batches is the longest run of
    them in which every event not too old belongs to a turn whose end is in it too."""
    now = 10**9
    rows = [(seq, end, 1, f"E{seq}", session,
             now - (batches.OPEN_TURN_WAIT_MS + 60_000 if old else 0))
            for seq, (session, end, old) in enumerate(steps)]

    def whole(prefix: list[tuple]) -> bool:
        ended = {row[4]: at for at, row in enumerate(prefix) if row[1]}
        return all(at <= ended.get(row[4], -1) or now - row[5] >= batches.OPEN_TURN_WAIT_MS
                   for at, row in enumerate(prefix))

    until = batches.whole_until(rows, now)
    assert whole(rows[:until])
    assert not any(whole(rows[:n]) for n in range(until + 1, len(rows) + 1))


def test_a_batch_that_keeps_failing_is_split_then_failed_with_its_reason(conn):
    for content in ("one", "two", "three"):
        store(conn, make_event(content=content))
    batch_id = _form(conn)
    with conn.transaction():
        other = batches.split_batch(conn, batch_id)
    assert [len(batches.batch_events(conn, b)) for b in (batch_id, other)] == [1, 2]
    with conn.transaction():
        assert batches.split_batch(conn, batch_id) is None  # one event: cannot be split
        batches.fail_batch(conn, batch_id, "5 attempts failed; last: ValueError: bad")
    [failed] = batches.failed_batches(conn)
    assert failed == {"batch_id": batch_id, "namespace": NAMESPACE, "events": 1,
                      "attempts": 0, "error": "5 attempts failed; last: ValueError: bad"}
    with conn.transaction():
        assert batches.retry_batches(conn) == 1
    assert batches.failed_batches(conn) == []


def test_events_arriving_during_extraction_wait_for_the_next_batch(conn):
    first = make_event(content="one")
    store(conn, first)
    batch_id = _form(conn)
    late = make_event(content="two")
    store(conn, late)  # arrives while the batch is out with a worker
    assert [e["event_id"] for e in batches.batch_events(conn, batch_id)] == [first["event_id"]]
    assert _complete(conn, batch_id, [record_for([first["event_id"]])]) == 1
    assert batches.pending_by_namespace(conn)[NAMESPACE] > 0  # 'two' is still pending
    second = _form(conn)
    assert [e["event_id"] for e in batches.batch_events(conn, second)] == [late["event_id"]]


def test_a_batch_is_committed_once_even_if_two_workers_finish_it(conn):
    event = make_event()
    store(conn, event)
    batch_id = _form(conn)
    assert _complete(conn, batch_id, [record_for([event["event_id"]])]) == 1
    assert _complete(conn, batch_id, [record_for([event["event_id"]])]) is None
    assert conn.execute("SELECT COUNT(*) FROM memory_records").fetchone()[0] == 1


def test_a_near_duplicate_record_is_merged_into_the_recent_one(conn):
    def batch_with(*records: dict) -> None:
        event = make_event(content=contract.new_ulid())
        store(conn, event)
        done = _complete(conn, _form(conn), records, merge_window_s=3600)
        assert done == len(records)

    first = {**record_for(["A" * 26]), "title": "run the tests", "facts": ["ran `pytest`"],
             "files_touched": ["a.py", "b.py"]}
    again = {**record_for(["B" * 26]), "title": "run the tests", "facts": ["ran `tox`"],
             "files_touched": ["b.py", "a.py"], "summary": "All green now."}
    other_files = {**record_for(["C" * 26]), "title": "run the tests", "files_touched": ["c.py"]}
    batch_with(first)
    batch_with(again, other_files)
    rows = list(reads.iter_records(conn))
    assert len(rows) == 2
    merged = next(r for r in rows if r["record_id"] == first["record_id"])
    # A merge only adds: both summaries, every fact and source; the earlier state stays.
    assert merged["facts"] == ["ran `pytest`", "ran `tox`"]
    assert merged["source_event_ids"] == ["A" * 26, "B" * 26]
    assert merged["summary"] == f"{first['summary']}\n\nAll green now."
    [version] = merged["versions"]
    assert {k: version[k] for k in ("summary", "facts", "source_event_ids", "created_at")} == {
        k: first[k] for k in ("summary", "facts", "source_event_ids", "created_at")}
    assert indexed(conn, "tox") == 1  # the index follows the merge
    assert writes.delete_record(conn, merged["record_id"], [merged["namespace"]])
    assert conn.execute("SELECT count(*) FROM record_versions").fetchone()[0] == 0


def test_a_merge_of_records_without_summaries_keeps_the_other_request(conn):
    """A summary that would repeat its title is empty: merged into the same edit made
    for another request, that request is what the merge adds."""
    turns = [make_event(content=f"turn {n}") for n in range(3)]  # of one session
    for event in turns:
        store(conn, event)
    a, b, c = (event["event_id"] for event in turns)
    first = {**record_for([a]), "title": "bump the version", "summary": "",
             "facts": ["edited `setup.py` (+1 −1)"], "files_touched": ["setup.py"]}
    again = {**first, "record_id": contract.new_record_id(), "source_event_ids": [b]}
    other = {**again, "record_id": contract.new_record_id(), "source_event_ids": [c],
             "title": "release 2.0"}
    with conn.transaction():
        assert writes.save_record(conn, first, merge_window_s=3600) is None
        assert writes.save_record(conn, again, merge_window_s=3600) == first["record_id"]
    [row] = reads.iter_records(conn)
    assert row["summary"] == ""  # the same request again adds nothing
    with conn.transaction():
        assert writes.save_record(conn, other, merge_window_s=3600) == first["record_id"]
    [row] = reads.iter_records(conn)
    assert row["summary"] == "release 2.0"


def test_the_same_edit_made_for_other_requests_keeps_each_request(conn):
    """Many sessions making one identical edit for different requests are different
    work: nothing merges, and each request is found by its own words."""
    requests = [f"{verb} the {thing} handler" for verb in ("fix", "speed up", "document",
                                                          "rename", "test")
                for thing in ("upload", "login", "export", "billing")]
    edit = ["edited `src/app.py` (+1 −1): `TIMEOUT`"]
    with conn.transaction():
        for n, request in enumerate(requests):
            event = make_event(content=request, session_id=f"session-{n}")
            writes.insert_event(conn, prepare(event)[0], 10_000)
            record = {**record_for([event["event_id"]], title=request), "summary": "",
                      "facts": edit, "files_touched": ["src/app.py"],
                      "observation_type": "tool_use"}
            assert writes.save_record(conn, record, merge_window_s=3600) is None
    titles = sorted(r["title"] for r in reads.iter_records(conn))
    assert titles == sorted(requests)
    for request in requests:
        assert indexed(conn, request) == 1


def test_a_merge_past_a_records_limits_is_a_new_record(conn):
    first = {**record_for(["A" * 26]), "facts": [f"fact {n}" for n in range(60)]}
    again = {**record_for(["B" * 26]), "facts": [f"fact {n}" for n in range(50, 110)]}
    with conn.transaction():
        assert writes.save_record(conn, first, merge_window_s=3600) is None
        assert writes.save_record(conn, again, merge_window_s=3600) is None
    rows = list(reads.iter_records(conn))
    assert [len(r["facts"]) for r in rows] == [60, 60] and all(not r["versions"] for r in rows)


def test_records_outside_the_window_or_with_merging_off_are_kept_apart(conn):
    old = {**record_for(["A" * 26]), "created_at": "2020-01-01T00:00:00.000+00:00"}
    for record, window in ((old, 3600), (record_for(["B" * 26]), 3600),
                           (record_for(["C" * 26]), 0)):
        store(conn, make_event(content=contract.new_ulid()))
        _complete(conn, _form(conn), [record], merge_window_s=window)
    assert conn.execute("SELECT COUNT(*) FROM memory_records").fetchone()[0] == 3


def unit_vector(*parts: float) -> bytes:
    """A stored vector (384 little-endian float32) of unit length, from its first parts."""
    norm = math.sqrt(sum(x * x for x in parts))
    values = [x / norm for x in parts] + [0.0] * (384 - len(parts))
    return struct.pack("<384f", *values)


SPACE = "onnx-0123456789abcdef"


def embedded(conn, record: dict, vector: bytes, batch_id: str | None = "batch-1",
             space: str = SPACE) -> None:
    """A record as storage leaves it once extracted and embedded."""
    with conn.transaction():
        writes.insert_record(conn, record, batch_id)
        conn.execute("UPDATE memory_records SET embedding = $1, embedding_hash = $2"
                     " WHERE record_id = $3", (vector, f"{space}:h", record["record_id"]))


def reconciled(conn, record: dict, vector: bytes, min_similarity=0.92) -> str | None:
    embedded(conn, record, vector)
    with conn.transaction():
        return writes.reconcile(conn, record["record_id"], vector, SPACE, min_similarity, 3600)


def test_vectors_are_read_by_their_space_and_others_dropped(conn):
    """A vector is compared only with vectors of its own space (the same model file);
    dropping the others leaves their records to be embedded again."""
    mine, theirs, older = (record_for([c * 26]) for c in "ABC")
    embedded(conn, mine, unit_vector(1, 0))
    embedded(conn, theirs, unit_vector(0, 1), space="onnx-fedcba9876543210")
    with conn.transaction():
        writes.insert_record(conn, older)
        conn.execute("UPDATE memory_records SET embedding = $1, embedding_hash = $2"
                     " WHERE record_id = $3", (unit_vector(1, 1), "f" * 64, older["record_id"]))
    assert reads.count_vectors(conn, mine["namespace"], SPACE) == 1
    assert [row[0] for row in reads.vectors(conn, mine["namespace"], SPACE)] == [
        mine["record_id"]]
    assert reads.count_other_vectors(conn, SPACE) == 2
    assert reads.count_other_vectors(conn, SPACE[:-1]) == 3  # a prefix is another space
    with conn.transaction():
        assert writes.drop_vectors(conn, SPACE) == 2
    assert reads.count_other_vectors(conn, SPACE) == 0
    assert [r["record_id"] for _, r in reads.unembedded(conn, 0, 10)] == [
        theirs["record_id"], older["record_id"]]


def test_a_record_that_says_the_same_in_other_words_is_reconciled_into_the_older(conn):
    first = {**record_for(["A" * 26], "How does the spool replay?"), "facts": ["read `s.py`"],
             "files_touched": ["s.py", "t.py"], "observation_type": "discovery"}
    again = {**record_for(["B" * 26], "how is the spool replayed"), "facts": ["read `t.py`"],
             "files_touched": ["t.py", "s.py"], "observation_type": "discovery",
             "summary": "The next hook sends what waits."}
    embedded(conn, first, unit_vector(1, 0))
    conn.execute("UPDATE memory_records SET useful_count = 2")
    assert reconciled(conn, again, unit_vector(1, 0.3)) == first["record_id"]  # cosine 0.958
    rows = {r["record_id"]: r for r in reads.iter_records(conn)}
    merged, kept = rows[first["record_id"]], rows[again["record_id"]]
    # Nothing is lost: the older holds both, its earlier state is a version, and the
    # repeat stays whole, marked as merged into it.
    assert merged["summary"] == (f"{first['summary']}\n\nhow is the spool replayed\n\n"
                                 "The next hook sends what waits.")
    assert merged["facts"] == ["read `s.py`", "read `t.py`"]
    assert merged["source_event_ids"] == ["A" * 26, "B" * 26]
    assert [v["summary"] for v in merged["versions"]] == [first["summary"]]
    assert kept["invalid_reason"] == (f"merged into {first['record_id']}, which says the same"
                                      " (the same files, similarity 0.96)")
    assert {k: kept[k] for k in again} == again
    assert conn.execute("SELECT useful_count, embedding_hash FROM memory_records"
                        " WHERE record_id = $1", (first["record_id"],)).fetchone() == (2, None)
    assert indexed(conn, "replayed") == 1  # the repeat left the index; the older holds its words


@pytest.mark.parametrize("change", ["other files", "no files", "other type", "less alike",
                                    "saved by hand", "older than the window", "too long",
                                    "another model's vector"])
def test_a_record_that_differs_is_not_reconciled(conn, change):
    first = {**record_for(["A" * 26]), "files_touched": ["s.py"]}
    again = {**record_for(["B" * 26]), "files_touched": ["s.py"], "summary": "Other words."}
    vector = unit_vector(1, 0.3)
    if change == "other files":
        again["files_touched"] = ["s.py", "t.py"]
    elif change == "no files":
        first["files_touched"] = again["files_touched"] = []
    elif change == "other type":
        again["observation_type"] = "tool_use"
    elif change == "less alike":
        vector = unit_vector(1, 0.5)  # cosine 0.894
    elif change == "saved by hand":
        again["strategy"] = first["strategy"] = "mcp_observation"
    elif change == "older than the window":
        first["created_at"] = "2020-01-01T00:00:00.000+00:00"
    elif change == "too long":
        first["summary"], again["summary"] = "a" * 3000, "b" * 1500
    embedded(conn, first, unit_vector(1, 0),
             space="onnx-fedcba9876543210" if change == "another model's vector" else SPACE)
    embedded(conn, again, vector, None if change == "saved by hand" else "batch-1")
    with conn.transaction():
        assert writes.reconcile(conn, again["record_id"], vector, SPACE, 0.92, 3600) is None
    assert all("invalid_reason" not in r and not r["versions"] for r in reads.iter_records(conn))


def cosine(a: bytes, b: bytes) -> float:
    return sum(x * y for x, y in zip(struct.unpack("<384f", a), struct.unpack("<384f", b),
                                     strict=True))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.sampled_from(["a.py", "b.py"])),
                min_size=2, max_size=8))
def test_reconciling_loses_nothing_and_merges_only_what_is_alike(conn, turns):
    conn.execute("DELETE FROM memory_records")
    made: list[dict] = []
    candidates: dict[str, tuple[str, bytes]] = {}  # the valid records: id -> (file, vector)
    for n, (x, y, path) in enumerate(turns):
        if abs(x) + abs(y) < 1e-3:
            continue
        record = {**record_for([f"{n:026d}"], f"turn {n}"), "files_touched": [path],
                  "facts": [f"fact {n}"], "summary": f"Summary {n}."}
        vector = unit_vector(x, y)
        alike = {i: cosine(v, vector) for i, (p, v) in candidates.items() if p == path}
        target = reconciled(conn, record, vector)
        if alike and max(alike.values()) >= 0.92:
            assert alike[target] == max(alike.values())
        else:
            assert target is None
            candidates[record["record_id"]] = (path, vector)
        made.append(record)
    rows = list(reads.iter_records(conn))
    assert len(rows) == len(made)
    valid = [r for r in rows if "invalid_reason" not in r]
    assert {r["record_id"] for r in valid} == set(candidates)
    for record in made:  # every fact and source is in a record that can be recalled
        assert any(set(record["facts"]) <= set(r["facts"])
                   and set(record["source_event_ids"]) <= set(r["source_event_ids"])
                   for r in valid)


def test_expired_leases_come_due_again(conn):
    store(conn, make_event())
    batch_id = _form(conn)
    now = db.now_ms()
    assert [b[0] for b in batches.due_batches(conn, now, 10)] == [batch_id]
    conn.execute("UPDATE extraction_batches SET state = 'leased', lease_expires_ms = $1,"
                 " attempts = 1", (now + 1000,))
    assert batches.due_batches(conn, now, 10) == []
    assert [b[0] for b in batches.due_batches(conn, now + 1001, 10)] == [batch_id]


def test_a_batch_whose_records_cannot_be_stored_is_rolled_back_alone(conn):
    """Results committed together: a batch giving one record id twice is rolled back
    whole and its attempt counted failed, with the reason; the other batch commits."""
    event = make_event()
    store(conn, event)
    bad_batch = _form(conn)
    other_event = make_event(content="other")
    store(conn, other_event)
    good_batch = _form(conn)
    with conn.transaction():
        batches.lease_batches(conn, [bad_batch, good_batch], db.now_ms() + 60_000)
    bad = record_for([event["event_id"]])
    with conn.transaction():
        outcome = batches.complete_batches(conn, [
            (bad_batch, [record_for([event["event_id"]]), bad, bad], []),
            (good_batch, [record_for([other_event["event_id"]])], [])])
    assert outcome[good_batch] == 1 and "unique constraint" in outcome[bad_batch].lower()
    assert conn.execute("SELECT source_event_ids_json FROM memory_records").fetchall() == [
        (json.dumps([other_event["event_id"]]),)]
    states = {batch: (state, expires) for batch, state, expires in conn.execute(
        "SELECT batch_id, state, lease_expires_ms FROM extraction_batches")}
    assert states == {bad_batch: ("leased", 0), good_batch: ("done", None)}  # due again at once
    assert "unique" in conn.execute("SELECT error FROM extraction_batches WHERE batch_id = $1",
                                    (bad_batch,)).fetchone()[0].lower()


def test_stats_and_export_iterators(conn):
    store(conn, make_event("prompt", "a"))
    store(conn, make_event("tool_use", "b.py"))
    result = reads.stats(conn)
    assert result["totals"]["events"] == 2
    assert result["namespaces"][0]["events"] == {"prompt": 1, "tool_use": 1}
    exported = list(reads.iter_events(conn))
    for event in exported:
        contract.validate_event(event)


def test_the_same_work_asked_again_strengthens_the_record_it_repeats(conn):
    """A record with another title but the same facts of work done is merged into the
    one it repeats (its title kept in the summary); reads alone, or another type, are
    not the same work."""
    turns = [make_event(content=f"turn {n}") for n in range(5)]  # of one session
    for event in turns:
        store(conn, event)
    a, b, c, d, e = (event["event_id"] for event in turns)
    work = ["edited `src/export.py` (+2 −1): `customer_id`", "ran `pytest -q` → exit 0"]
    first = {**record_for([a]), "title": "Fix the export crash", "facts": work}
    again = {**record_for([b]), "title": "the export crashes again, fix it",
             "facts": work, "summary": "Done: edited 1 file, ran 1 command."}
    error = {**record_for([c]), "title": "other", "facts": work,
             "observation_type": "error"}
    looked = [{**record_for([i]), "title": i, "facts": ["read `README.md`"]} for i in (d, e)]
    with conn.transaction():
        for record in (first, again, error, *looked):
            writes.save_record(conn, record, merge_window_s=3600)
    rows = {r["record_id"]: r for r in reads.iter_records(conn)}
    assert set(rows) == {first["record_id"], error["record_id"],
                         *(r["record_id"] for r in looked)}
    merged = rows[first["record_id"]]
    assert merged["summary"] == (f"{first['summary']}\n\nthe export crashes again, fix it"
                                 "\n\nDone: edited 1 file, ran 1 command.")
    assert merged["source_event_ids"] == [a, b] and len(merged["versions"]) == 1
