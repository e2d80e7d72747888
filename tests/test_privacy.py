"""The privacy scrub: <private> spans and secrets never reach storage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kirolearn.contract import canonical_json
from kirolearn.privacy import REDACTED, may_need_scrub, scrub, scrub_text

plain = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40)
secret_words = st.text(alphabet="qxzjkvw", min_size=6, max_size=20)  # never in `plain` checks


@given(before=plain, secret=secret_words, after=plain)
def test_private_content_never_survives(before, secret, after):
    out = scrub_text(f"{before}<private>{secret}</private>{after}")
    assert secret not in out.replace(before, "").replace(after, "")
    assert out == scrub_text(before) + REDACTED + scrub_text(after)


@given(st.text(max_size=200))
def test_scrub_is_idempotent_and_leaves_no_open_tag(value):
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


def test_message_turns_are_each_scrubbed():
    body = {"type": "message", "turns": [{"role": "user", "content": "a <private>b</private>"},
                                         {"role": "assistant", "content": "<private>c"}]}
    assert scrub(body)["turns"] == [{"role": "user", "content": "a " + REDACTED},
                                    {"role": "assistant", "content": REDACTED}]


@pytest.mark.parametrize("text, expected", [
    ("a <private>b</private> c", f"a {REDACTED} c"),
    ("<private>outer <private>inner</private> still</private> after", f"{REDACTED} after"),
    ("keep <private>to the end", f"keep {REDACTED}"),
    ("two <private>x</private> and <private>y</private>", f"two {REDACTED} and {REDACTED}"),
    ("stray </private> closing", "stray </private> closing"),
])
def test_private_tag_rules(text, expected):
    assert scrub_text(text) == expected


SECRETS = [
    ("aws key AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("token ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
    ("github_pat_" + "A" * 22 + "_" + "b" * 59, "github_pat_"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("OPENAI_KEY sk-proj-" + "x" * 40, "sk-proj-" + "x" * 40),
    ("anthropic sk-ant-api03-" + "Y" * 40, "sk-ant-api03-" + "Y" * 40),
    ("stripe sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("google AIza" + "S" * 35, "AIza" + "S" * 35),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
     "MIIEpAIBAAKCAQEA"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE (cut)", "b3BlbnNzaC1rZXktdjE"),
    ("curl -H 'Authorization: Bearer abcdef123456789'", "abcdef123456789"),
    ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    ('{"api_key": "k-123456789"}', "k-123456789"),
    ("export GITHUB_TOKEN=abc123def456", "abc123def456"),
    ("client_secret: 'shh-very-secret'", "shh-very-secret"),
    ("postgres://admin:s3cr3tpw@db.local/app", "s3cr3tpw"),
]


@pytest.mark.parametrize("text, secret", SECRETS)
def test_secret_corpus_is_redacted(text, secret):
    out = scrub_text(text)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize("text", [
    "refactor the storage layer to use SQLite WAL mode",
    "ran pytest -q -> 3 failed",
    "the password field must be hashed with argon2",
    "def get_token(self): return self._token",
    "skipped tokens: 12",
    "max_tokens=4096",
    "author: Jonathan Smith",
])
def test_ordinary_text_is_left_alone(text):
    assert scrub_text(text) == text


@given(st.one_of(st.text(max_size=80), st.sampled_from([t for t, _ in SECRETS])),
       st.text(max_size=20))
def test_the_cheap_precheck_never_misses_what_scrub_would_change(value, key):
    body = {"type": "json", "data": {key: [value, {"k": value}]}}
    if scrub(body) != body:
        assert may_need_scrub(canonical_json(body))


def test_text_with_a_lone_surrogate_is_still_scrubbed():
    assert scrub_text("token=abcdefgh \ud800") == f"token={REDACTED} \ud800"
    assert scrub_text("<private>x\udfff</private>") == REDACTED
