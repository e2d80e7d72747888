"""PostgreSQL's schema: its numbered migrations (a schema of its own, numbered from 1,
holding the same tables as SQLite's), and which SQLite schema each matches (an export
names that one).

The full text is a ``tsvector`` column generated from a valid record's title, summary
and facts, with a GIN index; ``record_terms`` keeps how many records hold each lexeme
(the counterpart of SQLite's fts5vocab table), kept by triggers (added up once a
transaction: migration 8), so that the search's IDF rules read a term's frequency by one
index seek.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "init", """
-- Words as SQLite's index makes them: stemmed (Snowball's English), and no stop words
-- (a common word is weighed by its frequency, as there).
CREATE TEXT SEARCH DICTIONARY kirolearn_stem (TEMPLATE = snowball, LANGUAGE = english);
CREATE TEXT SEARCH CONFIGURATION kirolearn (COPY = english);
ALTER TEXT SEARCH CONFIGURATION kirolearn ALTER MAPPING REPLACE english_stem WITH kirolearn_stem;

CREATE FUNCTION julianday(moment text) RETURNS double precision LANGUAGE sql STABLE
    RETURN (extract(epoch FROM moment::timestamptz) / 86400 + 2440587.5)::double precision;

CREATE TABLE events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- arrival order, never reused
    event_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('prompt', 'tool_use', 'session_summary', 'note')),
    session_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    valid_time TEXT NOT NULL,
    valid_ms BIGINT NOT NULL,
    transaction_time TEXT NOT NULL,
    body_json TEXT NOT NULL,
    source_json TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    parent_event_id TEXT,
    project_path TEXT,
    schema_version INTEGER NOT NULL
);
CREATE INDEX events_namespace ON events (namespace, seq);
CREATE INDEX events_session_time ON events (session_id, valid_ms, content_hash);

CREATE TABLE extraction_cursor (
    namespace TEXT PRIMARY KEY,
    last_seq BIGINT NOT NULL
);

CREATE TABLE memory_records (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    batch_id TEXT,
    embedding BYTEA,
    embedding_hash TEXT,
    invalid_reason TEXT,
    session_id TEXT,
    turn_seq BIGINT,
    useful_count INTEGER NOT NULL DEFAULT 0,
    files_key TEXT,
    -- A valid record's words; NULL (never matched) once it is marked invalid.
    search tsvector GENERATED ALWAYS AS (CASE WHEN invalid_reason IS NULL THEN
        to_tsvector('kirolearn'::regconfig, title || ' ' || summary || ' ' || facts_text)
        END) STORED
);
CREATE INDEX memory_records_search ON memory_records USING gin (search);
CREATE INDEX memory_records_namespace ON memory_records (namespace, created_at);
CREATE INDEX memory_records_title ON memory_records (namespace, title);
CREATE INDEX memory_records_unembedded ON memory_records (id) WHERE embedding_hash IS NULL;
CREATE INDEX memory_records_kind ON memory_records (namespace, observation_type, strategy);
CREATE INDEX memory_records_turn ON memory_records (session_id, turn_seq)
    WHERE session_id IS NOT NULL;
CREATE INDEX memory_records_facts ON memory_records (namespace, substr(facts_json, 1, 200));
CREATE INDEX memory_records_files ON memory_records (namespace, files_key)
    WHERE files_key IS NOT NULL;

-- How many valid records hold each lexeme (search's document frequencies).
CREATE TABLE record_terms (
    term TEXT PRIMARY KEY,
    docs BIGINT NOT NULL
);
CREATE FUNCTION record_terms_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.search IS NOT NULL THEN
        UPDATE record_terms SET docs = docs - 1
        WHERE term = ANY (tsvector_to_array(OLD.search));
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.search IS NOT NULL THEN
        INSERT INTO record_terms
        SELECT term, 1 FROM unnest(tsvector_to_array(NEW.search)) AS t(term)
        ON CONFLICT (term) DO UPDATE SET docs = record_terms.docs + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_records_terms
AFTER INSERT OR DELETE OR UPDATE OF title, summary, facts_text, invalid_reason
ON memory_records FOR EACH ROW EXECUTE FUNCTION record_terms_count();

CREATE TABLE extraction_batches (
    batch_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'done', 'failed')),
    reason TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    lease_expires_ms BIGINT,
    attempts INTEGER NOT NULL DEFAULT 0,
    done_ms BIGINT,
    record_count INTEGER,
    error TEXT
);
CREATE INDEX extraction_batches_state ON extraction_batches (state, lease_expires_ms);

CREATE TABLE retrievals (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    prompt_event_id TEXT,
    namespace TEXT,
    record_ids_json TEXT NOT NULL,
    latency_ms DOUBLE PRECISION NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'empty', 'fallback', 'timeout', 'error')),
    created_at TEXT NOT NULL,
    context TEXT NOT NULL DEFAULT '',
    error TEXT
);
CREATE INDEX retrievals_prompt ON retrievals (prompt_event_id);
CREATE INDEX retrievals_namespace ON retrievals (namespace, id);
CREATE INDEX retrievals_time ON retrievals (created_at, namespace, latency_ms, outcome);

CREATE TABLE record_versions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    record_id TEXT NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    facts_json TEXT NOT NULL,
    concepts_json TEXT NOT NULL,
    files_touched_json TEXT NOT NULL,
    source_event_ids_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    replaced_at TEXT NOT NULL,
    reason TEXT
);
CREATE INDEX record_versions_record ON record_versions (record_id, id);
CREATE FUNCTION record_versions_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM record_versions WHERE record_id = OLD.record_id;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_records_versions_ad AFTER DELETE ON memory_records
FOR EACH ROW EXECUTE FUNCTION record_versions_forget();

CREATE TABLE tombstones (
    record_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    forgotten_at TEXT NOT NULL
);

CREATE TABLE file_changes (
    namespace TEXT NOT NULL,
    path_key TEXT NOT NULL,
    turn_seq BIGINT NOT NULL,
    PRIMARY KEY (namespace, path_key)
);
"""),
    (2, "identifier_lexemes", """
-- An identifier joined by underscores (refresh_user_repository) is also one lexeme of
-- its own: a query for it looks that one up, where its words as a phrase made
-- PostgreSQL read every record holding all of them (its index keeps no positions).
CREATE FUNCTION kirolearn_identifiers(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN coalesce((SELECT string_agg(DISTINCT quote_literal(lower(m[1])) || ':1', ' ')
                 FROM regexp_matches(body, '([[:alnum:]]+(?:_+[[:alnum:]]+)+)', 'g') AS m
                )::tsvector, ''::tsvector);

ALTER TABLE memory_records DROP COLUMN search;
ALTER TABLE memory_records ADD COLUMN search tsvector GENERATED ALWAYS AS (
    CASE WHEN invalid_reason IS NULL THEN
        to_tsvector('kirolearn'::regconfig, title || ' ' || summary || ' ' || facts_text)
        || kirolearn_identifiers(title || ' ' || summary || ' ' || facts_text)
    END) STORED;
CREATE INDEX memory_records_search ON memory_records USING gin (search);
DELETE FROM record_terms;
INSERT INTO record_terms SELECT term, count(*) FROM memory_records,
    unnest(tsvector_to_array(search)) AS t(term) GROUP BY term;
ANALYZE memory_records;
"""),
    (3, "record_files", """
-- The file index (SQLite's migration 13): each file a valid record names, kept by a
-- trigger, so that the records about a file are found by an index seek.
CREATE TABLE record_files (
    namespace TEXT NOT NULL,
    path TEXT NOT NULL,
    record_id BIGINT NOT NULL,  -- memory_records.id
    PRIMARY KEY (namespace, path, record_id)
);
CREATE INDEX record_files_record ON record_files (record_id);
CREATE FUNCTION record_files_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM record_files WHERE record_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.invalid_reason IS NULL THEN
        INSERT INTO record_files SELECT NEW.namespace, f.path, NEW.id
        FROM jsonb_array_elements(NEW.files_touched_json::jsonb) AS j(value),
             LATERAL (SELECT j.value #>> '{}' AS path) AS f
        WHERE jsonb_typeof(j.value) = 'string' ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_records_files
AFTER INSERT OR DELETE OR UPDATE OF namespace, files_touched_json, invalid_reason
ON memory_records FOR EACH ROW EXECUTE FUNCTION record_files_keep();
INSERT INTO record_files SELECT DISTINCT mr.namespace, j.value #>> '{}', mr.id
FROM memory_records mr, jsonb_array_elements(mr.files_touched_json::jsonb) AS j(value)
WHERE mr.invalid_reason IS NULL AND jsonb_typeof(j.value) = 'string';
"""),
    (4, "concepts_indexed", """
-- A record's concepts are searched as its words are (SQLite's migration 14): the JSON
-- list read as text, its punctuation separating words.
ALTER TABLE memory_records DROP COLUMN search;
ALTER TABLE memory_records ADD COLUMN search tsvector GENERATED ALWAYS AS (
    CASE WHEN invalid_reason IS NULL THEN
        to_tsvector('kirolearn'::regconfig, title || ' ' || summary || ' ' || facts_text
                                            || ' ' || concepts_json)
        || kirolearn_identifiers(title || ' ' || summary || ' ' || facts_text || ' '
                                 || concepts_json)
    END) STORED;
CREATE INDEX memory_records_search ON memory_records USING gin (search);
DROP TRIGGER memory_records_terms ON memory_records;
CREATE TRIGGER memory_records_terms
AFTER INSERT OR DELETE OR UPDATE OF title, summary, facts_text, concepts_json, invalid_reason
ON memory_records FOR EACH ROW EXECUTE FUNCTION record_terms_count();
DELETE FROM record_terms;
INSERT INTO record_terms SELECT term, count(*) FROM memory_records,
    unnest(tsvector_to_array(search)) AS t(term) GROUP BY term;
ANALYZE memory_records;
"""),
    (5, "record_anchors", """
-- The code a record is about (SQLite's migration 15).
ALTER TABLE memory_records ADD COLUMN anchors_json TEXT NOT NULL DEFAULT '{}';
"""),
    (6, "record_code_state", """
-- Where a record's work was in git, and whether it is stale or superseded (SQLite's
-- migration 16).
ALTER TABLE memory_records ADD COLUMN code_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE memory_records ADD COLUMN stale_why TEXT;
ALTER TABLE memory_records ADD COLUMN stale_at TEXT;
ALTER TABLE memory_records ADD COLUMN superseded_by TEXT;
"""),
    (7, "record_scrubbed_with", """
-- The version of the privacy rules a record's text was scrubbed with (SQLite's
-- migration 17).
ALTER TABLE memory_records ADD COLUMN scrubbed_with TEXT;
"""),
    (8, "record_terms_per_transaction", """
-- The search's term counts change once a transaction, not once a record: the common
-- terms' rows were updated (and locked) for every record written. The first record of
-- a transaction is counted at once, as before; each later one's trigger adds its terms
-- to a table of the session's own (temporary, emptied at each commit that used it), and
-- a deferred trigger adds them up into record_terms as the transaction commits (the
-- first to run; the others find nothing waiting).
CREATE OR REPLACE FUNCTION record_terms_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('kirolearn.terms_later', true) IS DISTINCT FROM 'yes' THEN
        -- The first record of a transaction (most write one) is counted at once.
        PERFORM set_config('kirolearn.terms_later', 'yes', true);  -- until the commit
        IF TG_OP <> 'INSERT' AND OLD.search IS NOT NULL THEN
            UPDATE record_terms SET docs = docs - 1
            WHERE term = ANY (tsvector_to_array(OLD.search));
        END IF;
        IF TG_OP <> 'DELETE' AND NEW.search IS NOT NULL THEN
            INSERT INTO record_terms
            SELECT term, 1 FROM unnest(tsvector_to_array(NEW.search)) AS t(term)
            ON CONFLICT (term) DO UPDATE SET docs = record_terms.docs + 1;
        END IF;
        RETURN NULL;
    END IF;
    PERFORM set_config('kirolearn.terms_waiting', 'yes', true);
    IF to_regclass('pg_temp.record_term_changes') IS NULL THEN
        CREATE TEMPORARY TABLE record_term_changes (
            term TEXT NOT NULL,
            delta INTEGER NOT NULL
        ) ON COMMIT DELETE ROWS;
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.search IS NOT NULL THEN
        INSERT INTO pg_temp.record_term_changes
        SELECT term, -1 FROM unnest(tsvector_to_array(OLD.search)) AS t(term);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.search IS NOT NULL THEN
        INSERT INTO pg_temp.record_term_changes
        SELECT term, 1 FROM unnest(tsvector_to_array(NEW.search)) AS t(term);
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION record_terms_fold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('kirolearn.terms_waiting', true) IS DISTINCT FROM 'yes' THEN
        RETURN NULL;  -- none, or added up already
    END IF;
    PERFORM set_config('kirolearn.terms_waiting', 'no', true);
    WITH moved AS (DELETE FROM pg_temp.record_term_changes RETURNING term, delta),
    summed AS (SELECT term, sum(delta)::bigint AS delta FROM moved GROUP BY term
               HAVING sum(delta) <> 0),
    updated AS (UPDATE record_terms r SET docs = r.docs + s.delta FROM summed s
                WHERE r.term = s.term RETURNING r.term)
    INSERT INTO record_terms
    SELECT term, delta FROM summed WHERE delta > 0 AND term NOT IN (SELECT term FROM updated)
    ON CONFLICT (term) DO UPDATE SET docs = record_terms.docs + EXCLUDED.docs;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER memory_records_terms_fold
AFTER INSERT OR DELETE OR UPDATE OF title, summary, facts_text, concepts_json, invalid_reason
ON memory_records DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION record_terms_fold();
"""),
    (9, "record_author", """
-- Who did a record's work (SQLite's migration 18).
ALTER TABLE memory_records ADD COLUMN author TEXT;
UPDATE memory_records SET author = COALESCE(code_json::json ->> 'author',
    split_part(namespace, '/', 3));
CREATE INDEX memory_records_author ON memory_records (namespace, author);
"""),
    (10, "record_objects", """
-- The git objects a record's work is known by (SQLite's migration 19): a seeded
-- record's commit (path ''), a live record's files by the blob id its turn left each as.
CREATE TABLE record_objects (
    namespace TEXT NOT NULL,
    object_id TEXT NOT NULL,
    path TEXT NOT NULL,
    record_id BIGINT NOT NULL,  -- memory_records.id
    PRIMARY KEY (namespace, object_id, path, record_id)
);
CREATE INDEX record_objects_record ON record_objects (record_id);
CREATE FUNCTION record_objects_of(code jsonb) RETURNS TABLE (object_id TEXT, path TEXT)
LANGUAGE sql IMMUTABLE AS $$
    SELECT code ->> 'commit', '' WHERE jsonb_typeof(code -> 'author') = 'string'
        AND jsonb_typeof(code -> 'commit') = 'string'
    UNION ALL
    SELECT b.value #>> '{}', b.key FROM jsonb_each(CASE WHEN jsonb_typeof(code -> 'blobs')
        = 'object' AND code -> 'author' IS NULL THEN code -> 'blobs' END) AS b
    WHERE jsonb_typeof(b.value) = 'string'
$$;
CREATE FUNCTION record_objects_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM record_objects WHERE record_id = OLD.id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.invalid_reason IS NULL THEN
        INSERT INTO record_objects SELECT NEW.namespace, o.object_id, o.path, NEW.id
        FROM record_objects_of(NEW.code_json::jsonb) AS o ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_records_objects
AFTER INSERT OR DELETE OR UPDATE OF namespace, code_json, invalid_reason
ON memory_records FOR EACH ROW EXECUTE FUNCTION record_objects_keep();
INSERT INTO record_objects SELECT mr.namespace, o.object_id, o.path, mr.id
FROM memory_records mr, record_objects_of(mr.code_json::jsonb) AS o
WHERE mr.invalid_reason IS NULL ON CONFLICT DO NOTHING;
"""),
    (11, "record_changes", """
-- The lines a record's edits added or removed (SQLite's migration 20): their own
-- index, apart from the records' words.
ALTER TABLE memory_records ADD COLUMN changes_text TEXT NOT NULL DEFAULT '';
ALTER TABLE memory_records ADD COLUMN changes_search tsvector GENERATED ALWAYS AS (
    CASE WHEN invalid_reason IS NULL AND changes_text <> '' THEN
        to_tsvector('kirolearn'::regconfig, changes_text)
        || kirolearn_identifiers(changes_text)
    END) STORED;
CREATE INDEX memory_records_changes_search ON memory_records USING gin (changes_search);
"""),
]


# Each migration's schema, as the SQLite migration it matches (exports name that one).
SQLITE_SCHEMA = {1: 12, 2: 12, 3: 13, 4: 14, 5: 15, 6: 16, 7: 17, 8: 17, 9: 18, 10: 19,
                 11: 20}
