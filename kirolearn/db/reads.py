"""What readers ask of the database: events, records, batches, counts.

Every function takes a connection: a reader's (``mode=ro``) or, inside storage, the
writer's. One module, long as it is: every read of events, records and their counts,
so that a statement is looked for in one place (full-text search is ``fts``'s, the
extraction queue ``batches``').
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator

from kirolearn import privacy, project
from kirolearn.db import errors
from kirolearn.db.store import Connection, Params

EVENT_COLUMNS = ("event_id, kind, body_json, namespace, actor_id, session_id, valid_time,"
                 " source_json, schema_version, content_hash, parent_event_id")


def event_from_row(row: tuple) -> dict:
    event = {
        "event_id": row[0], "kind": row[1], "body": json.loads(row[2]), "namespace": row[3],
        "actor_id": row[4], "session_id": row[5], "valid_time": row[6],
        "source": json.loads(row[7]), "schema_version": row[8], "content_hash": row[9],
    }
    if row[10]:
        event["parent_event_id"] = row[10]
    return event


def iter_events(conn: Connection, namespace: str | None = None,
                damaged: Callable[[str, str], None] | None = None) -> Iterator[dict]:
    """Every event (of a namespace) in time order. A row whose JSON cannot be read (a
    damaged file) is left out and reported to ``damaged(event_id, why)``."""
    sql = f"SELECT {EVENT_COLUMNS} FROM events"
    args: tuple = ()
    if namespace:
        sql += " WHERE namespace = $1"
        args = (namespace,)
    for row in conn.execute(sql + " ORDER BY valid_ms, event_id", args):
        try:
            yield event_from_row(row)
        except (ValueError, TypeError) as exc:
            if damaged is None:
                raise
            damaged(f"event {row[0]}", f"its stored body or source is not JSON ({exc}); left out")


RECORD_COLUMNS = ("record_id, namespace, title, summary, facts_json, concepts_json,"
                  " files_touched_json, observation_type, strategy, source_event_ids_json,"
                  " created_at, invalid_reason, anchors_json, code_json, stale_why, stale_at,"
                  " superseded_by")
# A search's records also say which rules scrubbed their text (``privacy.scrub_stale``).
SEARCHED_COLUMNS = RECORD_COLUMNS + ", scrubbed_with"


def record_from_row(row: tuple, changes: str = "") -> dict:
    """A record as the contract has it (with ``changes`` when given: only an export
    reads them), with ``invalid_reason`` when it was marked invalid, ``stale`` ({why,
    at}) when its code is gone, and ``superseded_by`` (a record id) when a later one
    undid its work."""
    record = {
        "record_id": row[0], "namespace": row[1], "title": row[2], "summary": row[3],
        "facts": json.loads(row[4]), "concepts": json.loads(row[5]),
        "files_touched": json.loads(row[6]), "observation_type": row[7], "strategy": row[8],
        "source_event_ids": json.loads(row[9]), "created_at": row[10],
    }
    if row[11] is not None:
        record["invalid_reason"] = row[11]
    if row[12] != "{}":
        record["anchors"] = json.loads(row[12])
    if row[13] != "{}":
        record["code"] = json.loads(row[13])
    if changes:
        record["changes"] = changes
    if row[14] is not None:
        record["stale"] = {"why": row[14], "at": row[15]}
    if row[16] is not None:
        record["superseded_by"] = row[16]
    return record


def searched_record_from_row(row: tuple) -> dict:
    """A record of ``SEARCHED_COLUMNS``: with ``scrubbed_with``, the version of the
    privacy rules its stored text was scrubbed with."""
    return {**record_from_row(row[:-1]), "scrubbed_with": row[-1]}


def namespaces_in(conn: Connection, table: str = "memory_records") -> list[str]:
    """Every namespace with a row in ``table`` (``events`` or ``memory_records``), one
    index seek each (a skip-scan: the cost is the number of namespaces, not of rows)."""
    assert table in ("events", "memory_records")
    return [row[0] for row in conn.execute(
        f"WITH RECURSIVE ns(n) AS (SELECT min(namespace) FROM {table} UNION ALL"
        f" SELECT (SELECT min(namespace) FROM {table} WHERE namespace > n) FROM ns"
        " WHERE n IS NOT NULL) SELECT n FROM ns WHERE n IS NOT NULL")]


def wrote_in(conn: Connection, namespaces: list[str]) -> bool:
    """Whether any of these namespaces holds an event or a record (a seek each)."""
    p = Params()
    marks = p.list(namespaces)
    return any(conn.execute(f"SELECT 1 FROM {table} WHERE namespace IN {marks} LIMIT 1",
                            p.values).fetchone() for table in ("events", "memory_records"))


def record_by_id(conn: Connection, record_id: str) -> dict | None:
    row = conn.execute(f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = $1",
                       (record_id,)).fetchone()
    return None if row is None else record_from_row(row)


def records_by_id(conn: Connection, record_ids: list[str], namespaces: Iterable[str],
                  valid_only: bool = False, searched: bool = False) -> list[dict]:
    """The records with these ids in these namespaces (``valid_only``: not marked
    invalid; ``searched``: for a search's answer, ``SEARCHED_COLUMNS``), in the order
    asked; ids that are not there are left out."""
    if not record_ids:
        return []
    p = Params()
    valid = " AND invalid_reason IS NULL" if valid_only else ""
    columns, made = ((SEARCHED_COLUMNS, searched_record_from_row) if searched
                     else (RECORD_COLUMNS, record_from_row))
    # Unindexed namespace: look the ids up by their unique index, not the namespace's rows.
    found = {row[0]: made(row) for row in conn.execute(
        f"SELECT {columns} FROM memory_records WHERE record_id IN {p.list(record_ids)}"
        f" AND {conn.unindexed('namespace')} IN {p.list(namespaces)}{valid}", p.values)}
    return [found[i] for i in dict.fromkeys(record_ids) if i in found]


def session_event_ids(conn: Connection, namespace: str, session_ids: list[str],
                      not_from: str | None = None) -> dict[str, list[str]]:
    """The ids of the events stored for each of these sessions in the namespace (a
    session with none is left out), those sent by another client than ``not_from`` only
    when given: an import of an agent's transcripts leaves alone a session its hooks
    captured live."""
    if not session_ids:
        return {}
    p = Params()
    found: dict[str, list[str]] = {}
    other = ""
    if not_from is not None:  # source_json is canonical JSON: "client_id":"…" as it is
        pattern = '%"client_id":' + json.dumps(not_from, ensure_ascii=False) + "%"
        other = f" AND source_json NOT LIKE {p(pattern)}"
    for session_id, event_id in conn.execute(
            f"SELECT session_id, event_id FROM events WHERE session_id IN"
            f" {p.list(session_ids)} AND namespace = {p(namespace)}{other} ORDER BY event_id",
            p.values):
        found.setdefault(session_id, []).append(event_id)
    return found


def records_around(conn: Connection, record: dict, namespaces: Iterable[str],
                   before: int, after: int) -> list[dict]:
    """``before`` records older than ``record`` and ``after`` newer ones, in these
    namespaces, with it in the middle: oldest first."""
    def side(after_it: bool, count: int) -> list[tuple]:
        p = Params()
        return conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE namespace IN"
            f" {p.list(namespaces)} AND (created_at, record_id) {'>' if after_it else '<'}"
            f" ({p(record['created_at'])}, {p(record['record_id'])}) ORDER BY created_at"
            f" {'' if after_it else 'DESC'}, record_id {'' if after_it else 'DESC'}"
            f" LIMIT {p(count)}", p.values).fetchall()

    older, newer = side(False, before), side(True, after)
    return ([record_from_row(row) for row in reversed(older)] + [record]
            + [record_from_row(row) for row in newer])


def unembedded(conn: Connection, after_id: int, limit: int) -> list[tuple[int, dict]]:
    """Records still to be embedded, in id order past after_id: (id, record)."""
    return [(row[0], record_from_row(row[1:])) for row in conn.execute(
        f"SELECT id, {RECORD_COLUMNS} FROM memory_records"
        f"{conn.indexed_by('memory_records_unembedded')}"
        " WHERE embedding_hash IS NULL AND id > $1 ORDER BY id LIMIT $2", (after_id, limit))]


def count_unembedded(conn: Connection) -> int:
    return conn.execute("SELECT count(*) FROM memory_records"
                        f"{conn.indexed_by('memory_records_unembedded')}"
                        " WHERE embedding_hash IS NULL").fetchone()[0]


def of_space(space: str) -> str:
    """The LIKE pattern of a space's vector hashes (``space:sha256``; a space is
    letters, digits and dashes)."""
    return f"{space}:%"


# A vector of the space, or one whose record's text changed since (its hash is NULL
# until the back-fill makes it again; the old vector serves until then).
IN_SPACE = "embedding IS NOT NULL AND (embedding_hash IS NULL OR embedding_hash LIKE $2)"


def count_vectors(conn: Connection, namespace: str, space: str) -> int:
    return conn.execute(f"SELECT count(*) FROM memory_records WHERE namespace = $1"
                        f" AND {IN_SPACE}", (namespace, of_space(space))).fetchone()[0]


def vectors(conn: Connection, namespace: str, space: str) -> Iterator[tuple[str, str, bytes]]:
    """A namespace's stored vectors of a space: (record_id, created_at, blob)."""
    yield from conn.execute(
        "SELECT record_id, created_at, embedding FROM memory_records"
        f" WHERE namespace = $1 AND {IN_SPACE}", (namespace, of_space(space)))


def count_other_vectors(conn: Connection, space: str) -> int:
    """Vectors of any other space than this one (another model's, or older ones that
    name none)."""
    return conn.execute("SELECT count(*) FROM memory_records WHERE embedding IS NOT NULL"
                        " AND embedding_hash NOT LIKE $1", (of_space(space),)).fetchone()[0]


def with_versions(conn: Connection, records: list[dict]) -> list[dict]:
    """The records, each with ``versions``: what it was before each merge or edit, oldest
    first (each with the time it was replaced and, for an edit, the reason given)."""
    versions: dict[str, list[dict]] = {r["record_id"]: [] for r in records}
    if versions:
        p = Params()
        for row in conn.execute(
                "SELECT record_id, title, summary, facts_json, concepts_json, files_touched_json,"
                " source_event_ids_json, created_at, replaced_at, reason FROM record_versions"
                f" WHERE record_id IN {p.list(versions)} ORDER BY record_id, id", p.values):
            version = {
                "title": row[1], "summary": row[2], "facts": json.loads(row[3]),
                "concepts": json.loads(row[4]), "files_touched": json.loads(row[5]),
                "source_event_ids": json.loads(row[6]), "created_at": row[7],
                "replaced_at": row[8]}
            if row[9] is not None:
                version["reason"] = row[9]
            versions[row[0]].append(version)
    return [{**r, "versions": versions[r["record_id"]]} for r in records]


def iter_records(conn: Connection, namespace: str | None = None,
                 vectors: bool = False) -> Iterator[dict]:
    """Every record (of a namespace), oldest first, with its ``versions``, its
    ``changes`` (read here alone: no search reads them back) and, with ``vectors``, its
    ``embedding`` (``{hash, vector}``, base64) when it has one."""
    sql = f"SELECT {RECORD_COLUMNS}, changes_text, embedding, embedding_hash FROM memory_records"
    args: tuple = ()
    if namespace:
        sql += " WHERE namespace = $1"
        args = (namespace,)
    page: list[dict] = []
    embedded: dict[str, dict] = {}
    for row in conn.execute(sql + " ORDER BY created_at, record_id", args):
        page.append(record_from_row(row, row[-3]))
        if vectors and row[-2] is not None:
            embedded[row[0]] = {"hash": row[-1],
                                "vector": base64.b64encode(row[-2]).decode("ascii")}
        if len(page) == 500:
            yield from _with_embeddings(with_versions(conn, page), embedded)
            page = []
    yield from _with_embeddings(with_versions(conn, page), embedded)


def _with_embeddings(records: list[dict], embedded: dict[str, dict]) -> Iterator[dict]:
    for record in records:
        vector = embedded.pop(record["record_id"], None)
        yield record if vector is None else {**record, "embedding": vector}


def iter_tombstones(conn: Connection, namespace: str | None = None) -> Iterator[dict]:
    """What remains of each forgotten record (of a namespace), by id."""
    for row in conn.execute("SELECT record_id, namespace, forgotten_at FROM tombstones"
                            " WHERE CAST($1 AS TEXT) IS NULL OR namespace = $1 ORDER BY record_id",
                            (namespace,)):
        yield {"record_id": row[0], "namespace": row[1], "forgotten_at": row[2]}


def undistilled(conn: Connection, namespace: str | None = None) -> dict[str, list[str]]:
    """Per namespace, the ids of the events not yet distilled into records: still in
    the buffer, or in a batch not done."""
    found: dict[str, list[str]] = {}
    for ns, event_id in conn.execute(
            "SELECT e.namespace, e.event_id FROM events e LEFT JOIN extraction_cursor c"
            " ON c.namespace = e.namespace WHERE (CAST($1 AS TEXT) IS NULL OR e.namespace = $1) AND"
            " (e.seq > COALESCE(c.last_seq, 0) OR EXISTS (SELECT 1 FROM extraction_batches b"
            " WHERE b.namespace = e.namespace AND b.state != 'done'"
            " AND e.seq BETWEEN b.first_seq AND b.last_seq))"
            " ORDER BY e.namespace, e.event_id", (namespace,)):
        found.setdefault(ns, []).append(event_id)
    return found


EXPORT_FORMAT = 1


def export_lines(conn: Connection, namespace: str | None = None, vectors: bool = False,
                 damaged: Callable[[str, str], None] | None = None) -> Iterator[str]:
    """The export, as JSON Lines: a header (the format and the schema), the events not yet
    distilled (so an import extracts those only), every event, every record with its
    versions (and vectors), and the tombstones of forgotten records. Everything is in a
    fixed order: exporting an import of it gives the same lines. Text is scrubbed on
    the way out, so what a newer rule catches never leaves in an old record.

    With ``damaged(what, why)``, a damaged SQLite file gives what can still be read: a
    table whose pages (or index) fail is read again row by row by its key, and each
    row, or list, that cannot be read is left out and reported."""
    def line(item: dict) -> str:
        return json.dumps(item, ensure_ascii=False) + "\n"

    yield line({"kirolearn_export": EXPORT_FORMAT, "schema": _schema_version(conn)})
    try:
        for ns, event_ids in undistilled(conn, namespace).items():
            yield line({"undistilled": {"namespace": ns, "event_ids": event_ids}})
    except errors.StoreError as exc:
        if not salvaging(conn, damaged):
            raise
        damaged("the list of events not yet distilled", f"unreadable ({exc}); left out:"
                " an import of this export will not extract them")
    report = damaged or (lambda what, why: None)

    def event_row(row: tuple) -> dict | None:
        try:
            return event_from_row(row)
        except (ValueError, TypeError) as exc:
            report(f"event {row[0]}", f"its stored body or source is not JSON ({exc}); left"
                   " out")
            return None

    seen: set[str] = set()
    for event in _salvaging(
            lambda: iter_events(conn, namespace, damaged),
            lambda: (event_row(row[1:]) for row in _rows_by_key(
                conn, "events", "seq", EVENT_COLUMNS, namespace, report)),
            conn, damaged, "events"):
        if event is not None and event["event_id"] not in seen:
            seen.add(event["event_id"])
            yield line(privacy.scrub_event(event))
    seen.clear()

    def salvaged_records() -> Iterator[dict]:
        for row in _rows_by_key(conn, "memory_records", "id", RECORD_COLUMNS, namespace,
                                report):
            record = record_from_row(row[1:])
            try:
                yield with_versions(conn, [record])[0]
            except errors.StoreError as exc:
                report(f"the earlier versions of record {record['record_id']}",
                       f"unreadable ({exc}); left out")
                yield {**record, "versions": []}

    for record in _salvaging(lambda: iter_records(conn, namespace, vectors), salvaged_records,
                             conn, damaged, "memory records"):
        if record["record_id"] in seen:
            continue
        seen.add(record["record_id"])
        embedding = record.pop("embedding", None)
        record = privacy.scrub(record)
        yield line(record if embedding is None else {**record, "embedding": embedding})
    for tombstone in _salvaging(
            lambda: iter_tombstones(conn, namespace),
            lambda: ({"record_id": row[1], "namespace": row[2], "forgotten_at": row[3]}
                     for row in _rows_by_key(conn, "tombstones", "rowid",
                                             "record_id, namespace, forgotten_at", namespace,
                                             report)),
            conn, damaged, "tombstones"):
        yield line({"tombstone": tombstone})


def salvaging(conn: Connection, damaged: Callable[[str, str], None] | None) -> bool:
    """Whether an export reads what it can of a damaged file: asked to, on SQLite (a
    PostgreSQL server answers for its own pages)."""
    return damaged is not None and conn.name == "sqlite"


def _salvaging(normal: Callable[[], Iterator], salvage: Callable[[], Iterator],
               conn: Connection, damaged: Callable[[str, str], None] | None,
               what: str) -> Iterator:
    """``normal()``'s items; if the file fails under it (and ``damaged`` asks for what
    can be read), ``salvage()``'s after them (the caller skips what it had)."""
    try:
        yield from normal()
        return
    except errors.StoreError as exc:
        if not salvaging(conn, damaged):
            raise
        damaged(f"the {what}", f"unreadable in order ({exc}); read one by one instead")
    yield from salvage()


def _rows_by_key(conn: Connection, table: str, key: str, columns: str,
                 namespace: str | None, damaged: Callable[[str, str], None]) -> Iterator[tuple]:
    """A damaged table's rows, (key, *columns), read by ranges of its integer key; a range
    that fails is halved down to one row, and a row that cannot be read is reported."""
    try:
        (top,) = conn.execute(f"SELECT max({key}) FROM {table}").fetchone()
    except errors.StoreError as exc:
        damaged(f"every row of {table}", f"unreadable: its last key cannot be read ({exc});"
                " left out")
        return
    where, args = (" AND namespace = $1", (namespace,)) if namespace else ("", ())
    ranges = [(1, top or 0)]
    while ranges:
        low, high = ranges.pop()
        if low > high:
            continue
        try:
            rows = conn.execute(f"SELECT {key}, {columns} FROM {table} WHERE {key} BETWEEN $1"
                                f" AND $2{where} ORDER BY {key}", (low, high, *args)).fetchall()
        except errors.StoreError as exc:
            if low == high:
                damaged(f"{table} row {low}", f"unreadable ({exc}); left out")
            else:
                middle = (low + high) // 2
                ranges += [(middle + 1, high), (low, middle)]
            continue
        yield from rows


def _schema_version(conn: Connection) -> int:
    """The schema an export is from, in SQLite's numbering whichever the store (an
    export moves between the two)."""
    version = conn.execute("SELECT max(version) FROM _migrations").fetchone()[0]
    return conn.dialect.export_schema(version)



PENDING = ("FROM events e LEFT JOIN extraction_cursor c ON c.namespace = e.namespace"
            " WHERE e.seq > COALESCE(c.last_seq, 0) GROUP BY e.namespace")



IDS_PER_STATEMENT = 500  # ids looked up by one statement (well under SQLite's limit)


def events_stored_at(conn: Connection, event_ids: list[str]) -> dict[str, str]:
    """When the events with these ids were stored (their transaction time), by id: those
    that were."""
    found: dict[str, str] = {}
    for start in range(0, len(event_ids), IDS_PER_STATEMENT):
        p = Params()
        ids = p.list(event_ids[start:start + IDS_PER_STATEMENT])
        found.update(conn.execute("SELECT event_id, transaction_time FROM events"
                                  f" WHERE event_id IN {ids}", p.values).fetchall())
    return found


# --- stats -------------------------------------------------------------------------------------

STATS_AUTHORS = 20  # the busiest authors of a project that stats names


def project_path(conn: Connection, namespace: str) -> str | None:
    """The project folder the namespace's newest event came from (an index seek)."""
    row = conn.execute("SELECT project_path FROM events WHERE namespace = $1"
                       " AND project_path IS NOT NULL ORDER BY seq DESC LIMIT 1",
                       (namespace,)).fetchone()
    return row[0] if row else None


def stats(conn: Connection, only: str | None = None) -> dict:
    """Counts per namespace (or for one): events by kind, records (of them, those
    stale and those superseded: kept for history, not recalled or ranked below),
    buffered events, open batches."""
    namespaces: dict[str, dict] = {}

    def entry(ns: str) -> dict:
        return namespaces.setdefault(ns, {"namespace": ns, "events": {}, "events_total": 0,
                                          "records": 0, "stale": 0, "superseded": 0,
                                          "pending_events": 0, "pending_batches": 0})

    for ns, kind, count in conn.execute(
            "SELECT namespace, kind, COUNT(*) FROM events GROUP BY namespace, kind"):
        entry(ns)["events"][kind] = count
        entry(ns)["events_total"] += count
    for ns, count, stale, superseded in conn.execute(
            "SELECT namespace, COUNT(*), COUNT(stale_why), COUNT(superseded_by)"
            " FROM memory_records GROUP BY namespace"):
        entry(ns).update(records=count, stale=stale, superseded=superseded)
    for ns, count in conn.execute(f"SELECT e.namespace, COUNT(*) {PENDING}"):
        entry(ns)["pending_events"] = count
    for ns, count in conn.execute(
            "SELECT namespace, COUNT(*) FROM extraction_batches"
            " WHERE state IN ('ready', 'leased') GROUP BY namespace"):
        entry(ns)["pending_batches"] = count
    rows = [n for n in namespaces.values() if only is None or n["namespace"] == only]
    for n in rows:  # each namespace as a project a person knows: its folder, its authors
        n["path"] = project_path(conn, n["namespace"])
        n["name"] = project.display_name(n["namespace"], n["path"])
        authors = conn.execute(
            "SELECT author, count(*) FROM memory_records WHERE namespace = $1"
            " GROUP BY author ORDER BY 2 DESC, 1", (n["namespace"],)).fetchall()
        n["authors_count"] = len(authors)
        n["authors"] = [{"author": a, "records": c} for a, c in authors[:STATS_AUTHORS]]
    rows.sort(key=lambda n: (n["name"], n["namespace"]))
    totals = {
        "events": sum(n["events_total"] for n in rows),
        "records": sum(n["records"] for n in rows),
        "stale": sum(n["stale"] for n in rows),
        "superseded": sum(n["superseded"] for n in rows),
        "pending_events": sum(n["pending_events"] for n in rows),
        "pending_batches": sum(n["pending_batches"] for n in rows),
    }
    actors: dict[str, dict] = {}  # who contributed what: the actor of each namespace
    for n in rows:
        actor = project.parts(n["namespace"])[0]
        found = actors.setdefault(actor, {"actor": actor, "events": 0, "records": 0})
        found["events"] += n["events_total"]
        found["records"] += n["records"]
    return {"namespaces": rows, "totals": totals,
            "actors": sorted(actors.values(), key=lambda a: (-a["records"], a["actor"]))}
