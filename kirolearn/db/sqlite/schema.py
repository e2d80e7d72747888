"""SQLite's schema: its numbered migrations, and the full-text tokenizer (FTS5) that the
records are indexed with and a search's words are split by."""

from __future__ import annotations

# The records' full-text tokenizer; retrieval tokenizes queries with the same one.
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "init", """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- arrival order, never reused
    event_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('prompt', 'tool_use', 'session_summary', 'note')),
    session_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    valid_time TEXT NOT NULL,
    valid_ms INTEGER NOT NULL,
    transaction_time TEXT NOT NULL,
    body_json TEXT NOT NULL,
    source_json TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    parent_event_id TEXT,
    project_path TEXT,
    schema_version INTEGER NOT NULL
) STRICT;
-- Ordered by (namespace, seq): a project's events in arrival order, and so its
-- extraction buffer (every seq past its cursor) and its batches (seq ranges).
CREATE INDEX events_namespace ON events (namespace);
-- Dedup looks for the same content in the same session around the same time; keyed by
-- session and time, inserts land at the end of their session's range (no random pages).
CREATE INDEX events_session_time ON events (session_id, valid_ms, content_hash);

-- The extraction buffer of a namespace is its events with seq > last_seq. Forming a
-- batch moves the cursor; nothing is written per event.
CREATE TABLE extraction_cursor (
    namespace TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
) STRICT;

CREATE TABLE memory_records (
    id INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    facts_json TEXT NOT NULL,
    facts_text TEXT NOT NULL,
    concepts_json TEXT NOT NULL,
    files_touched_json TEXT NOT NULL,
    observation_type TEXT NOT NULL CHECK (observation_type IN
        ('tool_use', 'decision', 'error', 'discovery', 'pattern', 'session_summary')),
    strategy TEXT NOT NULL,
    source_event_ids_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    batch_id TEXT
) STRICT;
CREATE INDEX memory_records_namespace ON memory_records (namespace, created_at);

CREATE VIRTUAL TABLE memory_records_fts USING fts5 (
    title, summary, facts_text,
    content = 'memory_records', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_records_ai AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;
CREATE TRIGGER memory_records_ad AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
END;
CREATE TRIGGER memory_records_au AFTER UPDATE ON memory_records BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;
CREATE VIRTUAL TABLE memory_records_fts_vocab USING fts5vocab (memory_records_fts, 'row');

CREATE TABLE extraction_batches (
    batch_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    first_seq INTEGER NOT NULL,  -- the batch is the namespace's events with seq in
    last_seq INTEGER NOT NULL,   -- first_seq..last_seq (inclusive)
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'done', 'failed')),
    reason TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    lease_expires_ms INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    done_ms INTEGER,
    record_count INTEGER
) STRICT;
CREATE INDEX extraction_batches_state ON extraction_batches (state, lease_expires_ms);

CREATE TABLE retrievals (
    id INTEGER PRIMARY KEY,
    prompt_event_id TEXT,
    namespace TEXT,
    record_ids_json TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'empty', 'fallback', 'timeout', 'error')),
    created_at TEXT NOT NULL
) STRICT;
CREATE INDEX retrievals_prompt ON retrievals (prompt_event_id);
"""),
    (2, "record_namespace_index", """
-- Search checks the namespace of every full-text match; this narrow index answers
-- that without reading the wide record rows (half the cost of a search, measured).
CREATE INDEX memory_records_id_namespace ON memory_records (id, namespace);
"""),
    (3, "record_title_index", """
-- A new record with the title of a recent one in its namespace may be its near-duplicate.
CREATE INDEX memory_records_title ON memory_records (namespace, title);
"""),
    (4, "record_embeddings", """
-- A record's vector (float32, little-endian) from its title, summary, facts and concepts;
-- embedding_hash names the text and model it was made from. NULL: still to be embedded
-- (a new record, or one whose text a merge changed).
ALTER TABLE memory_records ADD COLUMN embedding BLOB;
ALTER TABLE memory_records ADD COLUMN embedding_hash TEXT;
CREATE INDEX memory_records_unembedded ON memory_records (id) WHERE embedding_hash IS NULL;
"""),
    (5, "retrieval_context", """
-- What the viewer shows of a retrieval: the context the agent was given and, for an
-- answer that fell back or failed, why. Retrievals logged before this have ''.
ALTER TABLE retrievals ADD COLUMN context TEXT NOT NULL DEFAULT '';
ALTER TABLE retrievals ADD COLUMN error TEXT;
CREATE INDEX retrievals_namespace ON retrievals (namespace, id);
-- The viewer's latency chart reads these columns only, for a span of time.
CREATE INDEX retrievals_time ON retrievals (created_at, namespace, latency_ms, outcome);
-- The viewer counts records by type and strategy, and filters by them, without reading
-- the wide rows (a record's vector alone is 1.5 KB).
CREATE INDEX memory_records_kind ON memory_records (namespace, observation_type, strategy);
"""),
    (6, "record_versions", """
-- What a record was before a merge changed it: a merge only adds, and every earlier
-- state stays readable (get_records, export). Forgetting a record forgets its versions.
CREATE TABLE record_versions (
    id INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    facts_json TEXT NOT NULL,
    concepts_json TEXT NOT NULL,
    files_touched_json TEXT NOT NULL,
    source_event_ids_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    replaced_at TEXT NOT NULL
) STRICT;
CREATE INDEX record_versions_record ON record_versions (record_id, id);
CREATE TRIGGER memory_records_versions_ad AFTER DELETE ON memory_records BEGIN
    DELETE FROM record_versions WHERE record_id = old.record_id;
END;
"""),
    (7, "batch_failures", """
-- Why a batch's last attempt failed (shown by status and the viewer; a failed batch is
-- re-queued by `kirolearn extraction retry`).
ALTER TABLE extraction_batches ADD COLUMN error TEXT;
"""),
    (8, "tombstones_and_edits", """
-- What remains of a forgotten record: its id, so that no import brings it back.
CREATE TABLE tombstones (
    record_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    forgotten_at TEXT NOT NULL
) STRICT;
-- A record marked invalid (and why) stays readable (get_records, the viewer, export)
-- but is never retrieved: it leaves the full-text index and has no vector.
ALTER TABLE memory_records ADD COLUMN invalid_reason TEXT;
-- Why a version was replaced: NULL for a merge, the reason given for an edit.
ALTER TABLE record_versions ADD COLUMN reason TEXT;
DROP TRIGGER memory_records_ai;
CREATE TRIGGER memory_records_ai AFTER INSERT ON memory_records
WHEN new.invalid_reason IS NULL BEGIN
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;
DROP TRIGGER memory_records_ad;
CREATE TRIGGER memory_records_ad AFTER DELETE ON memory_records
WHEN old.invalid_reason IS NULL BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
END;
-- Only a change of the indexed text (or of validity) touches the index: storing a
-- vector does not.
DROP TRIGGER memory_records_au;
CREATE TRIGGER memory_records_au AFTER UPDATE OF title, summary, facts_text, invalid_reason
ON memory_records BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text)
    SELECT 'delete', old.id, old.title, old.summary, old.facts_text
    WHERE old.invalid_reason IS NULL;
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text)
    SELECT new.id, new.title, new.summary, new.facts_text WHERE new.invalid_reason IS NULL;
END;
"""),
    (9, "record_turns", """
-- Where a record sits in its session: the session and arrival order (seq) of its first
-- source event, set when it is saved. Search reads a hit's neighbours, the turns just
-- before and after it, from here. NULL when its events are not in this database.
ALTER TABLE memory_records ADD COLUMN session_id TEXT;
ALTER TABLE memory_records ADD COLUMN turn_seq INTEGER;
UPDATE memory_records SET (session_id, turn_seq) = (
    SELECT session_id, seq FROM events
    WHERE event_id = json_extract(memory_records.source_event_ids_json, '$[0]'));
CREATE INDEX memory_records_turn ON memory_records (session_id, turn_seq)
WHERE session_id IS NOT NULL;
"""),
    (10, "record_facts_index", """
-- A new record with the facts of a recent one may say the same (see writes.same_work);
-- the start of the facts finds those candidates without reading every recent record.
CREATE INDEX memory_records_facts ON memory_records (namespace, substr(facts_json, 1, 200));
"""),
    (11, "ranking_signals", """
-- How often a record proved useful: it was given to a prompt, and that turn then
-- touched one of its files (writes.note_usefulness). Search ranks by it.
ALTER TABLE memory_records ADD COLUMN useful_count INTEGER NOT NULL DEFAULT 0;
-- Per project and file, the latest turn that changed it (the turn_seq of the record
-- that tells of the change): a record naming the file from an earlier turn is stale.
-- The path is kept as a hash (writes.path_key): a path is text from an event, and
-- this table is not scrubbed nor exported.
CREATE TABLE file_changes (
    namespace TEXT NOT NULL,
    path_key TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    PRIMARY KEY (namespace, path_key)
) STRICT, WITHOUT ROWID;
"""),
    (12, "record_files_key", """
-- The set of files a record names, as one key (db.files_key), so that the records
-- about the same files are found by an index seek (writes.reconcile). Records saved
-- before this have none: they are never reconciled.
ALTER TABLE memory_records ADD COLUMN files_key TEXT;
CREATE INDEX memory_records_files ON memory_records (namespace, files_key)
    WHERE files_key IS NOT NULL;
"""),
    (13, "record_files", """
-- The file index: each file a valid record names (as the record gives it, relative to
-- its project), so that the records about a file are found by an index seek: a file
-- the agent opens, the files in play for a prompt. Kept by triggers, as the full-text
-- index is: a record forgotten, marked invalid or rewritten by a scrub leaves it.
CREATE TABLE record_files (
    namespace TEXT NOT NULL,
    path TEXT NOT NULL,
    record_id INTEGER NOT NULL,  -- memory_records.id
    PRIMARY KEY (namespace, path, record_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX record_files_record ON record_files (record_id);
CREATE TRIGGER memory_records_files_ai AFTER INSERT ON memory_records
WHEN new.invalid_reason IS NULL BEGIN
    INSERT OR IGNORE INTO record_files SELECT new.namespace, value, new.id
    FROM json_each(new.files_touched_json) WHERE type = 'text';
END;
CREATE TRIGGER memory_records_files_ad AFTER DELETE ON memory_records BEGIN
    DELETE FROM record_files WHERE record_id = old.id;
END;
CREATE TRIGGER memory_records_files_au
AFTER UPDATE OF namespace, files_touched_json, invalid_reason ON memory_records BEGIN
    DELETE FROM record_files WHERE record_id = old.id;
    INSERT OR IGNORE INTO record_files SELECT new.namespace, value, new.id
    FROM json_each(new.files_touched_json) WHERE type = 'text' AND new.invalid_reason IS NULL;
END;
INSERT OR IGNORE INTO record_files SELECT mr.namespace, f.value, mr.id
FROM memory_records mr, json_each(mr.files_touched_json) f
WHERE mr.invalid_reason IS NULL AND f.type = 'text';
"""),
    (14, "concepts_indexed", """
-- A record's concepts (the names its edits touched, its files' stems) are searched as its
-- words are, though never shown: the full-text index gains them as a column. The index
-- reads the JSON list as text: its quotes and commas separate words as spaces do.
DROP TRIGGER memory_records_ai;
DROP TRIGGER memory_records_ad;
DROP TRIGGER memory_records_au;
DROP TABLE memory_records_fts_vocab;
DROP TABLE memory_records_fts;
CREATE VIRTUAL TABLE memory_records_fts USING fts5 (
    title, summary, facts_text, concepts_json,
    content = 'memory_records', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE memory_records_fts_vocab USING fts5vocab (memory_records_fts, 'row');
CREATE TRIGGER memory_records_ai AFTER INSERT ON memory_records
WHEN new.invalid_reason IS NULL BEGIN
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text, concepts_json)
    VALUES (new.id, new.title, new.summary, new.facts_text, new.concepts_json);
END;
CREATE TRIGGER memory_records_ad AFTER DELETE ON memory_records
WHEN old.invalid_reason IS NULL BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text,
                                    concepts_json)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text, old.concepts_json);
END;
CREATE TRIGGER memory_records_au
AFTER UPDATE OF title, summary, facts_text, concepts_json, invalid_reason
ON memory_records BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text,
                                    concepts_json)
    SELECT 'delete', old.id, old.title, old.summary, old.facts_text, old.concepts_json
    WHERE old.invalid_reason IS NULL;
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text, concepts_json)
    SELECT new.id, new.title, new.summary, new.facts_text, new.concepts_json
    WHERE new.invalid_reason IS NULL;
END;
INSERT INTO memory_records_fts (rowid, title, summary, facts_text, concepts_json)
SELECT id, title, summary, facts_text, concepts_json FROM memory_records
WHERE invalid_reason IS NULL;
"""),
    (15, "record_anchors", """
-- The code a record is about: {path: [names the work defined there]} (extract.anchors),
-- checked against the working tree before the record is recalled (search.staleness).
ALTER TABLE memory_records ADD COLUMN anchors_json TEXT NOT NULL DEFAULT '{}';
"""),
    (16, "record_code_state", """
-- Where a record's work was in git ({branch, commit, blobs}: a record made on a branch
-- not merged here is not recalled), and what became of it: stale (its code gone from
-- the project's history, with why and when) or superseded by a later record about the
-- same code (a revert). Kept for history; a stale record is not recalled, a superseded
-- one ranks below.
ALTER TABLE memory_records ADD COLUMN code_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE memory_records ADD COLUMN stale_why TEXT;
ALTER TABLE memory_records ADD COLUMN stale_at TEXT;
ALTER TABLE memory_records ADD COLUMN superseded_by TEXT;
"""),    (17, "record_scrubbed_with", """
-- The version of the privacy rules a record's text was scrubbed with when stored
-- (privacy.Scrubber.version): a search scrubs only the records of another version, and
-- storage scrubs those again. NULL: stored before this column; scrubbed again at start.
ALTER TABLE memory_records ADD COLUMN scrubbed_with TEXT;
"""),
    (18, "record_author", """
-- Who did a record's work: a seeded commit's author (code.author), else the actor of
-- its namespace. The viewer and stats count and filter a project's records by it.
ALTER TABLE memory_records ADD COLUMN author TEXT;
UPDATE memory_records SET author = COALESCE(json_extract(code_json, '$.author'),
    substr(namespace, 8, instr(substr(namespace, 8), '/') - 1));
CREATE INDEX memory_records_author ON memory_records (namespace, author);
"""),
    (19, "record_objects", """
-- The git objects a record's work is known by, so that the records of the commits that
-- wrote a file's lines are found by an index seek (search.why): a seeded record's commit
-- (path ''), and each file a live record's turn left, by the blob id it left it as and
-- its path (the commit that later holds that blob holds its work). A seeded record's
-- blobs are today's, read when it was extracted: not its commit's, so not kept here.
CREATE TABLE record_objects (
    namespace TEXT NOT NULL,
    object_id TEXT NOT NULL,
    path TEXT NOT NULL,
    record_id INTEGER NOT NULL,  -- memory_records.id
    PRIMARY KEY (namespace, object_id, path, record_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX record_objects_record ON record_objects (record_id);
CREATE TRIGGER memory_records_objects_ai AFTER INSERT ON memory_records BEGIN
    INSERT OR IGNORE INTO record_objects SELECT new.namespace,
        json_extract(new.code_json, '$.commit'), '', new.id
    WHERE new.invalid_reason IS NULL AND json_type(new.code_json, '$.author') = 'text'
      AND json_type(new.code_json, '$.commit') = 'text';
    INSERT OR IGNORE INTO record_objects SELECT new.namespace, b.value, b.key, new.id
    FROM json_each(new.code_json, '$.blobs') b
    WHERE new.invalid_reason IS NULL AND json_type(new.code_json, '$.author') IS NULL
      AND b.type = 'text';
END;
CREATE TRIGGER memory_records_objects_ad AFTER DELETE ON memory_records BEGIN
    DELETE FROM record_objects WHERE record_id = old.id;
END;
CREATE TRIGGER memory_records_objects_au
AFTER UPDATE OF namespace, code_json, invalid_reason ON memory_records BEGIN
    DELETE FROM record_objects WHERE record_id = old.id;
    INSERT OR IGNORE INTO record_objects SELECT new.namespace,
        json_extract(new.code_json, '$.commit'), '', new.id
    WHERE new.invalid_reason IS NULL AND json_type(new.code_json, '$.author') = 'text'
      AND json_type(new.code_json, '$.commit') = 'text';
    INSERT OR IGNORE INTO record_objects SELECT new.namespace, b.value, b.key, new.id
    FROM json_each(new.code_json, '$.blobs') b
    WHERE new.invalid_reason IS NULL AND json_type(new.code_json, '$.author') IS NULL
      AND b.type = 'text';
END;
INSERT OR IGNORE INTO record_objects SELECT namespace, json_extract(code_json, '$.commit'),
    '', id FROM memory_records
WHERE invalid_reason IS NULL AND json_type(code_json, '$.author') = 'text'
  AND json_type(code_json, '$.commit') = 'text';
INSERT OR IGNORE INTO record_objects SELECT mr.namespace, b.value, b.key, mr.id
FROM memory_records mr, json_each(mr.code_json, '$.blobs') b
WHERE mr.invalid_reason IS NULL AND json_type(mr.code_json, '$.author') IS NULL
  AND b.type = 'text';
"""),
    (20, "record_changes", """
-- The lines a record's edits added or removed (``changes``): searched as a ranking of
-- their own (search.steps.changed), never shown. Their full-text index is apart from
-- the records' (whose words' frequencies code would skew), kept by triggers alike.
ALTER TABLE memory_records ADD COLUMN changes_text TEXT NOT NULL DEFAULT '';
CREATE VIRTUAL TABLE record_changes_fts USING fts5 (
    changes_text, content = 'memory_records', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_records_changes_ai AFTER INSERT ON memory_records
WHEN new.invalid_reason IS NULL AND new.changes_text <> '' BEGIN
    INSERT INTO record_changes_fts (rowid, changes_text) VALUES (new.id, new.changes_text);
END;
CREATE TRIGGER memory_records_changes_ad AFTER DELETE ON memory_records
WHEN old.invalid_reason IS NULL AND old.changes_text <> '' BEGIN
    INSERT INTO record_changes_fts (record_changes_fts, rowid, changes_text)
    VALUES ('delete', old.id, old.changes_text);
END;
CREATE TRIGGER memory_records_changes_au
AFTER UPDATE OF changes_text, invalid_reason ON memory_records BEGIN
    INSERT INTO record_changes_fts (record_changes_fts, rowid, changes_text)
    SELECT 'delete', old.id, old.changes_text
    WHERE old.invalid_reason IS NULL AND old.changes_text <> '';
    INSERT INTO record_changes_fts (rowid, changes_text) SELECT new.id, new.changes_text
    WHERE new.invalid_reason IS NULL AND new.changes_text <> '';
END;
"""),
]
