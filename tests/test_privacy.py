"""The scrubber: <private> spans and secrets never reach storage, and ordinary code does."""

from __future__ import annotations

import dataclasses
import fcntl
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from secret_corpus import KINDS, PRIVATE, SECRETS

from kirolearn import paths, privacy
from kirolearn.contract import canonical_json
from kirolearn.privacy import (
    ScrubbedRecord,
    Scrubber,
    marker,
    may_need_scrub,
    redact,
    rules,
    scrub,
    scrub_record,
    scrub_stale,
    scrub_text,
    scrubber,
    version,
)
from kirolearn.supervisor.states import RET_PIDFILE

P = marker("private")
plain = st.text(alphabet=st.characters(blacklist_characters="<>&%\\"), max_size=40)
secret_words = st.text(alphabet="qxzjkvw", min_size=6, max_size=20)  # never in `plain` checks


def test_the_corpus_is_as_large_as_promised():
    assert len(SECRETS) >= 150 and len(KINDS) >= 45 and len(PRIVATE) >= 20
    assert len({secret for _, _, secret in SECRETS}) == len(SECRETS)


@pytest.mark.parametrize("kind, text, secret", SECRETS, ids=[k for k, _, _ in SECRETS])
def test_every_secret_of_the_corpus_is_redacted_with_its_kind(kind, text, secret):
    out, kinds = redact(text)
    assert secret not in out
    assert kinds and all(f"[REDACTED:{k}]" in out for k in kinds)
    assert may_need_scrub(canonical_json({"type": "text", "content": text}))


@pytest.mark.parametrize("name, text", PRIVATE, ids=[n for n, _ in PRIVATE])
def test_private_as_people_type_it(name, text):
    out, kinds = redact(text)
    assert "HIDDEN" not in out and "private" in kinds


@given(before=plain, secret=secret_words, after=plain)
def test_private_content_never_survives(before, secret, after):
    out = scrub_text(f"{before}<private>{secret}</private>{after}")
    assert secret not in out.replace(before, "").replace(after, "")
    assert P in out


pieces = st.one_of(
    st.text(max_size=30), st.sampled_from([text for _, text, _ in SECRETS]),
    st.sampled_from([text for _, text in PRIVATE]),
    st.sampled_from(["password=", "token: ", "[REDACTED:x]", "://", "@", "'", '"', " ", "\n",
                     "-p", "mysql ", "Authorization: ", "Bearer ", "<private>", "</private>",
                     "&lt;", "eyJ", "=", "PASS", "_key", "AKIA"]))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pieces, max_size=8))
def test_scrub_is_idempotent_and_never_grows_a_secret_back(parts):
    once = scrub_text("".join(parts))
    assert scrub_text(once) == once
    lines = "\n".join(parts)  # each corpus text whole on its lines
    once = scrub_text(lines)
    assert scrub_text(once) == once
    for _, source, secret in SECRETS:
        if source in parts:
            assert secret not in once


# Every form of a secret word of the keyed rule, and keys that name one.
KEYWORDS = ["pass", "password", "passwd", "passphrase", "pwd", "secret", "token", "credential",
            "credentials", "api_key", "api-key", "apikey", "access_key", "accesskey", "auth_key",
            "private_key", "privkey", "priv-key", "account_key", "client_key", "service_key",
            "db_key", "dbkey", "database_key", "key_pass", "keypass", "sharedaccesskey",
            "sharedaccesssignature", "signing_key", "encryption_key", "contrasena", "contraseña"]
secret_word = st.sampled_from(KEYWORDS).flatmap(
    lambda w: st.sampled_from([w, w.upper(), w.title()]))
value = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEF0123456789_-", min_size=4,
                max_size=70)
assignment = st.tuples(
    st.sampled_from(["", "DB_", "my", "cloudant_", "ibm_cloud_iam_", "softlayer-", "x.", "ſ"]),
    secret_word, st.sampled_from(["", "s", "_name", "Error", "-x"]),
    st.sampled_from(["=", ": ", " = ", ":=", "=>", "\": \"", "' : '", " "]),
    value, st.sampled_from(["", "\"", "'", " ", "\n", ";"]),
).map("".join)
keyed_pieces = st.one_of(
    pieces, assignment, assignment,
    st.sampled_from(KEYWORDS).flatmap(lambda w: st.sampled_from([w, w.upper(), w.title()])),
    st.sampled_from(["cloudant", "ibm_cloud_iam", "softlayer", "sl_", "cl", "DB_", "my"]),
    st.sampled_from(["=", ": ", " = ", ":=", "=>", "\"", "'", "[", "]", " ", "\n", "ſ", "K"]),
    st.text(alphabet="0123456789abcdefABCDEF", min_size=20, max_size=70),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-", min_size=20, max_size=50))


def test_every_secret_word_begins_with_one_of_the_keyed_rules_starts():
    for word in KEYWORDS:
        assert re.fullmatch(rules._KEYWORD, word, re.IGNORECASE), word
        assert word.lower().startswith(rules._KEYWORD_STARTS) or not word.isascii(), word


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(keyed_pieces, max_size=10))
def test_the_rules_tried_where_they_can_match_find_what_trying_everywhere_finds(parts):
    """The keyed rule tried only where a secret word starts, and detect-secrets' rules of
    long values only beside a long token, redact what every rule tried at every place
    redacts."""
    fast = scrubber()
    everywhere = [dataclasses.replace(rule, starts=(), long=False) for rule in fast.rules]
    text = "".join(parts)
    assert fast.redact(text) == Scrubber(everywhere).redact(text)
    short = text.isascii() and not rules.LONG_TOKEN.search(text)
    for rule, anywhere in zip(fast.rules, everywhere, strict=True):
        assert rule.spans(text) == anywhere.spans(text)
        if rule.long and short:
            assert anywhere.spans(text) == [], rule.source


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pieces, max_size=6), st.lists(st.lists(pieces, max_size=4), max_size=3))
def test_a_record_scrubbed_with_todays_rules_needs_no_second_pass(summary, facts):
    """What a search hands out of a record marked with today's rules (as stored) is what
    scrubbing it again would give: skipping the second pass loses nothing."""
    record = scrub_record({"record_id": "R1", "title": "".join(summary[:2]),
                           "summary": "".join(summary), "facts": ["".join(f) for f in facts]})
    [kept] = scrub_stale([{**record, "scrubbed_with": version()}])
    [again] = scrub_stale([{**record, "scrubbed_with": "another"}])
    assert kept == again == record


def test_a_record_scrubbed_here_with_todays_rules_is_not_scrubbed_again():
    raw = {"record_id": "R1", "title": "rotate", "summary": "password=hunter2hunter2",
           "facts": ["token: abcdefgh12345678"],
           "changes": "AWS_KEY = 'AKIAIOSFODNN7EXAMPLE'"}  # the lines its edits changed
    once = scrub_record(raw)
    assert "hunter2" not in once["summary"] and "abcdefgh" not in once["facts"][0]
    assert "AKIAIOSFODNN7EXAMPLE" not in once["changes"]
    assert scrub_record(once) is once  # nothing to do: the same object
    planted = ScrubbedRecord(raw)  # raw text under an old version's mark
    planted.scrubbed_with = "another"
    assert scrub_record(planted) == once
    assert scrub_record(dict(once)) == once and scrub_record(dict(once)) is not once


def test_a_search_scrubs_a_record_of_other_rules_and_what_the_working_tree_told():
    secret = "AKIAQWERTYUIOPASDFGH"
    stored = {"record_id": "R1", "title": f"Deploy with {secret}", "summary": "",
              "facts": [secret], "stale": {"why": f"gone from branch fix-{secret}", "at": "x"}}
    [older] = scrub_stale([{**stored, "scrubbed_with": None}])
    [today] = scrub_stale([{**stored, "scrubbed_with": version()}])
    assert secret not in json.dumps(older) and "scrubbed_with" not in older
    assert today["stale"]["why"] == "gone from branch fix-[REDACTED:aws-access-key]"
    assert today["title"] == stored["title"]  # trusted: storage scrubbed it with these rules


def test_the_rules_version_names_the_rules_and_the_code_that_runs_them():
    today = Scrubber(rules.compile_all(rules.from_detect_secrets()))
    fewer = Scrubber(rules.compile_all(rules.from_detect_secrets()[1:]))
    assert today.version == version() and len(today.version) == 16
    assert fewer.version != today.version


@given(st.text(max_size=200))
def test_scrub_leaves_no_open_tag(value):
    once = scrub_text(value)
    assert scrub_text(once) == once
    assert "<private>" not in once.lower()


@given(secret=secret_words, key=secret_words)
def test_every_string_of_a_json_body_is_scrubbed_keys_included(secret, key):
    body = {"type": "json", "data": {
        f"<private>{key}</private>": [f"x <private>{secret}</private>"],
        "nested": {"turns": [{"content": f"<PRIVATE>{secret}</PRIVATE>"}]},
        "n": 3, "ok": True, "none": None}}
    out = scrub(body)
    flat = repr(out)
    assert secret not in flat and key not in flat
    assert out["data"]["n"] == 3 and out["data"]["ok"] is True
    assert body["data"]["n"] == 3 and f"<private>{key}</private>" in body["data"]  # not mutated


SECRET_KEYS = ["password", "DB_PASSWORD", "clientSecret", "api_key", "apiKey", "private_key",
               "private_key_id", "token", "access_token", "pwd", "passwd", "secret",
               "client_secret", "auth", "x-api-key", "AWS_SECRET_ACCESS_KEY", "passphrase",
               "refreshToken", "Authorization", "storePassword", "credentials"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="abcdef ghij.-_/", max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(alphabet="abcdefgh_", min_size=1, max_size=10), inner, max_size=4),
    max_leaves=12)
secret_values = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=24),  # a plain word
    st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789!@#$%^&*", min_size=6,
            max_size=40).filter(lambda v: not v.startswith(("$", "%"))),
    st.sampled_from([secret for _, _, secret in SECRETS])).filter(rules.secret_value)


def _insert(tree: object, path: list[int], item: dict) -> object:
    """tree with item put at a place chosen by path (into a dict as a key, into a list as an
    element; a leaf becomes a list holding it)."""
    if not path:
        return [tree, item]
    step, rest = path[0], path[1:]
    if isinstance(tree, dict) and tree:
        key = sorted(tree)[step % len(tree)]
        return {**tree, key: _insert(tree[key], rest, item)}
    if isinstance(tree, list) and tree:
        index = step % len(tree)
        return [*tree[:index], _insert(tree[index], rest, item), *tree[index + 1:]]
    return [tree, item]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(tree=json_values, path=st.lists(st.integers(0, 10), max_size=6),
       key=st.sampled_from(SECRET_KEYS), secret=secret_values)
def test_a_secret_under_a_secret_key_at_any_depth_never_reaches_storage(tree, path, key, secret):
    """A tool's input is JSON: whatever a value under a key such as ``password`` looks
    like (a plain word too), ingest stores none of it."""
    from helpers.events import make_event

    from kirolearn.roles.ingest import checks

    def body(value: str) -> dict:
        return {"type": "json", "data": {"tool_name": "http", "tool_input": _insert(
            tree, path, {key: value, "note": "kept"})}}

    # the secret is no other part of the body ("type", "json": the body's own keys)
    assume(secret not in canonical_json(body("")) + "tool_use")
    event = make_event("tool_use", body=body(secret))
    stored, _ = checks.prepare(event)
    assert secret not in stored["body_json"]
    assert "kept" in stored["body_json"]


@pytest.mark.parametrize("key", sorted(rules.SECRET_KEYS))
def test_every_secret_key_passes_the_pre_check(key):
    """A body holding only such a key is scrubbed: its name holds a rule's needle."""
    assert rules.secret_key_kind(key)
    assert may_need_scrub(canonical_json({"type": "json", "data": {key: "plain"}}))


@pytest.mark.parametrize("key", ["max_tokens", "token_count", "password_hint", "tokens",
                                 "key", "session_id", "tokenizer", "passed", "author",
                                 "api_key_id", "secret_name", "keyword", "monkey"])
def test_keys_about_secrets_are_not_secret_keys(key):
    assert rules.secret_key_kind(key) is None


def test_scrub_counts_what_it_redacts_by_kind():
    counts: Counter = Counter()
    scrub({"a": ["AKIAIOSFODNN7EXAMPLE", "<private>x</private>"], "b": "DB_PASSWORD=hunter2x"},
          counts)
    assert counts == {"aws-access-key": 1, "private": 1, "password": 1}


@pytest.mark.parametrize("text, expected", [
    ("a <private>b</private> c", f"a {P} c"),
    ("<private>outer <private>inner</private> still</private> after", f"{P} after"),
    ("keep <private>to the end", f"keep {P}"),
    ("two <private>x</private> and <private>y</private>", f"two {P} and {P}"),
    ("stray </private> closing", "stray </private> closing"),
])
def test_private_tag_rules(text, expected):
    assert scrub_text(text) == expected


@pytest.mark.parametrize("text", [
    "refactor the storage layer to use SQLite WAL mode",
    "ran pytest -q -> 3 failed",
    "the password field must be hashed with argon2",
    "def get_token(self): return self._token",
    "skipped tokens: 12",
    "max_tokens=4096",
    "author: Jonathan Smith",
    "password = os.environ['DB_PASSWORD']",
    "token: Optional[str] = None",
    "self.username, self.password = credentials",
    "tokenizer = Tokenizer()",
    "compass = north",
    "basic configuration of the bearer of bad news",
    "token_type = 'bearer'",
    "TOKEN_NAME = intern('name')",
    "api_key = get_api_key()",
    "Use --token TOKEN to log in",
    "docker login --password-stdin",
    '"integrity": "sha512-Dkm5tBG9pPc2Z0Rj9J8KZkKUSZnHa5Ee8dcnGkYdK4XSy1dO8gqg4vQ+FEQaf9PxBf=="',
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "123e4567-e89b-12d3-a456-426614174000",
])
def test_ordinary_text_is_left_alone(text):
    assert scrub_text(text) == text


@given(st.one_of(st.text(max_size=80), st.sampled_from([t for _, t, _ in SECRETS])),
       st.text(max_size=20))
def test_the_cheap_precheck_never_misses_what_scrub_would_change(value, key):
    body = {"type": "json", "data": {key: [value, {"k": value}]}}
    if scrub(body) != body:
        assert may_need_scrub(canonical_json(body))


def test_text_with_a_lone_surrogate_is_still_scrubbed():
    assert scrub_text("token=abcdefgh1 \ud800") == f"token={marker('token')} \ud800"
    assert scrub_text("<private>x\udfff</private>") == P


def test_every_detector_of_detect_secrets_is_described_or_left_out_with_a_reason():
    """An update of detect-secrets that adds a detector fails here until its needles
    are written down (it would otherwise run, gated by a long token only)."""
    found = {item["detector"] for item in rules.from_detect_secrets()}
    assert found <= set(rules.DETECTORS)
    assert not found & set(rules.LEFT_OUT)


def test_saved_rules_are_what_a_shim_loads(tmp_path):
    home = paths.Home(tmp_path)
    saved = rules.save(home)
    assert (tmp_path / "secret-rules.json").stat().st_mode & 0o777 == 0o600
    assert rules.load(home) == saved
    (tmp_path / "secret-rules.json").write_text(json.dumps({"kirolearn": "0.0.0", "rules": []}))
    assert rules.load(home) == saved  # another version's file: those kirolearn ships


def test_the_shipped_rules_are_those_of_the_installed_detect_secrets():
    """Regenerate after an update of detect-secrets: python -c 'import json,
    importlib.metadata as m; from kirolearn.privacy import rules;
    rules.SHIPPED.write_text(json.dumps({"detect-secrets": m.version("detect-secrets"),
    "rules": rules.from_detect_secrets()}, indent=1) + "\\n")'"""
    shipped = json.loads(rules.SHIPPED.read_text())
    assert shipped["detect-secrets"] == importlib.metadata.version("detect-secrets")
    assert shipped["rules"] == rules.from_detect_secrets()


def test_ingest_saves_the_shipped_rules_without_importing_detect_secrets(tmp_path,
                                                                          monkeypatch):
    """The shipped rules are the installed detect-secrets' (above): saving them costs
    no import of it; for another version of detect-secrets, the library's own are."""
    code = ("import sys, pathlib; from kirolearn import paths; from kirolearn.privacy import"
            " rules; rules.save(paths.Home(pathlib.Path(sys.argv[1])));"
            " print('detect_secrets' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == ["False"]
    assert rules.load(paths.Home(tmp_path)) == rules.from_detect_secrets()
    monkeypatch.setattr(rules, "_shipped_for", lambda version: None)  # another version
    (tmp_path / "secret-rules.json").unlink()
    assert rules.save(paths.Home(tmp_path)) == rules.from_detect_secrets()


def test_the_supervisor_scrubs_its_roles_logs_without_importing_detect_secrets(tmp_path):
    """It builds its scrubber as it starts, from the saved rules: the library would cost
    it 13 MB for good. (The pidfile is held here, so it stops right after.)"""
    home = paths.Home(tmp_path)
    home.ensure_layout()
    held = os.open(home.pidfile(), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    code = ("import sys; from kirolearn import privacy;"
            " from kirolearn.supervisor.__main__ import run_daemon;"
            " print(run_daemon(0, False), privacy._scrubber is not None,"
            " 'detect_secrets' in sys.modules)")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "KIROLEARN_HOME": str(tmp_path)})
    finally:
        os.close(held)
    assert out.stdout.split() == [str(RET_PIDFILE), "True", "False"], out.stderr


@pytest.mark.parametrize("saved", [True, False], ids=["saved", "none saved"])
def test_a_shim_scrubbing_never_imports_detect_secrets(tmp_path, saved):
    """With the rules ingest saved, or none (a connected machine has no ingest): those
    kirolearn ships."""
    if saved:
        rules.save(paths.Home(tmp_path))
    code = ("import sys, pathlib; from kirolearn import paths, privacy;"
            " privacy.use_saved_rules(paths.Home(pathlib.Path(sys.argv[1])));"
            " print(privacy.scrub_text('DB_PASSWORD=hunter2x AKIAIOSFODNN7EXAMPLE'));"
            " print('detect_secrets' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert out[:2] == ["DB_PASSWORD=[REDACTED:password] [REDACTED:aws-access-key]", "False"]


def test_false_positives_on_ordinary_code_prose_lockfiles_and_ids_stay_near_zero():
    """benchmarks/scrub.py --quick: thousands of lines of real source and docs."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "scrub.py"
    out = subprocess.run([sys.executable, str(bench), "--quick"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    rows = {row["text"]: row for row in map(json.loads, out.splitlines())}
    assert rows["corpus"]["recall"] == 1.0
    assert rows["corpus"]["private_redacted"] == rows["corpus"]["private_variants"]
    assert rows["formats"]["kinds"] >= 150 and rows["formats"]["recall"] == 1.0
    assert rows["code"]["lines"] > 5000 and rows["code"]["false_positive_rate"] < 0.001
    for text in ("prose", "lockfile", "uuids", "hashes"):
        assert rows[text]["lines"] > 100 and rows[text]["false_positive_lines"] == 0, text


def _merged_naively(spans, markers):
    pieces = []
    for start, end, kind in spans:
        for m_start, m_end in markers:
            if m_start <= start < m_end:
                start = m_end
            if m_start < end <= m_end:
                end = m_start
        if end > start:
            pieces.append((start, end, kind))
    pieces.sort(key=lambda s: (s[0], -s[1]))
    merged = []
    for start, end, kind in pieces:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end), merged[-1][2])
        else:
            merged.append((start, end, kind))
    return merged


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 30), st.sampled_from("ab"))),
       st.lists(st.tuples(st.integers(0, 200), st.integers(1, 20))))
def test_spans_are_merged_around_markers_as_one_by_one(spans, marks):
    """The markers are looked up, not walked for each span: the same answer as taking
    each marker in turn, for markers in order and apart (as a text's are)."""
    markers, last = [], -1
    for start, size in sorted(marks):
        if start >= last:
            markers.append((start, start + size))
            last = start + size
    spans = [(start, start + size, kind) for start, size, kind in spans]
    assert privacy._merged(spans, markers) == _merged_naively(spans, markers)
