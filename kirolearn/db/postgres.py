"""PostgreSQL: a team's store, run by the same statements as the SQLite file.

kirolearn's statements are written once, in SQLite's dialect (``writes``, ``reads``,
``views``, and ``fts`` but for its full-text part). A PostgreSQL ``Connection`` runs
them through ``translate``, which knows the few differences they use:

- ``?`` and ``?N`` placeholders become psycopg's named ones (a repeated ``?1`` is one
  server parameter; one that may be NULL is written ``CAST(?1 AS TEXT) IS NULL``, as
  PostgreSQL must know a parameter's type);
- ``INDEXED BY name`` and a column's unary ``+`` (SQLite's planner hints) are dropped;
- ``BEGIN IMMEDIATE`` is ``BEGIN``.

What PostgreSQL lacks and the statements call (``julianday``) the schema makes as SQL
functions. psycopg's errors are raised as the ``sqlite3`` module's classes (an
integrity error as ``sqlite3.IntegrityError``, a lost server as
``sqlite3.OperationalError``, any other as ``sqlite3.DatabaseError``): callers catch
one family of errors whichever store they use.

The full text is a ``tsvector`` column generated from a valid record's title, summary
and facts, with a GIN index; ``record_terms`` keeps how many records hold each lexeme
(the counterpart of SQLite's fts5vocab table), kept by a trigger, so that the search's
IDF rules read a term's frequency by one index seek.

psycopg (with its pool) is imported only when a PostgreSQL store is opened: it is the
``postgres`` extra, not needed by the SQLite default.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

CONNECT_TIMEOUT_S = 5
# No statement of a reader runs longer: a search is abandoned well before this.
READER_STATEMENT_TIMEOUT_MS = 5000
# A search's bitmaps of a common term's records stay exact (a lossy one is read again).
READER_WORK_MEM = "32MB"
WRITER_LOCK = 0x6B69726F  # the advisory lock the one writer holds ("kiro")
TEXT_SEARCH = "kirolearn"  # the text search configuration of the index and of queries

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
]


# Each migration's schema, as the SQLite migration it matches (exports name that one).
SQLITE_SCHEMA = {1: 12, 2: 12}


def describe(url: str) -> str:
    """The URL less its password, for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc[-1]}"))


# --- the dialect ---------------------------------------------------------------------------------

_TOKENS = re.compile(r"'(?:[^']|'')*'|\?(\d*)|%|\bINDEXED BY \w+|(?<=[\s(,])\+(?=[A-Za-z_])"
                     r"|\bBEGIN IMMEDIATE\b")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """A statement in SQLite's dialect, as PostgreSQL runs it (see the module's doc);
    its parameters are named ``p1``, ``p2``, … in SQLite's numbering."""
    highest = 0

    def one(match: re.Match) -> str:
        nonlocal highest
        text = match.group(0)
        if text.startswith("'"):
            return text.replace("%", "%%")
        if text.startswith("?"):
            number = int(match.group(1)) if match.group(1) else highest + 1
            highest = max(highest, number)
            return f"%(p{number})s"
        if text == "%":
            return "%%"
        if text == "BEGIN IMMEDIATE":
            return "BEGIN"
        return ""  # a planner hint

    return _TOKENS.sub(one, sql)


def _named(params: Sequence[Any] | None) -> dict[str, Any]:
    """Parameters by name; a NUL in a text, which PostgreSQL's text cannot hold, is
    stored as U+FFFD (SQLite keeps it)."""
    return {f"p{number}": value.replace("\x00", "\ufffd")
            if isinstance(value, str) and "\x00" in value else value
            for number, value in enumerate(params or (), 1)}


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise sqlite3.OperationalError(
            "a PostgreSQL store needs psycopg: pip install 'kirolearn[postgres]'") from exc
    return psycopg


@contextlib.contextmanager
def _as_sqlite_errors() -> Iterator[None]:
    psycopg = _psycopg()
    try:
        yield
    except psycopg.IntegrityError as exc:
        raise sqlite3.IntegrityError(str(exc).strip()) from exc
    except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
        raise sqlite3.OperationalError(str(exc).strip()) from exc
    except psycopg.Error as exc:
        raise sqlite3.DatabaseError(str(exc).strip()) from exc


class Connection:
    """A PostgreSQL connection that answers like a ``sqlite3.Connection`` in autocommit
    mode (``isolation_level=None``): ``execute`` and ``executemany`` take SQLite's
    statements and return a cursor; transactions are begun and ended by statement."""

    def __init__(self, raw: psycopg.Connection, release: Any = None):
        self.raw = raw
        self._release = release

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor:
        with _as_sqlite_errors():
            return self.raw.execute(translate(sql), _named(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> psycopg.Cursor:
        with _as_sqlite_errors():
            cursor = self.raw.cursor()
            cursor.executemany(translate(sql), [_named(row) for row in rows])
            return cursor

    def executescript(self, script: str) -> None:
        """Several statements at once, as written (no parameters, no translation)."""
        with _as_sqlite_errors():
            self.raw.execute(script.encode())

    def close(self) -> None:
        if self._release is not None:
            self._release(self.raw)
        else:
            self.raw.close()


def connect(url: str, readonly: bool = False) -> Connection:
    """A connection of its own (the writer's, the searcher's)."""
    with _as_sqlite_errors():
        raw = _psycopg().connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                              application_name="kirolearn")
        if readonly:
            _as_reader(raw)
    return Connection(raw)


def _as_reader(raw: psycopg.Connection) -> None:
    """Read only, and each statement planned for its own arguments: a search's terms
    match ten records or a hundred thousand, and the one plan psycopg's prepared
    statements settle on after five runs took seconds on the common ones. No JIT: it
    compiles for longer than these statements run. Random reads priced as the cached
    reads they are: at the default the planner read every row's text vector rather than
    the GIN index's few thousand (24 ms against 7 at 10,000 records)."""
    raw.execute("SET default_transaction_read_only = on")
    raw.execute(f"SET statement_timeout = {READER_STATEMENT_TIMEOUT_MS}")
    raw.execute("SET plan_cache_mode = force_custom_plan")
    raw.execute("SET jit = off")
    raw.execute(f"SET work_mem = '{READER_WORK_MEM}'")
    raw.execute("SET random_page_cost = 1.1")


def take_writer_lock(conn: Connection) -> None:
    """The single-writer rule across machines: one storage role writes to a database;
    a second daemon pointed at it is refused instead of interleaving its writes."""
    (taken,) = conn.execute("SELECT pg_try_advisory_lock(?)", (WRITER_LOCK,)).fetchone()
    if not taken:
        raise sqlite3.OperationalError("another kirolearn daemon is writing to this database")


_pools: dict[str, psycopg_pool.ConnectionPool] = {}
_pools_lock = threading.Lock()
POOL_SIZE = 4


@contextlib.contextmanager
def reading(url: str) -> Iterator[Connection]:
    """A read-only connection from this process's pool for the URL (the viewer's pages
    and the CLI's reads open one per piece of work: the pool keeps them warm)."""
    _psycopg()
    import psycopg_pool
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            pool = psycopg_pool.ConnectionPool(
                url, min_size=1, max_size=POOL_SIZE, open=False, name="kirolearn-readers",
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S,
                        "application_name": "kirolearn"}, configure=_as_reader)
            with _as_sqlite_errors():
                pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            _pools[url] = pool
    try:
        with _as_sqlite_errors():
            raw = pool.getconn(timeout=CONNECT_TIMEOUT_S)
    except psycopg_pool.PoolTimeout as exc:
        raise sqlite3.OperationalError(f"no connection to the database: {exc}") from exc
    conn = Connection(raw, release=pool.putconn)
    try:
        yield conn
    finally:
        conn.close()


def close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


# --- full text -----------------------------------------------------------------------------------

IDENTIFIER = re.compile(r"[^\W_]+(?:_+[^\W_]+)+")  # kirolearn_identifiers' pattern
_LETTER = re.compile(r"[^\W_]")


HYPHENATED = re.compile(r"[^\W_]+(?:-[^\W_]+)+")


def _alone(pattern: re.Pattern, word: str) -> str | None:
    """The one match of pattern in word when nothing else in it is a letter or digit."""
    found = pattern.findall(word)
    if len(found) == 1 and not _LETTER.search(pattern.sub("", word)):
        return found[0]
    return None


def identifier(word: str) -> str | None:
    """The lexeme the index keeps for a word that is one identifier joined by
    underscores (in backticks, say); None for any other word."""
    found = _alone(IDENTIFIER, word)
    return found.lower() if found else None


def index_terms(conn: Connection, words: list[str]) -> list[tuple[str, ...]]:
    """Each word's lexemes in order, as the index makes them; an identifier's, and a
    hyphenated word's, is the one it keeps for the whole word."""
    found: dict[int, list[tuple[int, str]]] = {}
    for index, position, lexeme in conn.execute(
            "SELECT w.i - 1, p, t.lexeme FROM unnest(?::text[]) WITH ORDINALITY AS w(word, i),"
            f" unnest(to_tsvector('{TEXT_SEARCH}', w.word)) AS t, unnest(t.positions) AS p",
            (words,)):
        found.setdefault(index, []).append((position, lexeme))
    terms = [tuple(lexeme for _, lexeme in sorted(found.get(i, []))) for i in range(len(words))]
    for i, word in enumerate(words):
        if whole := identifier(word):
            terms[i] = (whole,)
        elif _alone(HYPHENATED, word) and terms[i] and "-" in terms[i][0]:
            terms[i] = terms[i][:1]  # the compound (cursor-bas), then its parts
    return terms


# Ranking the newest records only (a common term), past this many ids the index of ids
# and the full-text index are read as bitmaps and intersected: the planner would read
# every row of the window instead, and check each one's words (188 ms for 78,000 rows
# at 1,000,000 records, where the bitmaps took 45 ms).
SCANNED_IDS_MAX = 20_000


@contextlib.contextmanager
def bitmap_scans_only(conn: Connection) -> Iterator[None]:
    """The statements run inside are planned without plain index scans."""
    conn.execute("BEGIN")
    try:
        conn.execute("SET LOCAL enable_indexscan = off")
        yield
    finally:
        conn.execute("COMMIT")


@contextlib.contextmanager
def terms_counted_after(conn: Connection) -> Iterator[None]:
    """Records written in bulk, in the caller's transaction: ``record_terms`` is counted
    again once, after them, instead of row by row by its trigger (which updates the
    common terms' rows once for each record), and the table is analyzed."""
    conn.execute("ALTER TABLE memory_records DISABLE TRIGGER memory_records_terms")
    yield
    conn.execute("DELETE FROM record_terms")
    conn.execute("INSERT INTO record_terms SELECT term, count(*) FROM memory_records,"
                 " unnest(tsvector_to_array(search)) AS t(term) GROUP BY term")
    conn.execute("ALTER TABLE memory_records ENABLE TRIGGER memory_records_terms")
    # The planner's figures for the new rows now, not when autovacuum next comes: a
    # search planned without them read whole windows (190 ms at 100,000 records).
    conn.execute("ANALYZE memory_records")


def tsquery(phrases: Sequence[str]) -> tuple[str, list[str]]:
    """The SQL of a query matching any of these phrases (its words in order; an
    identifier by its own lexeme), and its arguments."""
    parts, args = [], []
    for phrase in phrases:
        whole = identifier(phrase)
        if whole is not None:
            parts.append("CAST(? AS tsquery)")
            args.append(f"'{whole}'")  # letters, digits and underscores: nothing to escape
        elif _alone(HYPHENATED, phrase):
            # The index keeps a hyphenated word whole too (cursor-based: cursor-bas,
            # cursor, base): its lexemes together find it without reading positions.
            parts.append(f"plainto_tsquery('{TEXT_SEARCH}', ?)")
            args.append(phrase)
        else:
            parts.append(f"phraseto_tsquery('{TEXT_SEARCH}', ?)")
            args.append(phrase)
    return " || ".join(parts), args
